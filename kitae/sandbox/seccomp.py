"""The sandbox's seccomp filter: the system calls untrusted code has no use for fail with EPERM.

bubblewrap loads it (``--seccomp FD``) as the last step before it starts the command, so everything inside
runs under it, the code's children included. It is a classic-BPF program, assembled here (no libseccomp):

- a call of another ABI than the machine's own fails (i386 ``int 0x80`` on x86_64, 32-bit ARM on aarch64,
  and the x32 numbers on x86_64): the numbers below would not mean the same calls there;
- :data:`DENIED`: the keyring (``keyctl``, ``add_key``, ``request_key``: the trainer's session keys),
  reaching into other processes (``ptrace``, ``process_vm_readv``/``writev``, ``process_madvise``,
  ``pidfd_getfd``, ``kcmp``), ``io_uring`` (a second way into the kernel that this filter could not see),
  mounting and namespaces (``mount`` and the new mount API, ``pivot_root``, ``chroot``, ``unshare``,
  ``setns``), ``bpf``, ``perf_event_open``, ``userfaultfd``, kernel modules and ``kexec``, ``reboot``,
  swap, quotas, accounting, the clock, the kernel log, file handles (``open_by_handle_at``), ``fanotify``;
  System V IPC (shared memory, semaphores, message queues) and POSIX message queues, whose objects outlive
  their process (one grade could leave something there for the next; POSIX shared memory and semaphores are
  files in ``/dev/shm``, emptied between grades);
- ``clone`` with a CLONE_NEW* flag (a new namespace) fails; ``clone3``, whose flags a filter cannot read,
  answers ENOSYS, so the C library falls back to ``clone``.

Everything else is allowed: Python, g++ and compiled programs run as before.

    program = filter_program()            # bytes for bwrap --seccomp; SandboxUnavailable on another machine

:func:`one_process_program` is a second filter, which the process that runs one grade (a python grader's grade, a
code grader's test case) loads on top of this one before the untrusted code starts: it may start threads but
no processes (``fork``, ``vfork`` and a ``clone`` without CLONE_THREAD fail with EAGAIN, as at a process limit)
and no ``memfd_create`` (memory that its address-space limit would not count). Its address-space limit is then
the memory of the whole grade: rlimits bound each process, and a grade that could fork would hold its limit
once per process.
"""

from __future__ import annotations

import errno
import platform
import struct

from kitae.errors import KitaeError

# struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6]
NR, ARCH, ARG0 = 0, 4, 16
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
X32_SYSCALL_BIT = 0x40000000
# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET (CLONE_NEWTIME is clone3's and unshare's only)
CLONE_NEW_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000

# name: (x86_64, aarch64); None where the architecture has no such call
SYSCALLS = {
    "keyctl": (250, 219), "add_key": (248, 217), "request_key": (249, 218),
    "ptrace": (101, 117), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271),
    "process_madvise": (440, 440), "pidfd_getfd": (438, 438), "kcmp": (312, 272),
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426), "io_uring_register": (427, 427),
    "mount": (165, 40), "umount2": (166, 39), "pivot_root": (155, 41), "chroot": (161, 51),
    "move_mount": (429, 429), "open_tree": (428, 428), "fsopen": (430, 430), "fsconfig": (431, 431),
    "fsmount": (432, 432), "fspick": (433, 433), "mount_setattr": (442, 442),
    "unshare": (272, 97), "setns": (308, 268),
    "bpf": (321, 280), "perf_event_open": (298, 241), "userfaultfd": (323, 282),
    "init_module": (175, 105), "finit_module": (313, 273), "delete_module": (176, 106),
    "kexec_load": (246, 104), "kexec_file_load": (320, 294), "reboot": (169, 142),
    "swapon": (167, 224), "swapoff": (168, 225), "acct": (163, 89), "quotactl": (179, 60),
    "quotactl_fd": (443, 443), "settimeofday": (164, 170), "clock_settime": (227, 112),
    "clock_adjtime": (305, 266), "adjtimex": (159, 171), "syslog": (103, 116), "vhangup": (153, 58),
    "open_by_handle_at": (304, 265), "name_to_handle_at": (303, 264), "fanotify_init": (300, 262),
    "lookup_dcookie": (212, 18), "nfsservctl": (180, 42), "iopl": (172, None), "ioperm": (173, None),
    "uselib": (134, None), "_sysctl": (156, None),
    # System V IPC and POSIX message queues: objects that outlive the process that made them, shared by every
    # process of the sandbox's IPC namespace (one grade could leave an answer there for the next)
    "shmget": (29, 194), "shmat": (30, 196), "shmctl": (31, 195), "shmdt": (67, 197),
    "semget": (64, 190), "semop": (65, 193), "semctl": (66, 191), "semtimedop": (220, 192),
    "msgget": (68, 186), "msgsnd": (69, 189), "msgrcv": (70, 188), "msgctl": (71, 187),
    "mq_open": (240, 180), "mq_unlink": (241, 181), "mq_timedsend": (242, 182), "mq_timedreceive": (243, 183),
    "mq_notify": (244, 184), "mq_getsetattr": (245, 185),
}
DENIED = tuple(SYSCALLS)
CLONE, CLONE3 = {"x86_64": 56, "aarch64": 220}, 435
CLONE_THREAD = 0x00010000
FORKS = {"x86_64": (57, 58), "aarch64": ()}  # fork, vfork (aarch64 has only clone)
MEMFD_CREATE = {"x86_64": 319, "aarch64": 279}

# classic BPF opcodes
LD_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
JEQ, JGE, JSET = 0x15, 0x35, 0x45  # BPF_JMP | BPF_K | ...
RET = 0x06  # BPF_RET | BPF_K
ALLOW = 0x7FFF0000
ERRNO = 0x00050000


class SeccompUnavailable(KitaeError):
    """No filter for this machine's architecture."""


def machine() -> str:
    name = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(name, name)


def numbers(arch: str) -> dict[str, int]:
    """The denied calls' numbers on ``arch``."""
    column = 0 if arch == "x86_64" else 1
    return {name: nrs[column] for name, nrs in SYSCALLS.items() if nrs[column] is not None}


def filter_program(arch: str | None = None) -> bytes:
    """The filter for ``arch`` (this machine's by default) as struct sock_filter[] bytes."""
    arch = arch or machine()
    if arch not in AUDIT_ARCH:
        raise SeccompUnavailable(f"kitae's seccomp filter knows x86_64 and aarch64, not this machine's {arch}")
    denied = sorted(set(numbers(arch).values()))
    # (code, jt, jf, k) with jumps as labels (see _assemble), or 0: the next instruction
    prog = [(LD_ABS, 0, 0, ARCH), (JEQ, 0, "eperm", AUDIT_ARCH[arch]), (LD_ABS, 0, 0, NR)]
    if arch == "x86_64":
        prog.append((JGE, "eperm", 0, X32_SYSCALL_BIT))
    prog += [(JEQ, "eperm", 0, nr) for nr in denied]
    prog += [(JEQ, "enosys", 0, CLONE3), (JEQ, 0, "allow", CLONE[arch]),
             (LD_ABS, 0, 0, ARG0), (JSET, "eperm", "allow", CLONE_NEW_FLAGS)]
    return _assemble(prog)


def one_process_program(arch: str | None = None) -> bytes:
    """The filter one grade's process loads before the untrusted code runs: threads, but no new processes and
    no memfd_create, so its address-space limit bounds the whole grade (the module docstring says why)."""
    arch = arch or machine()
    if arch not in AUDIT_ARCH:
        raise SeccompUnavailable(f"kitae's seccomp filter knows x86_64 and aarch64, not this machine's {arch}")
    prog = [(LD_ABS, 0, 0, ARCH), (JEQ, 0, "eperm", AUDIT_ARCH[arch]), (LD_ABS, 0, 0, NR)]
    prog += [(JEQ, "eagain", 0, nr) for nr in FORKS[arch]]
    prog += [(JEQ, "eperm", 0, MEMFD_CREATE[arch]), (JEQ, "enosys", 0, CLONE3), (JEQ, 0, "allow", CLONE[arch]),
             (LD_ABS, 0, 0, ARG0), (JSET, "allow", "eagain", CLONE_THREAD)]
    return _assemble(prog)


def one_process_hex() -> str | None:
    """:func:`one_process_program` as hex, for the scripts that run grades (JSON); None where no filter exists
    for this machine (there only ``sandbox: none`` runs, and a grade's processes are bounded one by one)."""
    try:
        return one_process_program().hex()
    except SeccompUnavailable:
        return None


def _assemble(prog: list[tuple]) -> bytes:
    """struct sock_filter[] bytes; jumps to the labels "allow", "eperm", "enosys", "eagain" resolved."""
    labels = {"allow": len(prog), "eperm": len(prog) + 1, "enosys": len(prog) + 2, "eagain": len(prog) + 3}
    prog = prog + [(RET, 0, 0, ALLOW), (RET, 0, 0, ERRNO | errno.EPERM), (RET, 0, 0, ERRNO | errno.ENOSYS),
                   (RET, 0, 0, ERRNO | errno.EAGAIN)]
    out = bytearray()
    for i, (code, jt, jf, k) in enumerate(prog):
        jt, jf = (labels[j] - i - 1 if isinstance(j, str) else j for j in (jt, jf))
        out += struct.pack("=HBBI", code, jt, jf, k)  # u16 code, u8 jt, u8 jf, u32 k
    return bytes(out)
