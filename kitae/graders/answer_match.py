"""Final-answer extraction and matching for short-answer tasks (the bundled arithmetic and fact task): the
``answer`` grader's check (kitae.graders.answer), and how curation compares references (kitae.curate.text).

The answer is read from the content before the end-of-turn marker: ``end``, ChatML's ``<|im_end|>`` by default, or
the model's (its :class:`kitae.chat.EndMarker`, or its text: Llama 3's ``<|eot_id|>``, Gemma's ``<end_of_turn>``,
Mistral's ``</s>``; with several, the first one in the text ends the content). For a numeric reference it is the last
number in the content (NFKC-normalized, so full-width digits count; thousands commas dropped: 1,234 is 1234;
a single comma before one or two digits is a decimal comma: 1,22 is 1.22, as math-verify reads it); otherwise
the whole content, normalized (NFKC, casefold, markdown emphasis (``**Paris**``, ``*Paris*``, ```Paris```), surrounding
punctuation and polite endings stripped), or one word of it with its punctuation and emphasis stripped.

    >>> answers_match("12+35=47です。<|im_end|>", "47")
    True
    >>> answers_match("The capital is Paris.", "Paris")
    True
    >>> answers_match("Paris.<|eot_id|>", "Paris", end="<|eot_id|>")
    True
    >>> answers_match("The answer is **Paris**.", "Paris")
    True
"""

from __future__ import annotations

import math
import re
import unicodedata
from typing import Iterable

from kitae.chat import IM_END, EndMarker

End = str | Iterable[str] | EndMarker  # one end marker, several, or the model's (every text it stops at)

_NUMBER = re.compile(
    r"[-−]?\d+(?:,\d{3})+(?:\.\d+)?(?![\d,])"  # 1,234.5
    r"|(?<![\d,])[-−]?\d+,\d{1,2}(?![\d,])"  # 1,22: a decimal comma (1,2,3 is three numbers)
    r"|[-−]?\d+(?:\.\d+)?"
)
_DECIMAL_COMMA = re.compile(r"[-−]?\d+,\d{1,2}")
_STRIP = " \t\n。、．.,!！?？「」『』\"'*_`:;"
_EMPHASIS = re.compile(r"\*\*|__|`+")  # markdown bold and inline code: **Paris**, __Paris__, `Paris`
_ENDINGS = ("です", "でした", "だ")
_PREFIXES = ("答えは", "答え:", "the answer is", "answer:", "it is", "the capital is")


def normalize_text(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold().strip()


def as_number(text: str) -> float | None:
    """A finite number, or None: "inf", "nan" and "1e999" are not numbers an answer can be close to."""
    text = normalize_text(text).replace("−", "-")
    text = text.replace(",", ".") if _DECIMAL_COMMA.fullmatch(text) else text.replace(",", "")
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def content_before(text: str, end: End = IM_END) -> str:
    """`text` up to the first of the end markers `end` (all of it without one)."""
    ends = end.stops if isinstance(end, EndMarker) else (end,) if isinstance(end, str) else tuple(end)
    cut = min((text.find(e) for e in ends if e and e in text), default=len(text))
    return text[:cut]


def extract_number(text: str, end: End = IM_END) -> float | None:
    """The last number in `text` (before the end marker `end`), or None."""
    content = content_before(unicodedata.normalize("NFKC", text), end)
    found = _NUMBER.findall(content)
    return as_number(found[-1]) if found else None


def normalize_answer(text: str, end: End = IM_END) -> str:
    content = _EMPHASIS.sub("", content_before(text, end))
    s = normalize_text(content).strip(_STRIP)
    for prefix in _PREFIXES:
        if s.startswith(prefix):
            s = s[len(prefix) :].strip(_STRIP)
    for ending in _ENDINGS:
        if s.endswith(ending):
            s = s[: -len(ending)].strip(_STRIP)
    return s


def answers_match(completion: str, reference: str, end: End = IM_END) -> bool:
    """Whether the completion's final answer (before the end marker `end`) equals the reference (numbers
    exactly, text normalized)."""
    ref_num = as_number(str(reference))
    if ref_num is not None:
        got = extract_number(completion, end)
        return got is not None and abs(got - ref_num) <= 1e-9 * max(1.0, abs(ref_num))
    ref = normalize_answer(str(reference))
    answer = normalize_answer(completion, end)
    return bool(ref) and (answer == ref or ref in (word.strip(_STRIP) for word in answer.split()))
