"""The host side of a probe: a process that builds a grader, grades one sample and prints what happened.

Run as ``python -m tests.sandbox.victim`` with the job (grader spec, item, sample) as JSON on stdin. It stands in
for a training run: it holds a secret in its environment from the start (as a run holds OPENAI_API_KEY) and in
its session keyring, and counts the SIGUSR1 signals it receives, so a probe that reaches it is seen. ``__VICTIM_PID__`` in the job is
replaced by this process's pid, so a probe knows whom to attack.
"""

from __future__ import annotations

import json
import os
import signal
import sys


def main() -> None:
    job = json.loads(sys.stdin.read().replace("__VICTIM_PID__", str(os.getpid())))
    signalled = []
    signal.signal(signal.SIGUSR1, lambda *_: signalled.append(1))
    key = add_session_key(job["key_description"], job["key_secret"]) if job.get("key_description") else None
    from kitae.graders import build_grader

    grader = build_grader(job["spec"])
    try:
        grade = grader.grade_group(job.get("item", {}), [{"output_text": job.get("sample", "")}])[0]
    finally:
        grader.close()
        if key is not None:
            keyctl(21, key)  # KEYCTL_INVALIDATE: the session keyring may be shared with the rest of the machine
    print(json.dumps({"score": grade.score, "error": grade.error, "reason": grade.reason,
                      "signalled": len(signalled)}))


SYSCALLS = {"x86_64": {"add_key": 248, "keyctl": 250}, "aarch64": {"add_key": 217, "keyctl": 219}}


def add_session_key(description: str, secret: str) -> int | None:
    """The secret as a key in this process's session keyring too, as a trainer's credentials may be kept."""
    import ctypes

    numbers = SYSCALLS.get(os.uname().machine)
    if numbers is None:
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    key = libc.syscall(ctypes.c_long(numbers["add_key"]), b"user", description.encode(), secret.encode(),
                       ctypes.c_size_t(len(secret)), ctypes.c_long(-3))  # KEY_SPEC_SESSION_KEYRING
    return key if key > 0 else None


def keyctl(operation: int, key: int) -> None:
    import ctypes

    libc = ctypes.CDLL(None)
    libc.syscall(ctypes.c_long(SYSCALLS[os.uname().machine]["keyctl"]), ctypes.c_long(operation), ctypes.c_long(key))


if __name__ == "__main__":
    main()
