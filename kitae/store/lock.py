"""One run, one writer: runs/NAME/run.lock, held with flock(2) by the process that writes the run.

Two trainers of one run would co-train into one store, or one would delete the checkpoint the other is about
to load. So every writing :class:`kitae.store.RunStore` holds the run's lock, and the trainer takes it before
anything else (before it looks for a checkpoint or loads the model); a second writer is refused with a message
that names the pid and host holding it. Readers (`kitae runs`, the run page) never take it.

The kernel releases a flock when the process that holds it ends, however it ends (SIGKILL, the OOM killer), so
a lock file left behind is no lock: it is never a reason to refuse. The file stays (removing it would let two
processes lock two different files); it holds ``{"pid", "host", "since"}`` of the last holder, read only to name
it in the message. A file system that cannot lock (flock fails with ENOLCK or EOPNOTSUPP) is written unguarded,
with a warning.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import time
from pathlib import Path

from kitae.errors import KitaeError
from kitae.store.failures import READ_ONLY, read_only, write_failure
from kitae.store.status import this_host

LOCK_NAME = "run.lock"
log = logging.getLogger(__name__)


class RunLock:
    """The held lock of one run folder; :meth:`release` (or the end of the process) lets it go."""

    def __init__(self, run_dir: Path, fd: int | None):
        self.run_dir = run_dir
        self._fd = fd  # None once released, or where the file system cannot lock

    @classmethod
    def acquire(cls, run_dir: str | Path) -> "RunLock":
        """Lock `run_dir` (created if missing) for this process, or raise KitaeError naming who holds it."""
        run_dir = Path(run_dir)
        path = run_dir / LOCK_NAME
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by child processes (PEP 446)
        except OSError as exc:
            if exc.errno in READ_ONLY:  # name the folder that refuses: the run's, or the one it was to be made in
                raise read_only(_nearest_folder(run_dir), exc.strerror) from exc
            raise write_failure(exc, path, run_dir) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise KitaeError(_held_message(path, holder)) from None
        except OSError as exc:
            if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                os.close(fd)
                raise write_failure(exc, path, run_dir) from exc
            log.warning("%s: this file system cannot lock files (%s); nothing stops a second writer of the run",
                        path, exc.strerror)
        _write_holder(fd)
        return cls(run_dir, fd)

    def release(self) -> None:
        """Let the lock go (again: nothing)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the only descriptor of the open file releases its flock

    def __del__(self) -> None:  # a store dropped without close() must not keep its run locked in this process
        try:
            self.release()
        except Exception:  # noqa: BLE001 - at interpreter exit the kernel lets it go anyway
            pass

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> "RunLock":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _nearest_folder(path: Path) -> Path:
    while not path.is_dir() and path != path.parent:
        path = path.parent
    return path


def _write_holder(fd: int) -> None:
    info = json.dumps({"pid": os.getpid(), "host": this_host(), "since": time.time()}).encode()
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, info, 0)
    except OSError:  # a full disk: the lock holds all the same; only its message would lack the pid
        pass


def _holder(fd: int) -> dict:
    try:
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return info if isinstance(info, dict) else {}
    except (OSError, ValueError):
        return {}


def _held_message(path: Path, holder: dict) -> str:
    run_dir = path.parent
    pid, host = holder.get("pid"), holder.get("host")
    if pid == os.getpid() and host == this_host():
        return (f"run '{run_dir.name}' is already open for writing in this process ({path} is held); close that "
                "RunStore (or finish that Trainer) before opening the run to write again")
    who = f"pid {pid} on {host}" if pid is not None else "another process (its pid is not written yet)"
    since = f" since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(holder['since']))}" \
        if isinstance(holder.get("since"), (int, float)) else ""
    return (f"run '{run_dir.name}' is being written by {who}{since}, which holds {path}; a run has one writer: "
            f"wait for it to end or stop it (kill {pid if pid is not None else 'PID'}), then "
            f"`kitae train --resume {run_dir}`; `kitae runs show` and `kitae ui` can read the run meanwhile")
