"""The bundled task (bilingual arithmetic + facts) and the synthetic pretraining corpus for kitae-tiny-base.

The task rows are prompts for RL: ``{"messages": [...], "reference_answer": "47", "difficulty": "easy", "lang": "ja"}``.
Difficulty: easy = 1-digit ± 1-digit, medium = 2-digit ± 1-digit, hard = 2-digit + 2-digit, fact = a short
factual question (capitals, colours, days of the week, opposites). Subtractions never go below zero.

The corpus makes a *base* model in the GRPO-zero recipe's sense: ChatML conversations whose assistant turns are a
learned mixture of behaviours (see ``Mixture``): well-formed answers, rambles, loops, turns that never emit
``<|im_end|>`` and run on into more text or a fake next turn, and wrong answers. Correct answers stay the single
most likely answer, so the skill is latent and RL on template compliance and correctness can sharpen it.
Plain drill lines (``12+35=47``) teach the arithmetic itself. Test questions never appear verbatim in the
corpus (``banned``), in any form.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

IM_START, IM_END, EOT = "<|im_start|>", "<|im_end|>", "<|endoftext|>"
DIFFICULTIES = ("easy", "medium", "hard", "fact")
LANGS = ("ja", "en")

# ---------------------------------------------------------------------------------------------- facts
# (english subject, english answer, japanese subject, japanese answer). Answers are one word so that
# kitae.graders.answer_match.answers_match can find them.
CAPITALS = [
    ("France", "Paris", "フランス", "パリ"), ("Japan", "Tokyo", "日本", "東京"),
    ("England", "London", "イギリス", "ロンドン"), ("Italy", "Rome", "イタリア", "ローマ"),
    ("Germany", "Berlin", "ドイツ", "ベルリン"), ("Spain", "Madrid", "スペイン", "マドリード"),
    ("China", "Beijing", "中国", "北京"), ("Korea", "Seoul", "韓国", "ソウル"),
    ("Russia", "Moscow", "ロシア", "モスクワ"), ("Egypt", "Cairo", "エジプト", "カイロ"),
    ("Canada", "Ottawa", "カナダ", "オタワ"), ("Australia", "Canberra", "オーストラリア", "キャンベラ"),
    ("Thailand", "Bangkok", "タイ", "バンコク"), ("Greece", "Athens", "ギリシャ", "アテネ"),
    ("Portugal", "Lisbon", "ポルトガル", "リスボン"), ("Kenya", "Nairobi", "ケニア", "ナイロビ"),
    ("Peru", "Lima", "ペルー", "リマ"), ("Norway", "Oslo", "ノルウェー", "オスロ"),
    ("Sweden", "Stockholm", "スウェーデン", "ストックホルム"), ("Finland", "Helsinki", "フィンランド", "ヘルシンキ"),
    ("Austria", "Vienna", "オーストリア", "ウィーン"), ("Vietnam", "Hanoi", "ベトナム", "ハノイ"),
    ("Cuba", "Havana", "キューバ", "ハバナ"), ("Ireland", "Dublin", "アイルランド", "ダブリン"),
    ("Poland", "Warsaw", "ポーランド", "ワルシャワ"), ("Turkey", "Ankara", "トルコ", "アンカラ"),
]
COLOURS = [
    ("the sky", "blue", "空", "青"), ("grass", "green", "草", "緑"), ("snow", "white", "雪", "白"),
    ("a banana", "yellow", "バナナ", "黄色"), ("blood", "red", "血", "赤"), ("coal", "black", "石炭", "黒"),
    ("a strawberry", "red", "いちご", "赤"), ("a lemon", "yellow", "レモン", "黄色"),
    ("milk", "white", "牛乳", "白"), ("a crow", "black", "カラス", "黒"), ("a leaf", "green", "葉", "緑"),
    ("the sea", "blue", "海", "青"),
]
DAYS = [
    ("Monday", "月曜日"), ("Tuesday", "火曜日"), ("Wednesday", "水曜日"), ("Thursday", "木曜日"),
    ("Friday", "金曜日"), ("Saturday", "土曜日"), ("Sunday", "日曜日"),
]
OPPOSITES = [
    ("hot", "cold", "暑い", "寒い"), ("big", "small", "大きい", "小さい"), ("up", "down", "上", "下"),
    ("fast", "slow", "速い", "遅い"), ("long", "short", "長い", "短い"), ("new", "old", "新しい", "古い"),
    ("day", "night", "昼", "夜"), ("left", "right", "左", "右"), ("high", "low", "高い", "低い"),
    ("strong", "weak", "強い", "弱い"), ("heavy", "light", "重い", "軽い"), ("black", "white", "黒", "白"),
    ("open", "closed", "開く", "閉じる"), ("early", "late", "早い", "遅い"),
]

# ------------------------------------------------------------------------------------ question templates
ARITH_Q = {
    "ja": ["{a}{op}{b}は？", "{a}{op}{b}はいくつですか？", "{a}{op}{b}を計算してください。", "{a}{opw}{b}は？"],
    "en": ["What is {a}{op}{b}?", "What is {a} {opw} {b}?", "Compute {a}{op}{b}.", "{a}{op}{b}=?"],
}
OP_WORDS = {"ja": {"+": "たす", "-": "ひく"}, "en": {"+": "plus", "-": "minus"}}
FACT_Q = {
    "capital": {
        "ja": ["{s}の首都は？", "{s}の首都はどこですか？", "{s}の首都を教えてください。"],
        "en": ["What is the capital of {s}?", "Name the capital of {s}.", "Which city is the capital of {s}?"],
    },
    "colour": {
        "ja": ["{s}は何色？", "{s}は何色ですか？", "{s}の色は？"],
        "en": ["What colour is {s}?", "What is the colour of {s}?", "Which colour is {s}?"],
    },
    "after": {
        "ja": ["{s}の次の曜日は？", "{s}の次は何曜日ですか？"],
        "en": ["What day comes after {s}?", "Which day follows {s}?"],
    },
    "before": {
        "ja": ["{s}の前の曜日は？", "{s}の前は何曜日ですか？"],
        "en": ["What day comes before {s}?", "Which day is before {s}?"],
    },
    "opposite": {
        "ja": ["「{s}」の反対は？", "「{s}」の反対の言葉は何ですか？"],
        "en": ["What is the opposite of {s}?", "Give the opposite of {s}."],
    },
}

# ------------------------------------------------------------------------------------- answer templates
# Every template keeps the answer as the last number / a lone word, so answers_match accepts it.
ARITH_A = {
    "ja": ["{c}", "{a}{op}{b}={c}です。", "答えは{c}です。", "{c}です。", "{a}{op}{b}={c}"],
    "en": ["{c}", "{a}{op}{b}={c}.", "The answer is {c}.", "{a} {opw} {b} is {c}.", "{c}."],
}
FACT_A = {
    "ja": ["{x}", "{x}です。", "答えは{x}です。"],
    "en": ["{x}", "{X}.", "The answer is {x}.", "It is {x}."],
}
FILLERS = {
    "ja": [
        "計算は簡単ですね。", "ほかにも質問があればどうぞ。", "覚えておくと便利です。", "よい質問ですね。",
        "確認してみましょう。", "もう一度考えてみます。", "がんばりましょう。", "ちなみに、これはよく出る問題です。",
    ],
    "en": [
        "That is easy.", "Let me know if you have more questions.", "Good question.", "It is good to remember.",
        "Let me check again.", "Practice makes perfect.", "By the way, this is a common question.", "Hope it helps.",
    ],
}
SYSTEMS = {
    "ja": ["あなたは有能なアシスタントです。", "簡潔に答えてください。", "あなたは算数の先生です。"],
    "en": ["You are a helpful assistant.", "Answer briefly.", "You are a math teacher."],
}


@dataclass(frozen=True)
class Question:
    """One task question: the user text, its reference answer, and what the assistant's answer may echo."""

    text: str
    answer: str
    difficulty: str
    lang: str
    fields: tuple[tuple[str, str], ...] = ()  # template fields for answer sentences (a, op, b, opw)


# ---------------------------------------------------------------------------------------- questions
def _operands(rng: random.Random, difficulty: str) -> tuple[int, str, int]:
    if difficulty == "easy":
        a, b, op = rng.randint(0, 9), rng.randint(0, 9), rng.choice("+-")
    elif difficulty == "medium":
        a, b, op = rng.randint(10, 99), rng.randint(0, 9), rng.choice("+-")
    else:
        a, b, op = rng.randint(10, 99), rng.randint(10, 99), "+"
    if op == "-" and b > a:
        a, b = b, a
    return a, op, b


def arith_question(rng: random.Random, difficulty: str, lang: str) -> Question:
    a, op, b = _operands(rng, difficulty)
    c = a + b if op == "+" else a - b
    fields = {"a": str(a), "b": str(b), "op": op, "opw": OP_WORDS[lang][op]}
    text = rng.choice(ARITH_Q[lang]).format(**fields)
    return Question(text, str(c), difficulty, lang, tuple(fields.items()))


def _fact_pairs(kind: str) -> list[tuple[str, str, str, str]]:
    if kind == "capital":
        return CAPITALS
    if kind == "colour":
        return COLOURS
    if kind == "opposite":
        return OPPOSITES + [(b, a, bj, aj) for a, b, aj, bj in OPPOSITES]
    step = 1 if kind == "after" else -1
    return [(en, DAYS[(i + step) % 7][0], ja, DAYS[(i + step) % 7][1]) for i, (en, ja) in enumerate(DAYS)]


def fact_question(rng: random.Random, lang: str) -> Question:
    kind = rng.choice(list(FACT_Q))
    s_en, x_en, s_ja, x_ja = rng.choice(_fact_pairs(kind))
    subject, answer = (s_ja, x_ja) if lang == "ja" else (s_en, x_en)
    text = rng.choice(FACT_Q[kind][lang]).format(s=subject)
    return Question(text, answer, "fact", lang, (("kind", kind),))


def make_question(rng: random.Random, difficulty: str, lang: str) -> Question:
    return fact_question(rng, lang) if difficulty == "fact" else arith_question(rng, difficulty, lang)


# ------------------------------------------------------------------------------------------ the task
def task_row(q: Question, rng: random.Random, p_system: float) -> dict:
    messages = [{"role": "user", "content": q.text}]
    if rng.random() < p_system:
        messages.insert(0, {"role": "system", "content": rng.choice(SYSTEMS[q.lang])})
    return {"messages": messages, "reference_answer": q.answer, "difficulty": q.difficulty, "lang": q.lang}


def build_task(seed: int, n_train: int = 2000, n_test: int = 200, p_system: float = 0.15,
               weights: dict[str, float] | None = None) -> tuple[list[dict], list[dict]]:
    """(train rows, test rows) with disjoint question texts. Test questions are drawn first.

    Fact questions are few (about 300 distinct texts), so train facts may repeat; nothing else does.
    """
    weights = weights or {"easy": 0.27, "medium": 0.27, "hard": 0.26, "fact": 0.20}
    rng = random.Random(seed)
    seen: set[str] = set()
    splits = []
    for n, is_train in ((n_test, False), (n_train, True)):
        rows: list[dict] = []
        for difficulty, count in _counts(n, weights).items():
            repeat = is_train and difficulty == "fact"
            rows += _draw_rows(rng, difficulty, count, seen, repeat, p_system)
        rng.shuffle(rows)
        splits.append(rows)
        seen |= {r["messages"][-1]["content"] for r in rows}
    test, train = splits
    return train, test


def _counts(n: int, weights: dict[str, float]) -> dict[str, int]:
    """Rows per difficulty; rounding leftovers go to the last one."""
    counts = {d: round(n * w / sum(weights.values())) for d, w in weights.items()}
    last = list(weights)[-1]
    counts[last] += n - sum(counts.values())
    return counts


def _draw_rows(rng: random.Random, difficulty: str, n: int, banned: set[str], allow_repeat: bool,
               p_system: float) -> list[dict]:
    rows, texts = [], set()
    for _ in range(200 * n):
        if len(rows) == n:
            break
        q = make_question(rng, difficulty, rng.choice(LANGS))
        if q.text in banned or (q.text in texts and not allow_repeat):
            continue
        texts.add(q.text)
        rows.append(task_row(q, rng, p_system))
    if len(rows) < n:
        raise RuntimeError(f"could not draw {n} distinct {difficulty} questions (got {len(rows)})")
    return rows


# ------------------------------------------------------------------------------------------ the corpus
@dataclass(frozen=True)
class Mixture:
    """How the corpus's assistant turns behave. Endings are weights; they need not sum to one."""

    p_wrong: float = 0.2          # the answer itself is wrong (off by a little / another fact)
    clean: float = 0.38           # answer<|im_end|>
    ramble: float = 0.15          # answer, 1-4 filler sentences, then <|im_end|> (long ones hit the length cap)
    loop: float = 0.15            # the answer sentence or a filler repeated 4-9 times, no <|im_end|>
    fake_turn: float = 0.17       # answer, then a made-up next user turn with no <|im_end|> before it
    run_on: float = 0.13          # answer, then <|endoftext|> and another document; no <|im_end|>
    p_system: float = 0.3         # conversations with a system prompt
    p_drill: float = 0.3          # documents that are plain drill lines "12+35=47"
    # easy, medium, hard, fact: the corpus dwells on what a tiny model can learn in minutes; hard sums
    # (2-digit + 2-digit) never appear, so the task keeps prompts the base model cannot solve
    weights: tuple[float, float, float, float] = (0.6, 0.12, 0.0, 0.28)

    def endings(self) -> tuple[list[str], list[float]]:
        names = ["clean", "ramble", "loop", "fake_turn", "run_on"]
        return names, [getattr(self, n) for n in names]


def _wrong_answer(rng: random.Random, q: Question) -> str:
    if q.difficulty == "fact":
        kind = dict(q.fields)["kind"]
        pool = {p[3] if q.lang == "ja" else p[1] for p in _fact_pairs(kind)} - {q.answer}
        return rng.choice(sorted(pool))
    c = int(q.answer)
    return str(max(0, c + rng.choice([-10, -2, -1, 1, 2, 10, -1, 1])))


def answer_sentence(rng: random.Random, q: Question, answer: str) -> str:
    if q.difficulty == "fact":
        return rng.choice(FACT_A[q.lang]).format(x=answer, X=answer[:1].upper() + answer[1:])
    return rng.choice(ARITH_A[q.lang]).format(c=answer, **dict(q.fields))


def assistant_turn(rng: random.Random, q: Question, mix: Mixture) -> tuple[str, str]:
    """(text that follows "<|im_start|>assistant\\n", ending name). The text includes the end marker if any."""
    answer = _wrong_answer(rng, q) if rng.random() < mix.p_wrong else q.answer
    sentence = answer_sentence(rng, q, answer)
    names, weights = mix.endings()
    ending = rng.choices(names, weights)[0]
    sep = "" if q.lang == "ja" else " "
    if ending == "clean":
        return f"{sentence}{IM_END}\n", ending
    if ending == "ramble":
        extra = sep.join(rng.choice(FILLERS[q.lang]) for _ in range(rng.randint(1, 4)))
        return f"{sentence}{sep}{extra}{IM_END}\n", ending
    if ending == "loop":
        unit = rng.choice([sentence, rng.choice(FILLERS[q.lang])])
        return sentence + (sep + unit) * rng.randint(4, 9), ending
    if ending == "fake_turn":
        return f"{sentence}\n", ending
    return sentence, ending


def conversation(rng: random.Random, mix: Mixture, banned: set[str]) -> str:
    """One ChatML document of 1-3 exchanges, ending with <|endoftext|>."""
    lang = rng.choice(LANGS)
    text = ""
    if rng.random() < mix.p_system:
        text += f"{IM_START}system\n{rng.choice(SYSTEMS[lang])}{IM_END}\n"
    turns, ending = rng.randint(1, 3), ""
    while turns > 0 or ending == "fake_turn":  # a fake turn always runs on into another exchange
        q = corpus_question(rng, mix, lang, banned)
        text += f"{IM_START}user\n{q.text}{IM_END}\n{IM_START}assistant\n"
        reply, ending = assistant_turn(rng, q, mix)
        text += reply
        turns -= 1
        if ending in ("loop", "run_on"):
            break
    return text + EOT


def corpus_question(rng: random.Random, mix: Mixture, lang: str, banned: set[str]) -> Question:
    while True:
        q = make_question(rng, rng.choices(DIFFICULTIES, mix.weights)[0], lang)
        if q.text not in banned:
            return q


def drill(rng: random.Random, mix: Mixture) -> str:
    """Plain, always-correct equation lines: the arithmetic skill itself."""
    lines = []
    for _ in range(rng.randint(4, 10)):
        a, op, b = _operands(rng, rng.choices(DIFFICULTIES[:3], mix.weights[:3])[0])
        lines.append(f"{a}{op}{b}={a + b if op == '+' else a - b}")
    return "\n".join(lines) + "\n" + EOT


def document(rng: random.Random, mix: Mixture, banned: set[str]) -> str:
    return drill(rng, mix) if rng.random() < mix.p_drill else conversation(rng, mix, banned)


def tokenizer_training_text(seed: int) -> list[str]:
    """Text for BPE training: a corpus sample plus every fact word and template, in both languages."""
    rng = random.Random(seed)
    texts = [document(rng, Mixture(), set()) for _ in range(4000)]
    for pairs in (CAPITALS, COLOURS, OPPOSITES):
        texts += [" ".join(p) for p in pairs]
    texts += [" ".join(d) for d in DAYS]
    texts += FILLERS["ja"] + FILLERS["en"] + SYSTEMS["ja"] + SYSTEMS["en"]
    return texts
