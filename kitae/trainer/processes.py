"""What the processes of a multi-process run (``accelerate launch``) share and agree on.

Each process samples its share of a step's prompts; they agree on how many groups to train on (the fewest any
process has, so every process runs the same micro-steps), send their sampler updates and group records to one
another, and average their metrics, and stop after the same step (:func:`agree_to_stop`). In one process every function here
returns its input. :func:`die_with_parent`: a child process (a rank of the launcher, the rollout worker of
``sampling.async``) ends with the process that started it.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
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


PR_SET_PDEATHSIG = 1  # linux/prctl.h
PARENT_POLL_SECS = 1.0


def die_with_parent(sig: int, parent: int | None = None) -> None:
    """Get ``sig`` when the process that started this one dies (a trainer killed by SIGKILL, a launcher gone),
    so that no rollout worker or rank trains on alone under PID 1: Linux's PR_SET_PDEATHSIG, else (another
    system) a thread that watches the parent's pid. One of them only: a second SIGTERM would stop the run at
    once instead of at a checkpoint. Called first thing in the child; ``parent``: the pid that started it, where
    known (a parent that died before this call is caught too)."""
    parent = os.getppid() if parent is None else parent
    try:
        asked = ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux
        asked = False
    if asked:
        if os.getppid() != parent:  # died before the kernel was asked
            os.kill(os.getpid(), sig)
        return

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_SECS)
        os.kill(os.getpid(), sig)

    threading.Thread(target=watch, name="kitae-parent-watch", daemon=True).start()
