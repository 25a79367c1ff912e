"""Answer quality from a reward model (GRPO-zero recipe, reward 5): the pure shaping around the RM's scalar.

The GRPO-zero recipe: only template-compliant completions are scored (gate); reward = 1.0 × RM score clipped to ±10; the
length factor applies to positive scores only (a short answer earns less, but a bad short answer is not let
off); when the reward model fails the reward is None (masked: it does not enter the advantage). kitae also masks a
score that is NaN or ±infinity instead of clipping it (``min(10, nan)`` is 10).

kitae's reading (spec fields of ``type: reward_model`` besides the model's own, see kitae/rewards/graders.py):

    scale: 1.0          # reward = clip(scale × rm_score, -clip, clip) ...
    clip: 10.0
    full_chars: 100     # ... × length_factor(chars) when positive (min(1, chars / full_chars); 0 = off)
    gate: true          # a non-compliant completion is not sent to the RM ...
    gated_score: 0.0    # ... and gets this (the template reward already punishes it)

Every number must be finite (``scale: .nan`` would make every score the top reward, as ``min(10, nan)`` is 10);
scale, clip and full_chars must be >= 0 (kitae.config refuses the others when the spec is read).

Open choices: the gate uses the template check of kitae/rewards/chat_template.py (end marker, no stray tokens,
not cut, not empty) but not min_chars; clipping comes before the length factor, so the result stays within ±clip.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kitae.config import setting
from kitae.rewards.common import Reward, length_factor


@dataclass(frozen=True)
class QualityConfig:
    scale: float = setting(1.0, minimum=0)  # a negative scale would reward what the reward model dislikes
    clip: float = setting(10.0, minimum=0.0)
    full_chars: int = setting(100, minimum=0)
    gate: bool = True
    gated_score: float = 0.0  # any finite number (a penalty may be negative)


def gated_reward(violation: str, cfg: QualityConfig = QualityConfig()) -> Reward:
    """The reward of a completion the gate kept away from the reward model."""
    return Reward(cfg.gated_score, {"gated": 1.0}, f"not scored: {violation}")


def quality_reward(rm_score: float | None, chars: int, cfg: QualityConfig = QualityConfig()) -> Reward:
    """Shape one RM score: scale, clip to ±clip, length factor on positive values; None stays None, and so
    does a score that is NaN or ±infinity (never clipped into range).

    >>> quality_reward(25.0, chars=50).score  # clipped to 10, then × 50/100
    5.0
    >>> quality_reward(-3.0, chars=5).score   # negative: no length factor
    -3.0
    """
    if rm_score is None:
        return Reward(None, {"gated": 0.0, "rm_score": None}, "reward model failed")
    if not math.isfinite(rm_score):  # min(clip, nan) is clip: a NaN would become the top reward
        return Reward(None, {"gated": 0.0, "rm_score": None}, f"reward model score {rm_score} is not a finite number")
    value = max(-cfg.clip, min(cfg.clip, cfg.scale * rm_score))
    factor = length_factor(chars, cfg.full_chars) if value > 0 else 1.0
    metrics = {"gated": 0.0, "rm_score": float(rm_score), "length_factor": factor}
    return Reward(value * factor + 0.0, metrics)
