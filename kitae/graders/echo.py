"""Text copied from the prompt: the hack where an answer echoes the prompt, and the prompt holds what a
contains check looks for ("Which is larger, 7 or 12?" echoed contains ``12``).

An occurrence of the expected text in the answer is an *echo* when it is copied from the prompt with its
surroundings: the word just before it, or the word just after it, in the answer also stands there in the
prompt. ``7 or 12`` echoes "Which is larger, 7 or 12?" (``or 12`` is in the prompt); ``12``, ``The answer is
12`` and the whole prompt followed by ``12`` do not (nothing around that last 12 comes from the prompt). Words
are runs of letters and digits, and each kana or kanji alone (Japanese has no spaces), compared casefolded;
punctuation and spacing do not count.

The prompt is the row's user and system turns (``item.messages``; a TRL-style ``item.prompt`` string or message
list too: kitae.chat.prompt_of); a row without one has nothing to echo.
"""

from __future__ import annotations

import bisect
import re

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f"
_WORD = re.compile(rf"[{_CJK}]|[^\W_{_CJK}]+")
_SEP = "\x00"


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
        around = (tokens[max(0, first - 1) : stop], tokens[first : stop + 1])  # with the word before, after
        if not any(len(run) > len(inside) and _SEP + _SEP.join(run) + _SEP in prompt_words for run in around):
            return True
        start = text.find(expected, start + 1)
    return False
