"""Running a command in a sandbox to completion: stdin in, capped stdout and stderr out, a wall clock, and the
whole process tree killed at the end.

    done = run(sandbox, [sys.executable, "-I", "main.py"], workdir, Limits(wall_seconds=2), stdin=b"1 2\\n")
    done.returncode, done.stdout, done.timed_out, done.describe()
"""

from __future__ import annotations

import os
import select
import selectors
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from kitae.sandbox.isolation import Limits, Sandbox

SIGNAL_CAUSES = {
    signal.SIGXCPU: "exceeded its CPU-time limit",
    signal.SIGXFSZ: "exceeded its file-size limit (too much output?)",
    signal.SIGKILL: "was killed (memory or process limit?)",
    signal.SIGSEGV: "crashed (segmentation fault)",
    signal.SIGABRT: "aborted",
    signal.SIGFPE: "crashed (arithmetic error)",
}


@dataclass
class Completed:
    """How a sandboxed command ended. ``returncode`` < 0 is the signal that ended it (as in subprocess)."""

    returncode: int | None
    stdout: bytes
    stderr: bytes
    seconds: float
    timed_out: bool = False
    output_overflow: bool = False

    def describe(self) -> str:
        if self.timed_out:
            return f"stopped after the {self.seconds:.3g}s wall-clock limit"
        if self.output_overflow:
            return "stopped: printed more than the output limit"
        return exit_cause(self.returncode)


def exit_cause(returncode: int | None) -> str:
    if returncode is None:
        return "did not finish"
    if returncode < 0:
        sig = -returncode
        return SIGNAL_CAUSES.get(sig, f"was killed by signal {signal.Signals(sig).name}"
                                 if sig in signal.Signals._value2member_map_ else f"was killed by signal {sig}")
    return f"exited with status {returncode}"


def returncode_of(proc: subprocess.Popen, sandbox: Sandbox) -> int | None:
    """bwrap reports a command killed by signal N as exit status 128+N; give it as -N, as subprocess does."""
    code = proc.returncode
    if code is not None and sandbox.isolated and 128 < code <= 128 + 64:
        return -(code - 128)
    return code


def run(sandbox: Sandbox, argv: list[str], workdir: Path, limits: Limits, stdin: bytes = b"",
        writable: bool = False, max_output: int = 1 << 20) -> Completed:
    """Run to completion or to ``limits.wall_seconds``; stdout and stderr capped at ``max_output`` bytes each."""
    start = time.monotonic()
    proc = sandbox.spawn(argv, workdir, limits, writable, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    try:
        out, err, timed_out, overflow = communicate(proc, stdin, start + limits.wall_seconds, max_output)
        if not (timed_out or overflow):
            timed_out = not wait_exit(proc, start + limits.wall_seconds - time.monotonic())
    finally:
        kill(proc)
    return Completed(None if timed_out or overflow else returncode_of(proc, sandbox), out, err,
                     time.monotonic() - start, timed_out, overflow)


def communicate(proc: subprocess.Popen, data: bytes, deadline: float, max_output: int
                ) -> tuple[bytes, bytes, bool, bool]:
    """Feed stdin and read stdout/stderr until both close, the deadline passes or one exceeds max_output."""
    buffers = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    with selectors.DefaultSelector() as sel:
        for stream in buffers:
            sel.register(stream, selectors.EVENT_READ)
        pending = memoryview(data)
        if pending:
            os.set_blocking(proc.stdin.fileno(), False)
            sel.register(proc.stdin, selectors.EVENT_WRITE)
        else:
            proc.stdin.close()
        while len(sel.get_map()) > 0:
            left = deadline - time.monotonic()
            if left <= 0:
                return bytes(buffers[proc.stdout]), bytes(buffers[proc.stderr]), True, False
            for key, _ in sel.select(left):
                if key.fileobj is proc.stdin:
                    pending = _feed(proc, sel, pending)
                    continue
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                buffers[key.fileobj] += chunk
                if len(buffers[key.fileobj]) > max_output:
                    return bytes(buffers[proc.stdout]), bytes(buffers[proc.stderr]), False, True
    return bytes(buffers[proc.stdout]), bytes(buffers[proc.stderr]), False, False


def _feed(proc: subprocess.Popen, sel: selectors.BaseSelector, pending: memoryview) -> memoryview:
    try:
        pending = pending[os.write(proc.stdin.fileno(), pending[:65536]):]
    except (BrokenPipeError, ConnectionResetError):
        pending = pending[:0]  # the program stopped reading: its business
    except BlockingIOError:
        return pending
    if not pending:
        sel.unregister(proc.stdin)
        proc.stdin.close()
    return pending


def wait_exit(proc: subprocess.Popen, timeout: float) -> bool:
    """Whether the process ends within ``timeout`` seconds, without reaping it (so its group id stays its own)."""
    fd = os.pidfd_open(proc.pid)
    try:
        return bool(select.select([fd], [], [], max(0.0, timeout))[0])
    finally:
        os.close(fd)


def kill(proc: subprocess.Popen, settle_s: float = 10.0) -> None:
    """Kill the command's whole process group, then reap it. Inside bwrap that ends the pid namespace: all of it.

    The group is killed before the leader is reaped: until then its id cannot name another process's group.
    Under bwrap it returns once the sandbox's init has exited, which it does only after every process in the
    namespace is gone: nothing the code started is left when this returns.
    """
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    proc.wait()
    init = getattr(proc, "sandbox_init", None)
    if init is not None:
        proc.sandbox_init = None
        try:
            select.select([init], [], [], settle_s)
        finally:
            os.close(init)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass
