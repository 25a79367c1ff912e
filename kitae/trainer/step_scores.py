"""A step's grades as more than one stage reads them: the total rewards as a tensor (dynamic sampling in stage 1,
the advantages of stage 2) and each group's pass rate (the prompt sampler in stage 1, the metrics of stage 4).

A total that is None (every component abstained) or not finite is invalid; a pass rate counts only the samples
its component graded.
"""

from __future__ import annotations

import math
import statistics

import torch

from kitae.scoring.components import GroupScores


def reward_tensor(scores: list[GroupScores]) -> tuple[torch.Tensor, torch.Tensor]:
    """Total rewards [num_groups, G] (0 where invalid) and validity [num_groups, G]; only a finite total is valid."""
    vals = [[math.nan if t is None else t for t in gs.totals] for gs in scores]
    r = torch.tensor(vals, dtype=torch.float32)  # [num_groups, G]
    valid = torch.isfinite(r)
    return torch.where(valid, r, torch.zeros_like(r)), valid


def pass_rates(scores: list[GroupScores], component: str, threshold: float) -> list[float | None]:
    """Per group: the fraction of its graded samples whose ``component`` scored >= ``threshold`` (None when the
    component graded none)."""
    out = []
    for gs in scores:
        got = [g.score for g in gs.grades[component] if g.score is not None]
        out.append(statistics.fmean(x >= threshold for x in got) if got else None)
    return out
