"""The seccomp filter on its own: loaded into a plain child process (no bwrap, no namespaces), so that what it
refuses is refused by it alone, whatever this process may do unfiltered (root may mount; anyone may clone into
a new user namespace)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from kitae.sandbox.seccomp import (CLONE, X32_SYSCALL_BIT, SeccompUnavailable, filter_program, machine, numbers,
                                   one_process_program)

LOAD = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
program = bytes.fromhex({program!r})

class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

if {load}:
    assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS, as bwrap sets it
    fprog = SockFprog(len(program) // 8, program)
    assert libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) == 0, os.strerror(ctypes.get_errno())  # SECCOMP_MODE_FILTER

def call(nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *map(ctypes.c_long, args))
    if r == 0 and os.getpid() != PID:
        os._exit(0)  # the child of a clone that went through
    return "ok" if r >= 0 else os.strerror(ctypes.get_errno())

PID = os.getpid()
"""


def under_filter(code: str, load: bool = True, program: bytes | None = None) -> str:
    script = LOAD.format(program=(program or filter_program()).hex(), load=load) + textwrap.dedent(code)
    done = subprocess.run([sys.executable, "-I", "-S", "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


ARCH = machine()
CALLS = [
    # (what, system call number, arguments, unfiltered, filtered)
    ("a new user and network namespace through clone", CLONE[ARCH], (0x10000000 | 0x40000000 | 17, 0, 0, 0, 0),
     "ok", "Operation not permitted"),
    ("clone3 (its flags are out of a filter's sight)", 435, (0, 0), "Invalid argument", "Function not implemented"),
    ("keyctl: the session keyring's id", numbers(ARCH)["keyctl"], (0, -3, 0), "ok", "Operation not permitted"),
    ("unshare a user namespace", numbers(ARCH)["unshare"], (0x10000000,), "ok", "Operation not permitted"),
    ("ptrace(PTRACE_TRACEME)", numbers(ARCH)["ptrace"], (0, 0, 0, 0), "ok", "Operation not permitted"),
    ("System V shared memory (a key that is not there)", numbers(ARCH)["shmget"], (0x4B17DEAD, 0, 0),
     "No such file or directory", "Operation not permitted"),
    ("a System V message queue (a key that is not there)", numbers(ARCH)["msgget"], (0x4B17DEAD, 0),
     "No such file or directory", "Operation not permitted"),
    ("plain clone (a fork)", CLONE[ARCH], (17, 0, 0, 0, 0), "ok", "ok"),
    ("getpid", 39 if ARCH == "x86_64" else 172, (), "ok", "ok"),
]
if ARCH == "x86_64":
    CALLS.append(("x32 getpid (another ABI's numbers)", X32_SYSCALL_BIT + 39, (), "Function not implemented",
                  "Operation not permitted"))


@pytest.mark.parametrize("what, nr, args, unfiltered, filtered", CALLS, ids=[c[0] for c in CALLS])
def test_the_filter_refuses_what_it_lists_and_nothing_else(what, nr, args, unfiltered, filtered):
    code = f"print(call({nr}, *{args!r}))"
    assert under_filter(code, load=False) == unfiltered  # the call does what it says without the filter
    assert under_filter(code) == filtered


def test_python_runs_as_usual_under_the_filter():
    out = under_filter("""
        import json, subprocess, threading
        t = threading.Thread(target=lambda: None); t.start(); t.join()
        print(subprocess.run(["/bin/echo", "child"], capture_output=True, text=True).stdout.strip(), json.dumps([1]))
        """)
    assert out == "child [1]"  # threads (clone3, then clone), a subprocess (posix_spawn / vfork), exec


def test_another_architecture_is_refused_with_the_reason():
    with pytest.raises(SeccompUnavailable, match="knows x86_64 and aarch64, not this machine's riscv64"):
        filter_program("riscv64")


def test_one_grade_s_process_starts_threads_but_no_processes():
    out = under_filter("""
        import os, threading
        t = threading.Thread(target=lambda: None); t.start(); t.join()
        print("thread", call(CLONE, 17, 0, 0, 0, 0), end=" ")  # a plain clone: a fork
        try:
            os.fork()
        except OSError as exc:
            print(type(exc).__name__, end=" ")
        print(call(MEMFD, id(b"x"), 0))
        """.replace("CLONE", str(CLONE[ARCH])).replace("MEMFD", "319" if ARCH == "x86_64" else "279"),
                       program=one_process_program())
    assert out == "thread Resource temporarily unavailable BlockingIOError Operation not permitted"


@pytest.mark.parametrize("build", [filter_program, one_process_program])
@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_every_jump_lands_inside_the_program(arch, build):
    import struct

    program = build(arch)
    n = len(program) // 8
    for i in range(n):
        code, jt, jf, _ = struct.unpack_from("=HBBI", program, 8 * i)
        if code & 0x07 == 0x05:  # BPF_JMP
            assert i + 1 + max(jt, jf) < n
    assert struct.unpack_from("=HBBI", program, 8 * (n - 4))[3] == 0x7FFF0000  # allow, then the three refusals
