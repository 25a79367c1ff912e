"""A run's reward: named, weighted components, each a grader; None abstains and is masked (TRL's rule).

    total_i = Σ_c w_c · r_{c,i}   over the components c that did not abstain on sample i
    a sample on which every component abstained has no reward: it is marked invalid and gets advantage 0.

Every component's scores, reasons and errors are kept per sample, so nothing is summed away before it reaches
the run store. Weight 0 logs a component without training on it.
"""

from __future__ import annotations

import asyncio
import importlib
import math
import os
import sys
from dataclasses import dataclass, field
from typing import Any

from kitae.errors import ConfigError
from kitae.graders.base import Grade, Grader
from kitae.trainer.config import RewardConfig


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


def build_components(cfgs: list[RewardConfig]) -> list[RewardComponent]:
    from kitae.graders import build_grader
    from kitae.graders.adapters import grader_from_callable

    out = []
    for i, c in enumerate(cfgs):
        path = f"rewards[{i}]"
        if c.grader is not None:
            grader = build_grader(c.grader, f"{path}.grader")
        else:
            grader = grader_from_callable(import_callable(c.function, f"{path}.function"), c.name)
        out.append(RewardComponent(c.name, c.weight, grader))
    return out


def import_callable(target: str, path: str) -> Any:
    """`module:function`; the module may be a file in the working directory (my_rewards.py), as with
    ``python -m``, which the installed `kitae` command does not put on the import path by itself."""
    module, _, attr = target.partition(":")
    if not module or not attr:
        raise ConfigError(path, f"expected 'module:function', got {target!r}")
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())  # last: an installed module of the same name still wins
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(path, f"cannot import {target!r}: {exc}") from None


def combine(grades: dict[str, list[Grade]], weights: dict[str, float]) -> list[float | None]:
    """Weighted sum per sample over the components that did not abstain (None when all abstained)."""
    n = len(next(iter(grades.values())))
    totals: list[float | None] = []
    for i in range(n):
        parts = [(weights[c], g[i].score) for c, g in grades.items() if _is_number(g[i].score)]
        totals.append(sum(w * s for w, s in parts) if parts else None)
    return totals


def _is_number(x: Any) -> bool:
    return x is not None and not (isinstance(x, float) and math.isnan(x))


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


def grader_counters(grader: Grader, prefix: str = "") -> dict[str, float]:
    """Cumulative numeric counters of a grader and the graders inside it (judge tokens and calls, reward-model
    failures, ...): `metrics()` where a grader has it, else `stats()`. The trainer logs their per-step change."""
    out: dict[str, float] = {}
    source = getattr(grader, "metrics", None) or getattr(grader, "stats", None)
    if callable(source):
        for key, value in source().items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out[prefix + key] = float(value)
    for name, part in (getattr(grader, "parts", None) or {}).items():
        if isinstance(part, Grader):
            out.update(grader_counters(part, f"{prefix}{name}/"))
    return out


def counter_deltas(components: list[RewardComponent], before: dict[str, float]) -> tuple[dict[str, float], dict[str, float]]:
    """(per-step changes as `grader/<component>/<counter>` metrics, the new cumulative values)."""
    now = {f"grader/{c.name}/{k}": v for c in components for k, v in grader_counters(c.grader).items()}
    return {k: v - before.get(k, 0.0) for k, v in now.items()}, now
