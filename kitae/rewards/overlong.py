"""Length penalties near max_completion_length: the GRPO-zero recipe's overlong penalty and DAPO's soft overlong punishment.

Both read the sample's ``completion_tokens`` and ``max_completion_length`` (the rollout sets them; a spec may give
``max_completion_length`` for samples that lack it, the sample's own value wins) and ``finish_reason``.
A sample without ``completion_tokens`` abstains (None) unless it was cut (finish_reason "length").

Both are one shape, :func:`near_limit` over a :class:`Zone`: 0 up to the zone's start, then -coef × progress **
power through the zone, a hard value once cut. They differ only in the zone (the last 15% of the limit, or DAPO's
cache), the curve (squared, or linear) and what counts as cut (the finish reason, or more tokens than L_max).

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


@dataclass(frozen=True)
class Zone:
    """Both penalties' shape near the limit: 0 up to ``start`` tokens, then -coef × progress ** power, progress
    the share of the ``width`` tokens after ``start`` that a completion has used (at most the limit's); ``hard``
    when it was cut."""

    start: float
    width: float
    coef: float = 1.0
    power: float = 1.0
    hard: float = -1.0


def near_limit(tokens: int, limit: int, cut: bool, zone: Zone) -> tuple[float, float]:
    """(penalty, progress) of a completion of ``tokens`` tokens under a limit of ``limit``.

    >>> near_limit(90, 100, False, Zone(start=80, width=20))  # half way through the zone
    (-0.5, 0.5)
    >>> near_limit(120, 100, False, Zone(80, 20)), near_limit(90, 100, True, Zone(80, 20))  # past it; cut
    ((-1.0, 1.0), (-1.0, 1.0))
    """
    if cut:
        return zone.hard, 1.0
    if tokens <= zone.start:
        return 0.0, 0.0
    progress = (min(tokens, limit) - zone.start) / zone.width
    return -zone.coef * progress**zone.power, progress


def overlong_penalty(tokens: int, max_tokens: int, finish_reason: str | None = None,
                     cfg: OverlongConfig = OverlongConfig()) -> Reward:
    """The GRPO-zero recipe's penalty for one completion of `tokens` tokens under a limit of `max_tokens`.

    >>> overlong_penalty(90, 100).score  # progress (90 - 85) / 15 = 1/3 -> -0.8 / 9
    -0.08888888888888889
    """
    cut = finish_reason == "length" or (finish_reason is None and tokens >= max_tokens)
    start = cfg.soft_start * max_tokens
    score, progress = near_limit(tokens, max_tokens, cut, Zone(start, max_tokens - start, cfg.coef, cfg.power,
                                                               cfg.hard_penalty))
    if cut:
        return Reward(score, {"progress": progress}, f"cut at the limit of {max_tokens} tokens")
    reason = f"{tokens} tokens is past {cfg.soft_start:.0%} of {max_tokens}" if tokens > start else None
    return Reward(score, {"progress": progress}, reason)


def soft_overlong_punishment(tokens: int, max_tokens: int, cfg: SoftOverlongConfig = SoftOverlongConfig()) -> Reward:
    """DAPO Eq. 13 for one completion (× scale): :func:`near_limit` with the cache as its zone, linear, and -1
    past L_max.

    >>> soft_overlong_punishment(90, 100).score  # cache 20: (80 - 90) / 20
    -0.5
    """
    cache = cfg.cache_tokens if cfg.cache_tokens is not None else cfg.cache_fraction * max_tokens
    value, _ = near_limit(tokens, max_tokens, tokens > max_tokens, Zone(max_tokens - cache, cache))
    reason = f"{tokens} tokens is in the last {cache:g} of {max_tokens}" if value < 0 else None
    return Reward(cfg.scale * value + 0.0, {"overflow": value}, reason)


def lengths_of(sample: dict[str, Any], default_max: int | None) -> tuple[int | None, int | None]:
    """(completion_tokens, max_completion_length) of a sample, the spec's max as the fallback."""
    return sample_int(sample, "completion_tokens"), sample_int(sample, "max_completion_length", default_max)
