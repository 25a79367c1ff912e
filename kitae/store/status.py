"""What readers report as a run's status.

A trainer killed by SIGKILL, the OOM killer or a power cut never writes "crashed"; its run.db still says
"running". Readers correct that:

- same machine (the host recorded with the pid): "crashed" when the pid is gone, is a zombie, or the machine
  rebooted after the last heartbeat (so the pid may belong to someone else now);
- another machine: "crashed" when the last heartbeat is older than ``stale_after`` seconds (the trainer
  heartbeats every step; the default leaves room for a long eval between steps).
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

RUN_STATUSES = ("running", "finished", "crashed", "stopped")
FINAL_STATUSES = ("finished", "crashed", "stopped")
STALE_AFTER_S = 1800.0


def this_host() -> str:
    return socket.gethostname()


def pid_alive(pid: int) -> bool:
    """True when a process with this pid exists on this machine and is not a zombie."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    return not _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False  # no /proc (macOS) or the process just went away; os.kill already said it exists
    return stat.rpartition(")")[2].split()[0] == "Z"  # the state follows the parenthesised command name


def boot_time() -> float | None:
    """When this machine booted (unix seconds), where /proc tells; None elsewhere."""
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except OSError:
        pass
    return None


def effective_status(
    status: str,
    pid: int | None,
    host: str | None,
    heartbeat_at: float,
    stale_after: float = STALE_AFTER_S,
    now: float | None = None,
) -> str:
    """The stored status, except that a "running" run whose trainer is gone reads "crashed"."""
    if status != "running":
        return status
    if host == this_host() and pid is not None:
        booted = boot_time()
        rebooted = booted is not None and heartbeat_at < booted
        return "running" if pid_alive(pid) and not rebooted else "crashed"
    now = time.time() if now is None else now
    return "running" if now - heartbeat_at <= stale_after else "crashed"
