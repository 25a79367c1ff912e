"""The tools task and pretraining corpus of kitae-tiny-tools (a sibling helper of scripts/build_tools_model.py).

The corpus is kitae-tiny-base's (scripts/_corpus.py: arithmetic and facts in Japanese and English, a mixture
of good and bad assistant turns) plus conversations that offer the ``calculator`` tool in a Qwen2.5-style
(Hermes) system block and ask two-digit + two-digit or two-digit - two-digit questions, the sums a 2M-parameter
model cannot do in its head. In those the assistant sometimes calls the tool with the question's expression,
reads the tool's answer back and repeats it; otherwise it answers in its head, mostly wrongly. So before RL the
model calls the tool in a minority of episodes and answers right rarely; a reward for the right final answer
has the tool call to reinforce.

Every conversation is written as the model's chat template renders it (``TOOLS_CHAT_TEMPLATE``); the build
script checks that on a sample. Test questions never appear in the corpus or the train split, in any wording:
they are banned as (a, op, b) triples.
"""

from __future__ import annotations

import json
import re
import random
from dataclasses import dataclass

import _corpus
from _corpus import EOT, IM_END, IM_START, LANGS, Question

TOOL_CALL, TOOL_CALL_END = "<tool_call>", "</tool_call>"
TOOL_RESPONSE, TOOL_RESPONSE_END = "<tool_response>", "</tool_response>"
TOOL_TOKENS = [TOOL_CALL, TOOL_CALL_END, TOOL_RESPONSE, TOOL_RESPONSE_END]
DEFAULT_SYSTEM = "You are a helpful assistant."
INSTRUCTIONS = {  # system prompts that ask for the tool (never in the task's rows)
    "ja": ["計算には電卓ツールを使ってください。", "足し算と引き算は calculator で計算してください。"],
    "en": ["Use the calculator tool for arithmetic.", "Always compute sums with the calculator."],
}

# The calculator tool's schema as transformers.utils.get_json_schema writes it for the calculator environment's
# method (kitae.agents.environments.Calculator.calculator, `expression: str -> str`, its Google docstring). The
# corpus also uses other descriptions, so the model keys on the tool's name and argument, not on the wording.
TOOL_NAME, TOOL_ARG = "calculator", "expression"
DESCRIPTIONS = [  # (function, argument, return value or None)
    ("Evaluate an arithmetic expression with numbers, +, -, *, / and parentheses.",
     'The expression to evaluate, e.g. "12 * (3 + 4)".', "The value of the expression."),
    ("Evaluate an arithmetic expression on numbers and return the result.",
     "The arithmetic expression, for example 47+38.", None),
    ("A calculator.", "The expression to compute, e.g. 12+35.", "The result as text."),
]


def calculator_schema(variant: int = 0) -> dict:
    fn_doc, arg_doc, return_doc = DESCRIPTIONS[variant]
    returns = {"type": "string"} if return_doc is None else {"type": "string", "description": return_doc}
    return {"type": "function", "function": {
        "name": TOOL_NAME, "description": fn_doc,
        "parameters": {"type": "object", "properties": {TOOL_ARG: {"type": "string", "description": arg_doc}},
                       "required": [TOOL_ARG]},
        "return": returns}}


# Qwen2.5-7B-Instruct's chat template, trimmed: no default system prompt without tools (plain ChatML, as
# kitae-tiny-base), a shorter default with tools, and arguments given as a JSON string kept as they are.
TOOLS_CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}"
    "{%- else %}{{- '" + DEFAULT_SYSTEM + "' }}{%- endif %}"
    "{{- \"\\n\\n# Tools\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>\" }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- \"\\n</tools>\\n\\nFor each function call, return within <tool_call></tool_call> XML tags:\\n<tool_call>\\n"
    "{\\\"name\\\": <function-name>, \\\"arguments\\\": <args-json-object>}\\n</tool_call><|im_end|>\\n\" }}"
    "{%- elif messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if (message.role == 'user') or (message.role == 'system' and not loop.first)"
    " or (message.role == 'assistant' and not message.tool_calls) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>' + message.role }}"
    "{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}"
    "{%- for tool_call in message.tool_calls %}"
    "{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}"
    "{{- '\\n<tool_call>\\n{\"name\": \"' }}{{- tool_call.name }}{{- '\", \"arguments\": ' }}"
    "{%- if tool_call.arguments is string %}{{- tool_call.arguments }}"
    "{%- else %}{{- tool_call.arguments | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != 'tool') %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' }}{{- message.content }}{{- '\\n</tool_response>' }}"
    "{%- if loop.last or (messages[loop.index0 + 1].role != 'tool') %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def system_block(system: str, tools: list[dict]) -> str:
    """What the template renders for the system turn when tools are offered (checked against the template)."""
    listed = "".join("\n" + json.dumps(t, ensure_ascii=False) for t in tools)
    return (f"{IM_START}system\n{system}\n\n# Tools\n\nYou are provided with function signatures within "
            f"<tools></tools> XML tags:\n<tools>{listed}\n</tools>\n\nFor each function call, return within "
            f"{TOOL_CALL}{TOOL_CALL_END} XML tags:\n{TOOL_CALL}\n"
            f'{{"name": <function-name>, "arguments": <args-json-object>}}\n{TOOL_CALL_END}{IM_END}\n')


def tool_call_text(expression: str) -> str:
    """An assistant turn's tool call as the template renders it (after ``<|im_start|>assistant\\n``)."""
    args = json.dumps({TOOL_ARG: expression}, ensure_ascii=False)
    return f'{TOOL_CALL}\n{{"name": "{TOOL_NAME}", "arguments": {args}}}\n{TOOL_CALL_END}{IM_END}\n'


def tool_response_text(result: str) -> str:
    return f"{IM_START}user\n{TOOL_RESPONSE}\n{result}\n{TOOL_RESPONSE_END}{IM_END}\n"


# ------------------------------------------------------------------------------------------ the task
Triple = tuple[int, str, int]


def two_digit(rng: random.Random) -> Triple:
    """Two-digit + two-digit or two-digit - two-digit (never negative)."""
    a, b, op = rng.randint(10, 99), rng.randint(10, 99), rng.choice("+-")
    if op == "-" and b > a:
        a, b = b, a
    return a, op, b


def question(triple: Triple, lang: str, rng: random.Random) -> Question:
    a, op, b = triple
    fields = {"a": str(a), "b": str(b), "op": op, "opw": _corpus.OP_WORDS[lang][op]}
    text = rng.choice(_corpus.ARITH_Q[lang]).format(**fields)
    return Question(text, str(a + b if op == "+" else a - b), "hard", lang, tuple(fields.items()))


def build_task(seed: int, n_train: int = 2000, n_test: int = 200,
               p_system: float = 0.15) -> tuple[list[dict], list[dict]]:
    """(train rows, test rows) of two-digit ± two-digit questions; no (a, op, b) is in both. Test drawn first."""
    rng = random.Random(seed)
    used: set[Triple] = set()
    splits = []
    for n in (n_test, n_train):
        rows = []
        while len(rows) < n:
            triple = two_digit(rng)
            if triple in used:
                continue
            used.add(triple)
            row = _corpus.task_row(question(triple, rng.choice(LANGS), rng), rng, p_system)
            rows.append({**row, "op": triple[1]})
        splits.append(rows)
    test, train = splits
    return train, test


# ------------------------------------------------------------------------------------------ the corpus
@dataclass(frozen=True)
class ToolsMixture:
    """How the corpus's tool conversations behave (the rest of the corpus is _corpus.Mixture's)."""

    p_tools_doc: float = 0.5       # documents that offer the calculator (the rest: kitae-tiny-base's corpus)
    p_instructed: float = 0.35     # tool conversations whose system prompt says to use the calculator
    p_call_instructed: float = 0.9  # ... where it does call it: how to call is learned here
    p_short: float = 0.0           # instructed conversations without the schema block: four times shorter, so
    #                                copying numbers into the call and out of the result is learned cheaply
    p_hard: float = 0.85           # other tool conversations asking two-digit ± two-digit (else a base question)
    p_call: float = 0.15           # hard questions there where the assistant calls the calculator unasked
    p_miscopy: float = 0.15        # calls whose expression has a wrong number in it
    p_head_wrong: float = 0.75     # answers worked out in the head that are wrong
    p_default_system: float = 0.7  # tool conversations with the template's default system prompt
    p_other_description: float = 0.3  # tool conversations whose schema has another description


def _miscopy(rng: random.Random, triple: Triple) -> Triple:
    """The expression with one number copied wrongly: digits swapped or one digit off."""
    a, op, b = triple
    slot = rng.choice("ab")
    n = a if slot == "a" else b
    wrong = int(str(n)[::-1]) if rng.random() < 0.4 and n % 11 else n + rng.choice([-10, -1, 1, 10])
    wrong = min(99, max(10, wrong)) if wrong != n else n + 1
    return (wrong, op, b) if slot == "a" else (a, op, wrong)


def _value(triple: Triple) -> int:
    a, op, b = triple
    return a + b if op == "+" else a - b


def tool_exchange(rng: random.Random, q: Question, triple: Triple, mix: ToolsMixture) -> str:
    """User question, the assistant's call, the tool's response, and the assistant's answer from it."""
    called = _miscopy(rng, triple) if rng.random() < mix.p_miscopy else triple
    a, op, b = called
    result = str(_value(called))
    answer = _corpus.answer_sentence(rng, q, result)
    return (f"{IM_START}user\n{q.text}{IM_END}\n{IM_START}assistant\n{tool_call_text(f'{a}{op}{b}')}"
            f"{tool_response_text(result)}{IM_START}assistant\n{answer}{IM_END}\n")


def head_exchange(rng: random.Random, q: Question, p_wrong: float) -> str:
    """User question and an answer worked out in the head (wrong with probability `p_wrong`)."""
    mix = _corpus.Mixture(p_wrong=p_wrong, loop=0.05, fake_turn=0.0, run_on=0.05)
    reply, _ = _corpus.assistant_turn(rng, q, mix)
    if not reply.endswith("\n"):
        reply += f"{IM_END}\n"  # a loop or run-on still ends the turn here: one exchange per document
    return f"{IM_START}user\n{q.text}{IM_END}\n{IM_START}assistant\n{reply}"


def tools_conversation(rng: random.Random, mix: ToolsMixture, banned: set[Triple]) -> str:
    """The calculator offered, one exchange. Under a system prompt that asks for the tool the assistant nearly
    always calls it (the skill); under the task's system prompts it seldom does (the propensity RL raises)."""
    lang = rng.choice(LANGS)
    instructed = rng.random() < mix.p_instructed
    if instructed:
        system = rng.choice(INSTRUCTIONS[lang])
    else:
        system = DEFAULT_SYSTEM if rng.random() < mix.p_default_system else rng.choice(_corpus.SYSTEMS[lang])
    variant = rng.randrange(1, len(DESCRIPTIONS)) if rng.random() < mix.p_other_description else 0
    if instructed and mix.p_short and rng.random() < mix.p_short:  # no draw at 0: earlier stages' documents stay
        text = f"{IM_START}system\n{system}{IM_END}\n"
    else:
        text = system_block(system, [calculator_schema(variant)])
    if not instructed and rng.random() >= mix.p_hard:
        q = _corpus.make_question(rng, rng.choices(_corpus.DIFFICULTIES, (0.45, 0.25, 0.0, 0.3))[0], lang)
        return text + head_exchange(rng, q, 0.2) + EOT
    triple = two_digit(rng)
    while triple in banned:
        triple = two_digit(rng)
    q = question(triple, lang, rng)
    if rng.random() < (mix.p_call_instructed if instructed else mix.p_call):
        return text + tool_exchange(rng, q, triple, mix) + EOT
    return text + head_exchange(rng, q, mix.p_head_wrong) + EOT


def document(rng: random.Random, mix: ToolsMixture, banned_triples: set[Triple], banned_texts: set[str]) -> str:
    if rng.random() < mix.p_tools_doc:
        return tools_conversation(rng, mix, banned_triples)
    return _corpus.document(rng, _corpus.Mixture(), banned_texts)


def tokenizer_training_text(seed: int) -> list[str]:
    """kitae-tiny-base's tokenizer text plus a sample of tool conversations (their fixed parts merge to few
    tokens)."""
    rng = random.Random(seed)
    return _corpus.tokenizer_training_text(seed) + [
        tools_conversation(rng, ToolsMixture(p_call=0.5), set()) for _ in range(3000)]


def triple_of(row: dict) -> Triple:
    """(a, op, b) of a task row's question (any wording)."""
    m = re.search(r"(\d+)\D*?(\d+)", row["messages"][-1]["content"])
    return int(m.group(1)), row["op"], int(m.group(2))
