"""A child process ends with the process that started it: no rollout worker (``sampling.async``) or rank of
``accelerate launch`` trains on alone under PID 1 after its parent was killed."""

from __future__ import annotations

import ctypes
import os
import threading
import time

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
