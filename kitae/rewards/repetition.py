"""Repetition penalty on character n-grams (GRPO-zero recipe, reward 2).

The GRPO-zero recipe: detect looping output by the repetition rate of character n-grams (n = 6 by default);
penalty -0.5 × repetition rate, at most -2.0 (it guards against "RM hacking": padding an answer with repeats
to win reward-model score).

The recipe does not define the rate. For the floor (-2.0 = -0.5 × 4) to be reachable the rate cannot be a
fraction in [0, 1], so kitae defines it as the mean number of *extra* occurrences per distinct n-gram:

    rate = (number of n-grams) / (number of distinct n-grams) - 1

Ordinary text repeats almost no 6-gram, so its rate is ~0 (a 200-character answer that repeats one 10-character
phrase once: 195 / 190 - 1 = 0.026, penalty -0.013). A loop of a p-character phrase over L characters has
about p distinct n-grams, so its rate is about L / p - 1 and reaches the floor after five repeats.
Spec fields of ``type: repetition``:

    n: 6           # n-gram length in characters
    coef: 0.5      # penalty = -coef × rate ...
    floor: -2.0    # ... but never below floor
    end_marker: null   # the rate is computed on the content before it; null: the model's, else "<|im_end|>"

Text shorter than n has no n-gram and rate 0.
"""

from __future__ import annotations

from dataclasses import dataclass

from kitae.chat import sample_end
from kitae.config import setting
from kitae.rewards.common import Reward, char_ngrams, content_of


@dataclass(frozen=True)
class RepetitionConfig:
    n: int = setting(6, minimum=1)
    coef: float = 0.5
    floor: float = -2.0
    end_marker: str | None = None  # None: the model's (the sample's end_marker), else <|im_end|>


def repetition_rate(text: str, n: int = 6) -> float:
    """(n-grams / distinct n-grams) - 1 over the character n-grams of `text`; 0.0 when there are none.

    >>> repetition_rate("ababababab", 6)  # 5 six-grams, 2 distinct
    1.5
    """
    grams = char_ngrams(text, n)
    return len(grams) / len(set(grams)) - 1.0 if grams else 0.0


def repetition_penalty(text: str, cfg: RepetitionConfig = RepetitionConfig(), end: str | None = None) -> Reward:
    """max(floor, -coef × rate) on the completion's content (before ``cfg.end_marker``, else `end`, else
    ``<|im_end|>``); metrics: rate."""
    rate = repetition_rate(content_of(text, sample_end({"end_marker": end}, cfg.end_marker)), cfg.n)
    score = max(cfg.floor, -cfg.coef * rate) + 0.0  # + 0.0 turns -0.0 into 0.0
    reason = f"repetition rate {rate:.2f}" if score < 0 else None
    return Reward(score, {"rate": rate}, reason)
