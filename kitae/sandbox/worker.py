"""A long-lived grading process that answers JSON requests (OpenAI's python grader; math-verify's timeouts).

A :class:`Worker` is one ``python -I`` process running ``_worker.py``, started once and reused for every
request. With a :class:`~kitae.sandbox.isolation.Sandbox` (the python grader) it runs inside it: no network,
no view of the machine, rlimits for memory, processes and file size, and every process a request started is
killed when the request ends. Without one (math-verify, trusted code) it is a plain process with a scrubbed
environment and an address-space limit. Either way the worker sets a CPU-time budget per request and the
parent a wall-clock limit, killing the whole process tree past it. Every failure (a crash, a timeout, an
exception in the code) raises :class:`SandboxError`; the worker is restarted on the next request.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import subprocess
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from kitae.errors import KitaeError
from kitae.sandbox.isolation import Limits, Sandbox, interpreter
from kitae.sandbox.process import exit_cause, kill, returncode_of

WORKER = Path(__file__).with_name("_worker.py")


class SandboxError(KitaeError):
    """The code failed, crashed, ran out of time or memory; the message says which."""


class Worker:
    """``Worker(mode, ...).call(request)`` -> the value; ``close()`` ends the process (and its sandbox)."""

    def __init__(self, mode: str, timeout_s: float = 10.0, memory_mb: int | None = 1024,
                 cpu_seconds: float | None = None, block_network: bool = True, sandbox: Sandbox | None = None,
                 processes: int = 32, **config: Any):
        self.sandbox = sandbox
        self.limits = Limits(wall_seconds=timeout_s, cpu_seconds=None, memory_mb=memory_mb or 1024,
                             processes=processes)
        # Inside a sandbox prlimit sets the address space; the worker itself only budgets CPU per request.
        self.config = {"mode": mode, "memory_mb": None if sandbox else memory_mb, "cpu_seconds": cpu_seconds,
                       "block_network": block_network, "reap_strays": bool(sandbox and sandbox.isolated), **config}
        self.timeout_s = timeout_s
        self._proc: subprocess.Popen | None = None
        self._requests = self._replies = None  # the channels: requests to the worker, its replies
        self._stderr = None
        self._workdir: str | None = None
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _cleanup, [None], None)

    def call(self, request: dict[str, Any]) -> Any:
        """The worker's value for ``request``; SandboxError on any failure."""
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._start()
            return self._exchange(request)

    def close(self) -> None:
        with self._lock:
            self._stop()

    # ---- process handling ------------------------------------------------------------------------
    def _start(self) -> None:
        self._stop()
        self._stderr = tempfile.TemporaryFile()
        self._proc = self._spawn()
        self._finalizer.detach()
        self._finalizer = weakref.finalize(self, _cleanup, [self._proc], self._workdir)
        self._send(self.config)
        reply = self._receive(max(self.timeout_s, 30.0), "starting")  # imports (sympy) can be slow
        if not reply.get("ok"):
            self._stop()
            raise SandboxError(reply.get("error", "worker failed to start"))

    def _spawn(self) -> subprocess.Popen:
        """The worker, its channels fds of their own (not its stdin and stdout, which bubblewrap's init, pid 1 of
        the sandbox, keeps open: a grade could reach them through /proc/1/fd); its stdout and stderr the log."""
        requests_r, requests_w = os.pipe()
        replies_r, replies_w = os.pipe()
        self._requests, self._replies = os.fdopen(requests_w, "wb"), os.fdopen(replies_r, "rb")
        try:
            return self._start_process([str(requests_r), str(replies_w)], (requests_r, replies_w))
        finally:
            os.close(requests_r)
            os.close(replies_w)

    def _start_process(self, channels: list[str], fds: tuple[int, ...]) -> subprocess.Popen:
        pipes = {"stdin": subprocess.DEVNULL, "stdout": self._stderr, "stderr": self._stderr, "pass_fds": fds}
        if self.sandbox is None:
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1"}
            return subprocess.Popen([interpreter(), "-I", str(WORKER), *channels], env=env, start_new_session=True,
                                    cwd=tempfile.gettempdir(), **pipes)
        self._workdir = tempfile.mkdtemp(prefix="kitae-worker-")
        workdir = Path(self._workdir)
        shutil.copy(WORKER, workdir / WORKER.name)
        return self.sandbox.spawn([interpreter(), "-I", WORKER.name, *channels], workdir, self.limits, **pipes)

    def _exchange(self, request: dict[str, Any]) -> Any:
        self._send(request)
        reply = self._receive(self.timeout_s, "running")
        if not reply.get("ok"):
            raise SandboxError(reply.get("error", "unknown error"))
        return reply.get("value")

    def _send(self, message: dict[str, Any]) -> None:
        try:
            self._requests.write((json.dumps(message, ensure_ascii=False, default=str) + "\n").encode())
            self._requests.flush()
        except (BrokenPipeError, OSError):
            raise self._died("while receiving the request") from None

    def _receive(self, timeout_s: float, doing: str) -> dict[str, Any]:
        line = _readline(self._replies, time.monotonic() + timeout_s)
        if line is None:
            self._stop()
            raise SandboxError(f"timed out after {timeout_s:g}s while {doing} (wall-clock limit)")
        if not line:
            raise self._died(f"while {doing}")
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            self._stop()
            raise SandboxError(f"the grader process wrote something other than its reply while {doing}") from None

    def _died(self, when: str) -> SandboxError:
        kill(self._proc)  # its group too; a process that has exited keeps its own status
        code = returncode_of(self._proc, self.sandbox) if self.sandbox else self._proc.returncode
        tail = self._stderr_tail()
        self._stop()
        return SandboxError(f"grader process {exit_cause(code)} {when}" + (f": {tail}" if tail else ""))

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0, os.SEEK_END)
        self._stderr.seek(max(0, self._stderr.tell() - 4096))
        lines = self._stderr.read().decode(errors="replace").strip().splitlines()
        return lines[-1][:300] if lines else ""

    def _stop(self) -> None:
        if self._proc is not None:
            _cleanup([self._proc], self._workdir)
            self._proc = None
            self._workdir = None
        for channel in (self._requests, self._replies):
            if channel is not None:
                try:
                    channel.close()
                except OSError:
                    pass
        self._requests = self._replies = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None


def _readline(stream, deadline: float) -> bytes | None:
    """One line from ``stream`` before ``deadline``; None on timeout, b"" at end of file."""
    with selectors.DefaultSelector() as sel:
        sel.register(stream, selectors.EVENT_READ)
        buf = b""
        while not buf.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                return None
            chunk = os.read(stream.fileno(), 65536)
            if not chunk:
                return b""
            buf += chunk
        return buf


def _cleanup(procs: list, workdir: str | None) -> None:
    proc = procs[0]
    if proc is not None:
        kill(proc)
    if workdir is not None:
        shutil.rmtree(workdir, ignore_errors=True)

