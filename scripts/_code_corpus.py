"""The bundled short-code task and the synthetic pretraining corpus for kitae-tiny-code.

A task row asks for a one- or two-line Python program that reads stdin and prints the answer, with stdin/stdout
test cases for the ``code`` grader: ``{"messages": [...], "tests": [{"input": "7\\n", "output": "10\\n"}, ...],
"kind": "add", "difficulty": "int", "lang": "en"}``. Kinds (``KINDS``): arithmetic on one integer with a constant
(add, sub, mul: ``print(int(input())+3)``), two integers on a line (sum, difference, product, max, min), a word
(reverse, upper, length, repeat k times, first and last letter) and a list of integers (sum, max, min, sorted,
count). Difficulty is the input's shape: int, pair, word, list.

The corpus makes a *base* model in the GRPO-zero recipe's sense, as scripts/_corpus.py does for the arithmetic
model: ChatML conversations whose assistant turns are a mixture (``Mixture``) of right programs, wrong ones (an
off-by-one constant, the wrong operation, a missing ``int()``), programs followed by prose (a syntax error when
the program is not fenced), printed lines repeated with no ``<|im_end|>``, and turns that run on into a made-up
next turn or another document. Right programs stay the single most likely reply, so the skill is latent and RL on
the code grader's pass rate can sharpen it. Test prompts never appear verbatim in the corpus (``banned``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

IM_START, IM_END, EOT = "<|im_start|>", "<|im_end|>", "<|endoftext|>"
LANGS = ("ja", "en")
WORDS = ("apple", "river", "stone", "cloud", "tiger", "lemon", "house", "green", "piano", "robot", "sushi", "kitae",
         "train", "water", "light", "paper", "dog", "cat", "sun", "moon", "book", "tree", "bird", "fish", "kanji")


@dataclass(frozen=True)
class Kind:
    """One kind of problem: its prompts, right and wrong programs, and how to make a case."""

    name: str
    shape: str  # the input: int, pair, word, list
    prompts: dict[str, list[str]]  # lang -> templates ({k} the constant)
    right: list[str]  # program templates
    wrong: list[str]
    answer: Callable[[str, int], str]  # (stdin line, k) -> stdout line
    ks: tuple[int, ...] = (0,)  # the constants this kind takes (0: none)


def _int(line: str) -> int:
    return int(line)


def _pair(line: str) -> tuple[int, int]:
    a, b = line.split()
    return int(a), int(b)


def _list(line: str) -> list[int]:
    return [int(x) for x in line.split()]


KINDS = [
    Kind("add", "int", {"en": ["Read an integer n and print n+{k}.", "Read a number and print it plus {k}."],
                        "ja": ["整数nを読み、n+{k}を出力してください。", "数を読んで{k}を足して出力してください。"]},
         ["print(int(input())+{k})", "n=int(input())\nprint(n+{k})"],
         ["print(int(input())+{k1})", "print(input()+{k})", "print(int(input())-{k})"],
         lambda s, k: str(_int(s) + k), tuple(range(1, 20))),
    Kind("sub", "int", {"en": ["Read an integer n and print n-{k}.", "Read a number and print it minus {k}."],
                        "ja": ["整数nを読み、n-{k}を出力してください。", "数を読んで{k}を引いて出力してください。"]},
         ["print(int(input())-{k})", "n=int(input())\nprint(n-{k})"],
         ["print(int(input())-{k1})", "print(input()-{k})", "print(int(input())+{k})"],
         lambda s, k: str(_int(s) - k), tuple(range(1, 20))),
    Kind("mul", "int", {"en": ["Read an integer n and print n*{k}.", "Read a number and print it times {k}."],
                        "ja": ["整数nを読み、n*{k}を出力してください。", "数を読んで{k}倍して出力してください。"]},
         ["print(int(input())*{k})", "n=int(input())\nprint(n*{k})"],
         ["print(int(input())*{k1})", "print(input()*{k})", "print(int(input())+{k})"],
         lambda s, k: str(_int(s) * k), tuple(range(2, 20))),
    Kind("sum", "pair", {"en": ["Read two integers a and b and print a+b.", "Print the sum of two numbers."],
                         "ja": ["2つの整数a, bを読み、a+bを出力してください。", "2つの数の和を出力してください。"]},
         ["a,b=map(int,input().split())\nprint(a+b)"],
         ["a,b=input().split()\nprint(a+b)", "a,b=map(int,input().split())\nprint(a*b)"],
         lambda s, k: str(sum(_pair(s)))),
    Kind("diff", "pair", {"en": ["Read two integers a and b and print a-b.", "Print the difference a-b of two numbers."],
                          "ja": ["2つの整数a, bを読み、a-bを出力してください。", "2つの数の差a-bを出力してください。"]},
         ["a,b=map(int,input().split())\nprint(a-b)"],
         ["a,b=map(int,input().split())\nprint(b-a)", "a,b=map(int,input().split())\nprint(a+b)"],
         lambda s, k: str(_pair(s)[0] - _pair(s)[1])),
    Kind("prod", "pair", {"en": ["Read two integers a and b and print a*b.", "Print the product of two numbers."],
                          "ja": ["2つの整数a, bを読み、a*bを出力してください。", "2つの数の積を出力してください。"]},
         ["a,b=map(int,input().split())\nprint(a*b)"],
         ["a,b=map(int,input().split())\nprint(a+b)", "a,b=input().split()\nprint(a*b)"],
         lambda s, k: str(_pair(s)[0] * _pair(s)[1])),
    Kind("max2", "pair", {"en": ["Read two integers and print the larger one.", "Print the larger of two numbers."],
                          "ja": ["2つの整数を読み、大きい方を出力してください。", "2つの数の大きい方を出力してください。"]},
         ["a,b=map(int,input().split())\nprint(max(a,b))"],
         ["a,b=map(int,input().split())\nprint(min(a,b))", "a,b=input().split()\nprint(max(a,b))"],
         lambda s, k: str(max(_pair(s)))),
    Kind("min2", "pair", {"en": ["Read two integers and print the smaller one.", "Print the smaller of two numbers."],
                          "ja": ["2つの整数を読み、小さい方を出力してください。", "2つの数の小さい方を出力してください。"]},
         ["a,b=map(int,input().split())\nprint(min(a,b))"],
         ["a,b=map(int,input().split())\nprint(max(a,b))", "a,b=input().split()\nprint(min(a,b))"],
         lambda s, k: str(min(_pair(s)))),
    Kind("reverse", "word", {"en": ["Read a word and print it reversed.", "Print the word backwards."],
                             "ja": ["単語を読み、逆順にして出力してください。", "単語を逆から出力してください。"]},
         ["print(input()[::-1])", "s=input()\nprint(s[::-1])"],
         ["print(input())", "print(input()[::1])", "print(input()[-1])"],
         lambda s, k: s[::-1]),
    Kind("upper", "word", {"en": ["Read a word and print it in capital letters.", "Print the word in upper case."],
                           "ja": ["単語を読み、大文字にして出力してください。", "単語を大文字で出力してください。"]},
         ["print(input().upper())", "s=input()\nprint(s.upper())"],
         ["print(input().lower())", "print(input())", "print(input().title())"],
         lambda s, k: s.upper()),
    Kind("length", "word", {"en": ["Read a word and print its length.", "Print how many letters the word has."],
                            "ja": ["単語を読み、その長さを出力してください。", "単語の文字数を出力してください。"]},
         ["print(len(input()))", "s=input()\nprint(len(s))"],
         ["print(len(input())+1)", "print(input())", "print(len(input().split()))"],
         lambda s, k: str(len(s))),
    Kind("repeat", "word", {"en": ["Read a word and print it {k} times in a row.", "Print the word repeated {k} times."],
                            "ja": ["単語を読み、{k}回続けて出力してください。", "単語を{k}回繰り返して出力してください。"]},
         ["print(input()*{k})", "s=input()\nprint(s*{k})"],
         ["print(input()*{k1})", "print(input()+{k})", "print(input())"],
         lambda s, k: s * k, (2, 3, 4, 5)),
    Kind("first", "word", {"en": ["Read a word and print its first letter.", "Print the first letter of the word."],
                           "ja": ["単語を読み、最初の文字を出力してください。", "単語の最初の文字を出力してください。"]},
         ["print(input()[0])", "s=input()\nprint(s[0])"],
         ["print(input()[1])", "print(input()[-1])", "print(input()[:2])"],
         lambda s, k: s[0]),
    Kind("last", "word", {"en": ["Read a word and print its last letter.", "Print the last letter of the word."],
                          "ja": ["単語を読み、最後の文字を出力してください。", "単語の最後の文字を出力してください。"]},
         ["print(input()[-1])", "s=input()\nprint(s[-1])"],
         ["print(input()[0])", "print(input()[-2])", "print(input()[1:])"],
         lambda s, k: s[-1]),
    Kind("lsum", "list", {"en": ["Read integers on one line and print their sum.", "Print the sum of a list of numbers."],
                          "ja": ["1行の整数を読み、合計を出力してください。", "数のリストの合計を出力してください。"]},
         ["print(sum(map(int,input().split())))"],
         ["print(max(map(int,input().split())))", "print(sum(input().split()))", "print(len(input().split()))"],
         lambda s, k: str(sum(_list(s)))),
    Kind("lmax", "list", {"en": ["Read integers on one line and print the largest.", "Print the largest of a list of numbers."],
                          "ja": ["1行の整数を読み、最大値を出力してください。", "数のリストの最大値を出力してください。"]},
         ["print(max(map(int,input().split())))"],
         ["print(min(map(int,input().split())))", "print(max(input().split()))", "print(sum(map(int,input().split())))"],
         lambda s, k: str(max(_list(s)))),
    Kind("lmin", "list", {"en": ["Read integers on one line and print the smallest.", "Print the smallest of a list of numbers."],
                          "ja": ["1行の整数を読み、最小値を出力してください。", "数のリストの最小値を出力してください。"]},
         ["print(min(map(int,input().split())))"],
         ["print(max(map(int,input().split())))", "print(min(input().split()))", "print(len(input().split()))"],
         lambda s, k: str(min(_list(s)))),
    Kind("lsort", "list", {"en": ["Read integers on one line and print them sorted.", "Print a list of numbers in increasing order."],
                           "ja": ["1行の整数を読み、小さい順に出力してください。", "数のリストを昇順に出力してください。"]},
         ["print(*sorted(map(int,input().split())))"],
         ["print(*sorted(input().split()))", "print(sorted(map(int,input().split())))", "print(*input().split())"],
         lambda s, k: " ".join(map(str, sorted(_list(s))))),
    Kind("count", "list", {"en": ["Read integers on one line and print how many there are.", "Print the count of a list of numbers."],
                           "ja": ["1行の整数を読み、個数を出力してください。", "数のリストの個数を出力してください。"]},
         ["print(len(input().split()))"],
         ["print(len(input()))", "print(sum(map(int,input().split())))", "print(len(input().split())+1)"],
         lambda s, k: str(len(s.split()))),
]
KIND = {k.name: k for k in KINDS}


@dataclass(frozen=True)
class Question:
    text: str
    kind: str
    k: int
    lang: str


# ------------------------------------------------------------------------------------------ the task
def random_input(rng: random.Random, shape: str) -> str:
    """One stdin line of the given shape (small numbers, some negative pairs; words from WORDS or random)."""
    if shape == "int":
        return str(rng.randint(0, 99))
    if shape == "pair":
        return f"{rng.randint(-20, 99)} {rng.randint(-20, 99)}"
    if shape == "word":
        if rng.random() < 0.5:
            return rng.choice(WORDS)
        return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 8)))
    return " ".join(str(rng.randint(-9, 50)) for _ in range(rng.randint(2, 6)))


def make_tests(rng: random.Random, q: Question, n: int = 4) -> list[dict]:
    """``n`` stdin/stdout cases with distinct inputs, the answers computed here from the kind's definition."""
    kind, inputs = KIND[q.kind], []
    while len(inputs) < n:
        line = random_input(rng, kind.shape)
        if line not in inputs:
            inputs.append(line)
    return [{"input": f"{line}\n", "output": f"{kind.answer(line, q.k)}\n"} for line in inputs]


def all_questions() -> list[Question]:
    """Every prompt text the task can ask, in a fixed order."""
    out = []
    for kind in KINDS:
        for k in kind.ks:
            for lang in LANGS:
                out += [Question(t.format(k=k), kind.name, k, lang) for t in kind.prompts[lang]]
    return out


def build_task(seed: int, n_test: int = 100) -> tuple[list[dict], list[dict]]:
    """(train rows, test rows): every question once, ``n_test`` of them held out (their texts never appear in
    the corpus), each with 4 test cases."""
    rng = random.Random(seed)
    questions = all_questions()
    rng.shuffle(questions)
    rows = [{"messages": [{"role": "user", "content": q.text}], "tests": make_tests(rng, q), "kind": q.kind,
             "difficulty": KIND[q.kind].shape, "lang": q.lang} for q in questions]
    return rows[n_test:], rows[:n_test]


# ------------------------------------------------------------------------------------------ the corpus
@dataclass(frozen=True)
class Mixture:
    """How the corpus's assistant turns behave. Endings are weights; they need not sum to one."""

    p_wrong: float = 0.25   # a wrong program (off-by-one constant, wrong operation, missing int())
    p_fence: float = 0.3    # the program in a ```python fence
    clean: float = 0.45     # program<|im_end|>
    ramble: float = 0.15    # program, then a sentence about it, then <|im_end|> (a syntax error unless fenced)
    loop: float = 0.12      # the print line repeated 4-9 times, no <|im_end|>
    fake_turn: float = 0.15  # program, then a made-up next user turn with no <|im_end|> before it
    run_on: float = 0.13    # program, then <|endoftext|> and another document
    p_system: float = 0.2

    def endings(self) -> tuple[list[str], list[float]]:
        names = ["clean", "ramble", "loop", "fake_turn", "run_on"]
        return names, [getattr(self, n) for n in names]


SYSTEMS = {"en": ["You are a helpful assistant.", "Write short Python programs."],
           "ja": ["あなたは有能なアシスタントです。", "短いPythonプログラムを書いてください。"]}
PROSE = {"en": ["This program reads the input and prints the answer.", "It uses input() and print().",
                "Hope it helps.", "Run it with python3."],
         "ja": ["このプログラムは入力を読んで答えを出力します。", "input()とprint()を使います。", "参考になれば幸いです。"]}


def program(rng: random.Random, q: Question, mix: Mixture) -> str:
    kind = KIND[q.kind]
    pool = kind.wrong if rng.random() < mix.p_wrong else kind.right
    k1 = max(kind.ks[0], q.k + rng.choice([-1, 1]))
    return rng.choice(pool).format(k=q.k, k1=k1 if k1 != q.k else q.k + 1)


def assistant_turn(rng: random.Random, q: Question, mix: Mixture) -> tuple[str, str]:
    """(text that follows "<|im_start|>assistant\\n", ending name). The text includes the end marker if any."""
    code = program(rng, q, mix)
    names, weights = mix.endings()
    ending = rng.choices(names, weights)[0]
    if ending == "loop":
        last = code.splitlines()[-1]
        return code + f"\n{last}" * rng.randint(4, 9), ending
    if rng.random() < mix.p_fence:
        code = f"```python\n{code}\n```"
    if ending == "clean":
        return f"{code}{IM_END}\n", ending
    if ending == "ramble":
        return f"{code}\n{rng.choice(PROSE[q.lang])}{IM_END}\n", ending
    if ending == "fake_turn":
        return f"{code}\n", ending
    return code, ending


def conversation(rng: random.Random, mix: Mixture, pool: list[Question]) -> str:
    """One ChatML document of 1-2 exchanges, ending with <|endoftext|>."""
    lang = rng.choice(LANGS)
    text = ""
    if rng.random() < mix.p_system:
        text += f"{IM_START}system\n{rng.choice(SYSTEMS[lang])}{IM_END}\n"
    turns, ending = rng.randint(1, 2), ""
    while turns > 0 or ending == "fake_turn":  # a fake turn always runs on into another exchange
        q = rng.choice(pool)
        text += f"{IM_START}user\n{q.text}{IM_END}\n{IM_START}assistant\n"
        reply, ending = assistant_turn(rng, q, mix)
        text += reply
        turns -= 1
        if ending in ("loop", "run_on"):
            break
    return text + EOT


def corpus_pool(banned: set[str]) -> list[Question]:
    """The questions the corpus may ask: every one whose text is not banned (the held-out test prompts)."""
    return [q for q in all_questions() if q.text not in banned]


def tokenizer_training_text(seed: int) -> list[str]:
    rng = random.Random(seed)
    pool = all_questions()
    return [conversation(rng, Mixture(), pool) for _ in range(4000)] + list(WORDS)
