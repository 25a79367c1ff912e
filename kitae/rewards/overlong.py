"""Length penalties near max_completion_length: the GRPO-zero recipe's overlong penalty and DAPO's soft overlong punishment.

Both read the sample's ``completion_tokens`` and ``max_completion_length`` (the rollout sets them; a spec may give
``max_completion_length`` for samples that lack it, the sample's own value wins) and ``finish_reason``.
A sample without ``completion_tokens`` abstains (None) unless it was cut (finish_reason "length").

**The GRPO-zero recipe (reward 3, ``type: overlong``)**: from 85% of max_completion_length on, -0.8 × progress²,
progress = how far the completion is through that last 15%; -1.5 when it was cut at 100%.

    soft_start: 0.85     # fraction of max_completion_length where the soft penalty starts
    coef: 0.8            # soft penalty = -coef × progress ** power
    power: 2.0
    hard_penalty: -1.5   # cut at the limit (finish_reason "length", or no finish_reason and tokens >= max)
    max_completion_length: null

Open choice: a completion that ends properly (finish_reason "stop") with exactly max_completion_length tokens
was not cut; it gets the full soft penalty -coef, not the hard one.

**DAPO (arXiv 2503.14476 Eq. 13, ``type: soft_overlong``)** with L_max = max_completion_length and a cache
L_cache: 0 when |y| <= L_max - L_cache; ((L_max - L_cache) - |y|) / L_cache in the cache zone; -1 beyond L_max.
A cut completion has |y| = L_max and gets -1.

    cache_tokens: null   # L_cache in tokens; when null, cache_fraction × L_max
    cache_fraction: 0.2  # DAPO used L_max 20480 with a 4096-token cache
    scale: 1.0           # the result is multiplied by scale
    max_completion_length: null
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kitae.config import setting
from kitae.rewards.common import Reward, sample_int


@dataclass(frozen=True)
class OverlongConfig:
    soft_start: float = setting(0.85, minimum=0.0, maximum=0.999)
    coef: float = 0.8
    power: float = setting(2.0, minimum=0.0)
    hard_penalty: float = -1.5
    max_completion_length: int | None = setting(None, minimum=1)


@dataclass(frozen=True)
class SoftOverlongConfig:
    cache_tokens: int | None = setting(None, minimum=1)
    cache_fraction: float = setting(0.2, minimum=0.001, maximum=1.0)
    scale: float = 1.0
    max_completion_length: int | None = setting(None, minimum=1)


def overlong_penalty(tokens: int, max_tokens: int, finish_reason: str | None = None,
                     cfg: OverlongConfig = OverlongConfig()) -> Reward:
    """The GRPO-zero recipe's penalty for one completion of `tokens` tokens under a limit of `max_tokens`.

    >>> overlong_penalty(90, 100).score  # progress (90 - 85) / 15 = 1/3 -> -0.8 / 9
    -0.08888888888888889
    """
    cut = finish_reason == "length" or (finish_reason is None and tokens >= max_tokens)
    if cut:
        return Reward(cfg.hard_penalty, {"progress": 1.0}, f"cut at the limit of {max_tokens} tokens")
    start = cfg.soft_start * max_tokens
    if tokens <= start:
        return Reward(0.0, {"progress": 0.0})
    progress = min(1.0, (tokens - start) / (max_tokens - start))
    reason = f"{tokens} tokens is past {cfg.soft_start:.0%} of {max_tokens}"
    return Reward(-cfg.coef * progress**cfg.power, {"progress": progress}, reason)


def soft_overlong_punishment(tokens: int, max_tokens: int, cfg: SoftOverlongConfig = SoftOverlongConfig()) -> Reward:
    """DAPO Eq. 13 for one completion (× scale).

    >>> soft_overlong_punishment(90, 100).score  # cache 20: (80 - 90) / 20
    -0.5
    """
    cache = cfg.cache_tokens if cfg.cache_tokens is not None else cfg.cache_fraction * max_tokens
    expected = max_tokens - cache
    if tokens <= expected:
        value = 0.0
    elif tokens <= max_tokens:
        value = (expected - tokens) / cache
    else:
        value = -1.0
    reason = f"{tokens} tokens is in the last {cache:g} of {max_tokens}" if value < 0 else None
    return Reward(cfg.scale * value + 0.0, {"overflow": value}, reason)


def lengths_of(sample: dict[str, Any], default_max: int | None) -> tuple[int | None, int | None]:
    """(completion_tokens, max_completion_length) of a sample, the spec's max as the fallback."""
    return sample_int(sample, "completion_tokens"), sample_int(sample, "max_completion_length", default_max)
