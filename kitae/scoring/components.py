"""A run's reward: named, weighted components, each a grader; None abstains and is masked (TRL's rule).

    total_i = Σ_c w_c · r_{c,i}   over the components c that did not abstain on sample i
    a sample on which every component abstained has no reward: it is marked invalid and gets advantage 0.
    Only finite scores count (graders abstain on NaN and infinities), and weight-0 components only log.
    A score (or weighted score) past ±REWARD_LIMIT (1e15) is a grader error too (:func:`within_reward_limit`).

Every component's scores, reasons and errors are kept per sample, so nothing is summed away before it reaches
the run store. Weight 0 logs a component without training on it.

A run watches its rewards (steps in a row without a finite score, a reward function that gives every sample one
score): kitae.trainer.health, with the rest of the run's health.

Reasoning models: a component whose ``think`` is "strip" grades the answer after a ``<think>...</think>`` block
(:func:`answer_after_think`); its ``completion_tokens`` and ``completion_ids`` still count every token. Where the
chat template opened the block in the prompt (``sample["thinking_open"]``, set by the rollout), the completion
starts inside the thinking: ``...</think>answer``, and one cut off before ``</think>`` has no answer.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from typing import Literal

from kitae.chat import THINK_CLOSE, THINK_OPEN
from kitae.graders.base import Grade, Grader, is_finite_number


Think = Literal["strip", "keep"]


# Rewards reach float32 tensors and their squares (the group's std): 1e308 is finite in Python, yet its mean
# overflows (statistics.fmean raised OverflowError and crashed the step) and in float32 it is infinity. A sum
# of a thousand components at this limit, squared, stays far inside float32 (3.4e38).
REWARD_LIMIT = 1e15


@dataclass
class RewardComponent:
    name: str
    weight: float
    grader: Grader
    think: Think = "keep"  # "strip": the grader sees the answer after a <think> block (answer_after_think)


def answer_after_think(text: str, thinking_open: bool = False) -> str:
    """What a grader sees of a reasoning model's completion under ``think: strip``: the text after the last
    ``</think>``, leading whitespace trimmed. A completion that opened ``<think>`` and never closed it (cut off
    while thinking) has no answer: "" (a correctness grader scores it as wrong). One with no think block is
    unchanged. The end of the turn (``<|im_end|>``) is after the block, so it is kept. ``thinking_open``: the
    prompt opened the block (:func:`kitae.chat.opens_thinking`), so the completion starts inside it and one
    without ``</think>`` has no answer either.

    >>> answer_after_think("<think>2+2 is 4</think>  4<|im_end|>")
    '4<|im_end|>'
    >>> answer_after_think("<think>2+2 is"), answer_after_think("4")
    ('', '4')
    >>> answer_after_think("2+2 is", thinking_open=True), answer_after_think("2+2 is 4</think>4", thinking_open=True)
    ('', '4')
    """
    head, closed, tail = text.rpartition(THINK_CLOSE)
    if closed:
        return tail.lstrip()
    return "" if thinking_open or text.lstrip().startswith(THINK_OPEN) else text


def graded_samples(samples: list[dict], think: Think) -> list[dict]:
    """The samples as a component's grader sees them: with ``think: strip`` a copy of each whose ``output_text``
    is :func:`answer_after_think` of it (every other field, token counts included, as sampled; the samples
    themselves are not changed, so the run store keeps the whole text)."""
    if think == "keep":
        return samples
    return [{**s, "output_text": answer_after_think(s["output_text"], bool(s.get("thinking_open")))}
            if isinstance(s.get("output_text"), str) else s for s in samples]


@dataclass
class GroupScores:
    """Scores of one group: per component, one Grade per sample."""

    grades: dict[str, list[Grade]]
    totals: list[float | None] = field(default_factory=list)  # None: every component abstained


def combine(grades: dict[str, list[Grade]], weights: dict[str, float]) -> list[float | None]:
    """Weighted sum per sample over the components that did not abstain (None when all abstained, and when
    finite scores sum past the largest float: a reward is always a finite number). A weight-0 component only
    logs: its score alone is no reward, so it cannot turn an abstention into a reward of 0.

    >>> combine({"a": [Grade(1.0), Grade(None)], "b": [Grade(0.5), Grade(None)]}, {"a": 1.0, "b": 2.0})
    [2.0, None]
    """
    n = len(next(iter(grades.values())))
    totals: list[float | None] = []
    for i in range(n):
        parts = [(weights[c], g[i].score) for c, g in grades.items() if weights[c] and is_finite_number(g[i].score)]
        total = sum(w * s for w, s in parts) if parts else None
        totals.append(total if total is None or math.isfinite(total) else None)
    return totals


def within_reward_limit(grades: list[Grade], weight: float) -> list[Grade]:
    """The grades, each whose score or weighted score is past ±REWARD_LIMIT an abstention with an error (as
    the graders treat NaN: counted in the component's error rate, shown with the sample), so that no sum or
    mean of a step's rewards overflows.

    >>> [g.score for g in within_reward_limit([Grade(1e308), Grade(0.5)], 1.0)]
    [None, 0.5]
    """
    return [Grade.abstain(error=f"score {g.score:g} is past the reward limit of ±{REWARD_LIMIT:g} (weight "
                                f"{weight:g}): no step can average such rewards; scale the reward down")
            if is_finite_number(g.score) and max(abs(g.score), abs(weight * g.score)) > REWARD_LIMIT else g
            for g in grades]


async def _score_all(components: list[RewardComponent], items: list[dict], groups: list[list[dict]]):
    tasks = [c.grader.agrade_group(item, graded_samples(samples, c.think))
             for item, samples in zip(items, groups) for c in components]
    return await asyncio.gather(*tasks)


def score_groups(
    components: list[RewardComponent], items: list[dict], groups: list[list[dict]]
) -> list[GroupScores]:
    """Grade every group with every component, concurrently (async graders overlap their I/O)."""
    from kitae.graders.base import run_sync

    flat = run_sync(_score_all(components, items, groups))
    weights = {c.name: c.weight for c in components}
    out = []
    for g in range(len(items)):
        per = {c.name: within_reward_limit(flat[g * len(components) + k], c.weight) for k, c in enumerate(components)}
        out.append(GroupScores(per, combine(per, weights)))
    return out


def counter_deltas(components: list[RewardComponent], before: dict[str, float]) -> tuple[dict[str, float], dict[str, float]]:
    """(per-step changes as `grader/<component>/<counter>` metrics, the new cumulative values), from each
    component's :meth:`Grader.counters` (judge tokens and calls, reward-model failures, ...)."""
    now = {f"grader/{c.name}/{k}": float(v) for c in components for k, v in c.grader.counters().items()
           if isinstance(v, (int, float)) and not isinstance(v, bool)}  # numbers only (a user's grader may give more)
    return {k: v - before.get(k, 0.0) for k, v in now.items()}, now
