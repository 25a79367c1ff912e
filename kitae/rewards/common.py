"""What the reward components share: the `Reward` they return, the completion's content, character n-grams,
the length factor.

Every component works on characters, never on words, so Japanese (no spaces) and English are treated alike.

    >>> content_of("12+35=47です。<|im_end|>")
    '12+35=47です。'
    >>> char_ngrams("ababab", 4)
    ['abab', 'baba', 'abab']
    >>> length_factor(30, full_chars=100)
    0.3
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from kitae.chat import IM_END, split_at_end

_SPACES = re.compile(r"\s+")


class Reward(NamedTuple):
    """One component's verdict on one sample: score (None = abstain), metrics to log, and why (for people)."""

    score: float | None
    metrics: dict[str, float | None]
    reason: str | None = None


def content_of(text: str, end: str = IM_END) -> str:
    """What the model said: the text before the first end marker (all of it when there is none), stripped."""
    return split_at_end(text, end)[0].strip()


def char_ngrams(text: str, n: int) -> list[str]:
    """Every character n-gram of `text`, in order, repeats included; [] when `text` is shorter than n."""
    return [text[i : i + n] for i in range(len(text) - n + 1)]


def shingles(text: str, n: int) -> set[str]:
    """The set of character n-grams of `text` with runs of whitespace collapsed to one space.

    A non-empty text shorter than n is its own single shingle, so "47" and "48" can still be compared.
    """
    text = _SPACES.sub(" ", text).strip()
    if not text:
        return set()
    return set(char_ngrams(text, n)) or {text}


def jaccard(a: set[str], b: set[str]) -> float:
    """|a ∩ b| / |a ∪ b|; 1.0 for two empty sets (nothing tells them apart)."""
    union = a | b
    return len(a & b) / len(union) if union else 1.0


def length_factor(chars: int, full_chars: int) -> float:
    """min(1, chars / full_chars): how far a completion is from the length that earns full credit.

    The GRPO-zero recipe multiplies the template reward and positive reward-model scores by a "length factor" to damp
    too-short answers but does not define it; kitae makes it a linear ramp from 0 characters to `full_chars`
    characters, then flat at 1. `full_chars` <= 0 turns it off (always 1.0), which tasks with very short answers
    (the bundled arithmetic task answers "47") want.
    """
    if full_chars <= 0:
        return 1.0
    return min(1.0, max(0, chars) / full_chars)


def sample_int(sample: dict[str, Any], key: str, default: int | None = None) -> int | None:
    """An integer field of a sample (``completion_tokens``, ``max_completion_length``, ``step``), or `default`."""
    value = sample.get(key)
    if value is None or isinstance(value, bool):
        return default
    return int(value)
