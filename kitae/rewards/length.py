"""Kimi k1.5's length reward (arXiv 2501.12599 §2.3.3), with a weight and a warm-up schedule.

Over the k completions of one prompt, with len_i their lengths:

    lambda_i = 0.5 - (len_i - min_len) / (max_len - min_len)
    reward_i = lambda_i            if completion i is correct
               min(0, lambda_i)    if it is not
    all 0 when max_len == min_len

so short correct answers are rewarded, long ones penalized, and a wrong answer is never rewarded for being short.
The paper adds it to the reward with a weight, after a warm-up without it. Spec fields of ``type: length``
(a group grader):

    correct: {type: answer}   # nested grader spec: the correctness signal
    threshold: 1.0            # correct when the nested grader's score >= threshold
    weight: 1.0               # the length reward is weight(step) × reward_i
    warmup_steps: 0           # weight(step) = 0 for step < warmup_steps ...
    ramp_steps: 0             # ... then rises linearly to `weight` at warmup_steps + ramp_steps
                              # (0 = jumps to weight at warmup_steps: the paper's schedule)
    unit: tokens              # tokens (completion_tokens) or chars (content characters)

The training step comes from ``sample["step"]`` when present, else from the last ``set_step(step)`` call (the
trainer calls it before grading a step's groups); with neither (offline ``kitae grade``) the full weight applies.
Lengths are in tokens when every sample carries ``completion_tokens`` and unit is tokens, otherwise characters.
A sample whose correctness grader abstained gets None (masked); its length still counts for min_len and max_len.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LengthConfig:
    threshold: float = 1.0
    weight: float = 1.0
    warmup_steps: int = 0
    ramp_steps: int = 0
    unit: str = "tokens"


def length_lambdas(lengths: list[int]) -> list[float]:
    """lambda_i = 0.5 - (len_i - min) / (max - min); all 0.0 when every length is the same.

    >>> length_lambdas([10, 20, 30])
    [0.5, 0.0, -0.5]
    """
    lo, hi = min(lengths, default=0), max(lengths, default=0)
    if hi == lo:
        return [0.0 for _ in lengths]
    return [0.5 - (n - lo) / (hi - lo) for n in lengths]


def length_rewards(lengths: list[int], correct: list[bool | None]) -> list[float | None]:
    """The length reward per completion (before the weight); None where correctness is unknown.

    >>> length_rewards([10, 20, 30], [False, True, True])
    [0.0, 0.0, -0.5]
    """
    out: list[float | None] = []
    for lam, ok in zip(length_lambdas(lengths), correct):
        out.append(None if ok is None else (lam if ok else min(0.0, lam)) + 0.0)
    return out


def length_weight(step: int | None, cfg: LengthConfig = LengthConfig()) -> float:
    """weight × clip((step - warmup_steps) / ramp_steps, 0, 1); with ramp_steps 0, 0 before warmup_steps and
    weight from then on. No step known (None) means the full weight.

    >>> [length_weight(s, LengthConfig(weight=0.5, warmup_steps=10, ramp_steps=4)) for s in (None, 9, 10, 11, 14)]
    [0.5, 0.0, 0.0, 0.125, 0.5]
    """
    if step is None or step >= cfg.warmup_steps + cfg.ramp_steps:
        return cfg.weight
    if step < cfg.warmup_steps:
        return 0.0
    return cfg.weight * (step - cfg.warmup_steps) / cfg.ramp_steps
