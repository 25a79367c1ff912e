"""What the processes of a multi-process run (``accelerate launch``) share and agree on.

Each process samples its share of a step's prompts; they agree on how many groups to train on (the fewest any
process has, so every process runs the same micro-steps), send their sampler updates and group records to one
another, and average their metrics, and stop after the same step (:func:`agree_to_stop`). In one process every function here
returns its input. A rank ends with the launcher that started it: kitae.lifetime.die_with_parent.
"""

from __future__ import annotations

from typing import Any

import torch


def local_share(acc, items: list) -> list:
    """This process's share of ``items``: every num_processes-th one, from its own index."""
    return items[acc.process_index :: acc.num_processes]


def local_count(acc, n: int) -> int:
    """How many of ``n`` items :func:`local_share` gives this process."""
    return len(range(acc.process_index, n, acc.num_processes))


def fewest(acc, n: int) -> int:
    """The smallest ``n`` over all processes."""
    return min(gather(acc, [n]))


def gather(acc, items: list[Any]) -> list[Any]:
    """Every process's ``items``, concatenated in process order (a collective call)."""
    if acc.num_processes == 1:
        return items
    from accelerate.utils import gather_object

    return gather_object(items)


def reduce_metrics(acc, metrics: dict[str, float], op: str = "mean") -> dict[str, float]:
    """Metrics over all processes: means of per-process values (``op`` "mean"), or sums for counters ("sum")."""
    if acc.num_processes == 1 or not metrics:
        return metrics
    keys = sorted(metrics)
    t = torch.tensor([metrics[k] for k in keys], dtype=torch.float64, device=acc.device)
    t = acc.reduce(t, op)
    return dict(zip(keys, t.tolist()))


def agree_to_stop(acc, stop_signal: int | None, stop: bool) -> tuple[bool, int | None]:
    """(whether any process asked to stop, the signal that asked, if one did): every process stops after the
    same step, whichever of them got the signal (``kill PID`` of one rank). A collective call each step."""
    if acc.num_processes == 1:
        return stop, stop_signal
    asked = gather(acc, [(stop, stop_signal)])
    signals = [s for _, s in asked if s is not None]
    return any(s for s, _ in asked), (signals[0] if signals else None)
