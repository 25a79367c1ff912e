"""Text copied from the prompt: the hack where an answer echoes the prompt, and the prompt holds what a
contains check looks for ("Which is larger, 7 or 12?" echoed contains ``12``).

An occurrence of the expected text in the answer is an *echo* when it is copied from the prompt with its
surroundings: the word just before it, or the word just after it, in the answer also stands there in the
prompt. ``7 or 12`` echoes "Which is larger, 7 or 12?" (``or 12`` is in the prompt); ``12``, ``The answer is
12`` and the whole prompt followed by ``12`` do not (nothing around that last 12 comes from the prompt). Words
are runs of letters and digits, and each kana or kanji alone (Japanese has no spaces), compared casefolded;
punctuation and spacing do not count. A particle (one hiragana: は, と, で) says too little alone, so the word
past it counts too: ``東京と思います`` is no echo of "東京と大阪のどちら？" (``東京と思`` is not in the prompt),
``東京と大阪`` is. What stays refused is an answer whose neighbours the prompt has too: ``東京です`` after
"東京ですか？".

The prompt is the row's user and system turns (``item.messages``; a TRL-style ``item.prompt`` string or message
list too: kitae.chat.prompt_of); a row without one has nothing to echo.
"""

from __future__ import annotations

import bisect
import re

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f"
_WORD = re.compile(rf"[{_CJK}]|[^\W_{_CJK}]+")
_SEP = "\x00"


def _particle(token: str) -> bool:
    """One hiragana (は, と, が, で, ...): a particle beside the answer is too short to show it was copied."""
    return len(token) == 1 and "\u3040" <= token <= "\u309f"


def words(text: str) -> list[re.Match]:
    return list(_WORD.finditer(text))


def found_outside_echo(text: str, expected: str, prompt: str) -> bool:
    """Whether ``expected`` occurs in ``text`` at least once other than as an echo of ``prompt`` (the module
    docstring). Compare texts normalized alike (the caller's casefold or NFKC)."""
    if expected not in text:
        return False
    if not prompt:
        return True
    said = words(text)
    tokens = [w.group().casefold() for w in said]
    starts, ends = [w.start() for w in said], [w.end() for w in said]
    prompt_words = _SEP + _SEP.join(w.group().casefold() for w in words(prompt)) + _SEP
    start = text.find(expected)
    while start != -1:
        first = bisect.bisect_right(ends, start)  # the first word ending after the occurrence starts
        stop = bisect.bisect_left(starts, start + len(expected))  # ... and the first starting at its end or later
        inside = tokens[first:stop]
        before, after = first - 1, stop + 1  # with the word before, after ...
        before -= before > 0 and _particle(tokens[before])  # ... and the one past a particle (東京と思います)
        after += after < len(tokens) and _particle(tokens[after - 1])
        around = (tokens[max(0, before) : stop], tokens[first:after])
        if not any(len(run) > len(inside) and _SEP + _SEP.join(run) + _SEP in prompt_words for run in around):
            return True
        start = text.find(expected, start + 1)
    return False
