"""What curation steps compare of a prompt row: its text, a normalized form, its language, numbers, answer.

    >>> prompt_text({"messages": [{"role": "system", "content": "Be brief."},
    ...                            {"role": "user", "content": "What is 12+35?"}]})
    'What is 12+35?'
    >>> normalize("  What is １２＋３５ ?")
    'whatis12+35'
    >>> numbers("列車が1.5時間で60km、さらに１,２００m")
    ('1.5', '1200', '60')
    >>> detect_lang("フランスの首都は？"), detect_lang("What is 2+2?")
    ('ja', 'en')

The prompt text is the user turns only: system prompts are often shared by every row of a set and would make
unrelated prompts look alike. Normalization is NFKC, casefold, and whitespace and punctuation (Unicode
category P*) removed; symbols (+, =, ×) and the minus sign stay, because ``12+35`` and ``12-35`` are different problems.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata

from kitae.chat import prompt_of
from kitae.graders.answer_match import as_number, normalize_answer

_JAPANESE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uff66-\uff9f]")
_KEEP = "-−"  # dash punctuation that is a minus sign in "12-35"
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


def prompt_text(row: dict) -> str:
    """The user turns of a row, joined by newlines."""
    return prompt_of(row, roles=("user",))


def prompt_key(row: dict) -> str:
    """A short stable id of the whole prompt (every turn and the reference answer)."""
    payload = json.dumps([row["messages"], row.get("reference_answer")], ensure_ascii=False, sort_keys=True)
    return hashlib.sha1(payload.encode("utf-8")).hexdigest()[:16]


def normalize(text: str) -> str:
    """NFKC, casefold, no whitespace, no punctuation: the form two copies of a prompt share."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return "".join(c for c in text if c in _KEEP or not (c.isspace() or unicodedata.category(c).startswith("P")))


def detect_lang(text: str) -> str:
    """"ja" when the text has kana or kanji, else "en" (the two languages kitae's rules cover)."""
    return "ja" if _JAPANESE.search(text) else "en"


def row_lang(row: dict) -> str:
    """The row's `lang` field when it has one, else the detected language of its prompt."""
    lang = row.get("lang")
    return str(lang) if lang else detect_lang(prompt_text(row))


def numbers(text: str) -> tuple[str, ...]:
    """The numbers a text states, sorted (a multiset): two prompts with different numbers are different problems."""
    text = _THOUSANDS.sub("", unicodedata.normalize("NFKC", text))
    return tuple(sorted(_canonical(n) for n in _NUMBER.findall(text)))


_OPERATOR_WORDS = [  # longest first; spaces around English words so "plus" inside a word is left alone
    (" divided by ", "/"), (" times ", "*"), (" plus ", "+"), (" minus ", "-"),
    ("たす", "+"), ("足す", "+"), ("ひく", "-"), ("引く", "-"), ("かける", "*"), ("掛ける", "*"), ("わる", "/"),
    ("割る", "/"), ("×", "*"), ("÷", "/"), ("−", "-"),
]
_OPERATOR = re.compile(r"(?<=[\d\s])[-+*/](?=[\s\d])")


def operators(text: str) -> tuple[str, ...]:
    """The arithmetic operators between numbers, symbols and words alike, sorted: "2たす0" -> ('+',).

    >>> operators("What is 12 plus 35?"), operators("12+35は？"), operators("2-0"), operators("Add 2 and 3")
    (('+',), ('+',), ('-',), ())
    """
    text = " " + unicodedata.normalize("NFKC", text).casefold() + " "
    for word, symbol in _OPERATOR_WORDS:
        text = text.replace(word, f" {symbol} " if word.startswith(" ") else symbol)
    return tuple(sorted(_OPERATOR.findall(text)))


def _canonical(number: str) -> str:
    return number.rstrip("0").rstrip(".") if "." in number else number.lstrip("0") or "0"


def answer_form(row: dict) -> str | None:
    """The reference answer in a comparable form (a number's value, or normalized text); None without one."""
    ref = row.get("reference_answer")
    if ref is None:
        return None
    value = as_number(str(ref))
    return repr(value) if value is not None else normalize_answer(str(ref))
