"""A run's reward: named, weighted components, each a grader; None abstains and is masked (TRL's rule).

    total_i = Σ_c w_c · r_{c,i}   over the components c that did not abstain on sample i
    a sample on which every component abstained has no reward: it is marked invalid and gets advantage 0.
    Only finite scores count (graders abstain on NaN and infinities), and weight-0 components only log.

Every component's scores, reasons and errors are kept per sample, so nothing is summed away before it reaches
the run store. Weight 0 logs a component without training on it.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from typing import Any

from kitae.graders.base import Grade, Grader, is_finite_number
from kitae.store.records import valid_text


@dataclass
class RewardComponent:
    name: str
    weight: float
    grader: Grader


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


async def _score_all(components: list[RewardComponent], items: list[dict], groups: list[list[dict]]):
    tasks = [c.grader.agrade_group(item, samples) for item, samples in zip(items, groups) for c in components]
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
        per = {c.name: flat[g * len(components) + k] for k, c in enumerate(components)}
        out.append(GroupScores(per, combine(per, weights)))
    return out


def last_problems(components: list[RewardComponent], scores: list[GroupScores]) -> dict[str, str]:
    """Per component, why its last sample of the step has no score: the grader's error, else its reason."""
    out = {}
    for c in components:
        grades = [g for gs in scores for g in gs.grades[c.name] if g.score is None]
        last = grades[-1] if grades else None
        why = (last.error or last.reason) if last is not None else None
        out[c.name] = why or ("abstained without saying why" if last is not None else "scored (weight 0: logs only)")
    return out


def no_reward_message(steps: int, last_step: int, problems: dict[str, str], run_dir: Any) -> str:
    """The error that stops a run in which no sample got a reward for ``steps`` steps in a row."""
    first = last_step - steps + 1
    span = f"step {last_step}" if steps == 1 else f"steps {first}-{last_step}"
    lines = [f"no sample got a reward in {span}: every reward component abstained or failed on every sample, so "
             f"training learned nothing (algorithm.max_steps_without_reward: {steps}). Each component's last error:"]
    lines += [f"  {name}: {_short(why)}" for name, why in problems.items()]
    lines.append(f"Fix the rewards (the run page, `kitae ui`, shows every sample's errors), then continue from the "
                 f"checkpoint of step {last_step} with `kitae train --resume {run_dir}`; "
                 f"algorithm.max_steps_without_reward: 0 never stops.")
    return "\n".join(lines)


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(valid_text(text).split())  # printable, one line
    return text if len(text) <= limit else text[: limit - 3] + "..."


def counter_deltas(components: list[RewardComponent], before: dict[str, float]) -> tuple[dict[str, float], dict[str, float]]:
    """(per-step changes as `grader/<component>/<counter>` metrics, the new cumulative values), from each
    component's :meth:`Grader.counters` (judge tokens and calls, reward-model failures, ...)."""
    now = {f"grader/{c.name}/{k}": float(v) for c in components for k, v in c.grader.counters().items()
           if isinstance(v, (int, float)) and not isinstance(v, bool)}  # numbers only (a user's grader may give more)
    return {k: v - before.get(k, 0.0) for k, v in now.items()}, now
