"""Run grading code in a separate, limited Python process (OpenAI's python grader; math-verify's timeouts).

A :class:`Worker` is one long-lived ``python -I`` process running ``_worker.py``: it gets a scrubbed
environment (no API keys), an address-space limit, a CPU-time budget per request and, for user code, an
audit hook that refuses sockets and subprocesses. The parent enforces a wall-clock limit per request by
killing the process group. Every failure (a crash, a timeout, an exception in the code) raises
:class:`SandboxError`; the worker is restarted on the next request.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from kitae.errors import KitaeError

WORKER = Path(__file__).with_name("_worker.py")


class SandboxError(KitaeError):
    """The code failed, crashed, ran out of time or memory; the message says which."""


class Worker:
    def __init__(self, mode: str, timeout_s: float = 10.0, memory_mb: int | None = 1024,
                 cpu_seconds: float | None = None, block_network: bool = True, **config: Any):
        self.config = {"mode": mode, "memory_mb": memory_mb, "cpu_seconds": cpu_seconds,
                       "block_network": block_network, **config}
        self.timeout_s = timeout_s
        self._proc: subprocess.Popen | None = None
        self._stderr = None
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _kill, [None])

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
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1"}
        self._proc = subprocess.Popen(
            [sys.executable, "-I", str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self._stderr, env=env, start_new_session=True, cwd=tempfile.gettempdir(),
        )
        self._finalizer.detach()
        self._finalizer = weakref.finalize(self, _kill, [self._proc])
        self._send(self.config)
        reply = self._receive(max(self.timeout_s, 30.0), "starting")  # imports (sympy) can be slow
        if not reply.get("ok"):
            self._stop()
            raise SandboxError(reply.get("error", "worker failed to start"))

    def _exchange(self, request: dict[str, Any]) -> Any:
        self._send(request)
        reply = self._receive(self.timeout_s, "running")
        if not reply.get("ok"):
            raise SandboxError(reply.get("error", "unknown error"))
        return reply.get("value")

    def _send(self, message: dict[str, Any]) -> None:
        try:
            self._proc.stdin.write((json.dumps(message, ensure_ascii=False, default=str) + "\n").encode())
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._died("while receiving the request") from None

    def _receive(self, timeout_s: float, doing: str) -> dict[str, Any]:
        line = _readline(self._proc.stdout, time.monotonic() + timeout_s)
        if line is None:
            self._stop()
            raise SandboxError(f"timed out after {timeout_s:g}s while {doing} (wall-clock limit)")
        if not line:
            raise self._died(f"while {doing}")
        return json.loads(line)

    def _died(self, when: str) -> SandboxError:
        code = self._proc.wait()
        tail = self._stderr_tail()
        self._stop()
        cause = {-signal.SIGXCPU: "exceeded its CPU-time limit", -signal.SIGKILL: "was killed (memory?)"}.get(
            code, f"exited with status {code}")
        return SandboxError(f"grader process {cause} {when}" + (f": {tail}" if tail else ""))

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        lines = self._stderr.read().decode(errors="replace").strip().splitlines()
        return lines[-1][:300] if lines else ""

    def _stop(self) -> None:
        if self._proc is not None:
            _kill([self._proc])
            self._proc = None
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


def _kill(procs: list) -> None:
    proc = procs[0]
    if proc is None or proc.poll() is not None:
        if proc is not None:
            _close_pipes(proc)
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()
    _close_pipes(proc)


def _close_pipes(proc: subprocess.Popen) -> None:
    for stream in (proc.stdin, proc.stdout):
        try:
            stream.close()
        except (OSError, ValueError):
            pass
