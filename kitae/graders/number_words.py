"""English number words as digits, for :mod:`kitae.graders.numbers`: "twenty-five" -> 25, "two thirds" -> 2/3.

    >>> spell_out("twenty-five percent, one hundred and twelve, two thirds")
    ('25 percent, 112, 2/3', {0: False, 12: False, 17: False})

Cardinals from zero to the trillions (``three thousand five hundred``, ``one hundred and twelve``, ``a
million``) and simple fractions (``a half``, ``one-third``, ``three quarters``, ``half of``). Ordinal words
(``third quarter``, ``twenty-first``) are left as words. :func:`spell_out` also says where each number it
wrote starts and whether its phrase had a scale word (thousand, million, ...): "two million" is an amount,
"two" alone is a count in prose (see :attr:`kitae.graders.numbers.Quantity.in_words`).
"""

from __future__ import annotations

import re

_UNITS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen".split())}
_TENS = {w: 10 * i for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split(), start=2)}
_SCALES = {"thousand": 10**3, "million": 10**6, "billion": 10**9, "trillion": 10**12}
_DENOMINATORS = {"half": 2, "halves": 2, "third": 3, "quarter": 4, "fourth": 4, "fifth": 5, "sixth": 6,
                 "seventh": 7, "eighth": 8, "ninth": 9, "tenth": 10}
_ORDINAL_UNITS = "first|second|third|fourth|fifth|sixth|seventh|eighth|ninth"

_WORD = "|".join(sorted([*_UNITS, *_TENS, "hundred", *_SCALES], key=len, reverse=True))
_SMALL_WORD = "|".join(sorted([*_UNITS, *_TENS, "hundred"], key=len, reverse=True))  # no scale word
_NUMERATOR = "|".join(["a", *list(_UNITS)[1:11]])
_SPELLED = re.compile(
    r"\b(?=[abefhmnostz])(?:"  # the first letters of the words below: 3x faster
    rf"\b(?P<whole>(?:{_SMALL_WORD})(?:(?:\s+and\s+|[\s-]+)(?:{_SMALL_WORD}))*)"  # two and a half (million)
    r"[\s-]+and[\s-]+(?:a|one)[\s-]+half\b"
    rf"|\b(?P<num>{_NUMERATOR})[\s-](?P<den>{'|'.join(_DENOMINATORS)})s?\b"  # two thirds, a half, one-quarter
    rf"|\b(?P<half>half)(?=\s+of\b)"  # half of it (not the second half)
    rf"|\b(?P<phrase>(?:a\s+(?=(?:hundred|thousand|million|billion|trillion)\b))?(?:{_WORD})"
    rf"(?:(?:\s+and\s+|[\s-]+)(?:{_WORD}))*)\b(?!-(?:{_ORDINAL_UNITS})))",  # not twenty-first
    re.IGNORECASE,
)
_TOKENS = re.compile(r"(\s+and\s+|[\s-]+)", re.IGNORECASE)


def spell_out(text: str) -> tuple[str, dict[int, bool]]:
    """``text`` with number words as digits, and {start of each number written: its phrase had a scale word}."""
    out, starts, position = [], {}, 0

    def emit(piece: str, number: bool = False, scaled: bool = False) -> None:
        nonlocal position
        if number:
            starts[position] = scaled
        out.append(piece)
        position += len(piece)

    last = 0
    for m in _SPELLED.finditer(text):
        emit(text[last : m.start()])
        last = m.end()
        if m.group("whole"):  # two and a half: the last number of the run, plus a half
            *before, (text_, value, scaled) = _cardinals(m.group("whole"))
            for piece, number, scaled_ in before:
                emit(piece if number is None else str(number), number=number is not None, scaled=scaled_)
            emit(f"{value + 0.5:g}" if value is not None else text_, number=value is not None, scaled=scaled)
        elif m.group("den"):
            numerator = 1 if m.group("num").lower() == "a" else _UNITS[m.group("num").lower()]
            emit(f"{numerator}/{_DENOMINATORS[m.group('den').lower()]}", number=True)
        elif m.group("half"):
            emit("1/2", number=True)
        else:
            for piece, value, scaled in _cardinals(m.group("phrase")):
                emit(piece if value is None else str(value), number=value is not None, scaled=scaled)
    emit(text[last:])
    return "".join(out), starts


def _cardinals(phrase: str) -> list[tuple[str, int | None, bool]]:
    """A run of number words as numbers and the text between them: "one two" is two numbers, "one and two" too."""
    tokens = _TOKENS.split(phrase)  # words at even indexes, separators at odd ones
    pieces, state, text = [], None, ""
    for i in range(0, len(tokens), 2):
        word, sep = tokens[i].lower(), tokens[i - 1] if i else ""
        extended = _extend(state, word, sep) if state else None
        if extended:
            state, text = extended, text + sep + tokens[i]
            continue
        if state:
            pieces += [_finish(state, text), (sep, None, False)]
        state, text = _extend(None, word, ""), tokens[i]
        if state is None:  # hundred or thousand alone: a word
            pieces.append((tokens[i], None, False))
    if state:
        pieces.append(_finish(state, text))
    return pieces


def _finish(state: tuple, text: str) -> tuple[str, int | None, bool]:
    total, small, _, scale = state
    return text, total + small, scale is not None


def _extend(state: tuple | None, word: str, sep: str) -> tuple | None:
    """(total, small, last kind, last scale) after one more word, or None where it cannot continue the number."""
    total, small, last, scale = state or (0, 0, None, None)
    if "and" in sep.lower() and last not in ("hundred", "scale"):
        return None  # one hundred and twelve; not "one and two"
    if word == "a":
        return (0, 1, "unit", None) if state is None else None
    if word in _UNITS or word in _TENS:
        value = _UNITS.get(word, _TENS.get(word))
        kind = "tens" if word in _TENS else "unit" if value < 10 else "teen"
        fits = last in (None, "hundred", "scale") or (last == "tens" and kind == "unit" and value > 0)
        if last == "zero" or (word == "zero" and state is not None) or not fits:
            return None
        return total, small + value, "zero" if word == "zero" else kind, scale
    if word == "hundred":
        fits = last in ("unit", "teen") and 0 < small < 20  # five hundred, twelve hundred; not 101 hundred
        return (total, small * 100, "hundred", scale) if fits else None
    if word in _SCALES and last in ("unit", "teen", "tens", "hundred") and (scale is None or _SCALES[word] < scale):
        return total + small * _SCALES[word], 0, "scale", _SCALES[word]
    return None
