"""The sandbox itself: what code inside sees and may do, its limits, and the refusal when bwrap cannot run."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

from kitae.sandbox import Limits, Sandbox, unsandboxed
from kitae.sandbox.isolation import ETC_FILES, clean_env
from kitae.sandbox.process import run
from tests.sandbox.test_probes import marked_processes

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sandbox():
    s = Sandbox()
    yield s
    s.close()


def python(sandbox, tmp_path, code, limits=Limits(wall_seconds=20), **kw):
    return run(sandbox, [sys.executable, "-I", "-S", "-c", textwrap.dedent(code)], tmp_path, limits, **kw)


def test_the_environment_is_only_what_kitae_sets(sandbox, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    done = python(sandbox, tmp_path, "import os, json; print(json.dumps(dict(os.environ)))")
    env = eval(done.stdout)  # noqa: S307 (our own JSON)
    env.pop("PWD", None)
    assert env == clean_env(home="/tmp")


def test_only_the_system_and_python_are_visible(sandbox, tmp_path):
    (tmp_path / "mine.txt").write_text("x")
    secret = Path("/var/tmp") / f"kitae-{uuid.uuid4().hex}.txt"
    secret.write_text("host file")
    try:
        done = python(sandbox, tmp_path, f"""
            import os
            print(sorted(os.listdir("/etc")))
            print(os.path.exists({str(secret)!r}), os.listdir({sandbox.inside_workdir!r}), os.getcwd())
            print(len([p for p in os.listdir("/proc") if p.isdigit()]))
            """)
    finally:
        secret.unlink()
    etc, files, processes = done.stdout.decode().splitlines()
    assert set(eval(etc)) <= {Path(p).name for p in ETC_FILES}  # the linker's files, nothing else of /etc
    assert files == f"False ['mine.txt'] {sandbox.inside_workdir}"
    assert int(processes) <= 3  # bwrap's init and this process (and setpriv's chain, exec'd away)


def test_work_folder_is_read_only_unless_asked_and_tmp_is_private(sandbox, tmp_path):
    marker = f"kitae-{uuid.uuid4().hex}"
    work = sandbox.inside_workdir
    code = f"""
        for path in ("{work}/out.txt", "/tmp/{marker}", "/usr/x", "/x"):
            try:
                open(path, "w").write("x")
                print(path, "written")
            except OSError as exc:
                print(path, type(exc).__name__)
        """
    read_only = python(sandbox, tmp_path, code).stdout.decode().splitlines()
    assert read_only == [f"{work}/out.txt OSError", f"/tmp/{marker} written", "/usr/x OSError", "/x OSError"]
    writable = python(sandbox, tmp_path, code, writable=True).stdout.decode().splitlines()
    assert writable[0] == f"{work}/out.txt written" and (tmp_path / "out.txt").exists()
    assert not Path(f"/tmp/{marker}").exists()  # the sandbox's /tmp is its own


def test_tmp_and_files_are_size_limited(sandbox, tmp_path):
    done = python(sandbox, tmp_path, """
        import os
        chunk = b"x" * (1 << 20)
        for name in ("a", "b", "c"):
            try:
                with open("/tmp/" + name, "wb") as f:
                    for _ in range(6):
                        f.write(chunk)
                print(name, "6 MB")
            except OSError as exc:
                print(name, os.strerror(exc.errno))
        """, Limits(wall_seconds=20, file_mb=8))
    # 8 MB per file and 8 MB of /tmp in all: the second file fills it
    assert done.stdout.decode().splitlines() == ["a 6 MB", "b No space left on device",
                                                "c No space left on device"]


def test_processes_are_capped_per_sandbox_at_once(sandbox, tmp_path):
    code = """
        import os, time
        started = 0
        for _ in range(40):
            try:
                pid = os.fork()
            except OSError:
                break
            if pid == 0:
                time.sleep(2)
                os._exit(0)
            started += 1
        print(started)
        """
    counts = []

    def one(k):
        folder = tmp_path / str(k)
        folder.mkdir()
        counts.append(int(python(sandbox, folder, code, Limits(wall_seconds=30, processes=10)).stdout))

    threads = [threading.Thread(target=one, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counts == [9, 9, 9]  # each sandbox its own 10 (this process included), none starved by another


def test_cpu_memory_and_output_limits(sandbox, tmp_path):
    spin = python(sandbox, tmp_path, "while True: pass", Limits(wall_seconds=60, cpu_seconds=1))
    assert spin.returncode == -24 and spin.describe() == "exceeded its CPU-time limit"
    big = python(sandbox, tmp_path, "x = bytearray(2 * 1024 ** 3)", Limits(wall_seconds=20, memory_mb=256))
    assert big.returncode == 1 and b"MemoryError" in big.stderr
    loud = python(sandbox, tmp_path, "while True: print('x' * 1000)", max_output=10_000)
    assert loud.output_overflow and loud.returncode is None


def test_the_wall_clock_ends_every_process_the_code_started(sandbox, tmp_path):
    marker = "kt-" + uuid.uuid4().hex[:8]
    done = python(sandbox, tmp_path, f"""
        import ctypes, os, time
        libc = ctypes.CDLL(None)
        if os.fork() == 0:
            os.setsid()
            libc.prctl(15, ctypes.c_char_p({marker!r}.encode()), 0, 0, 0)
            time.sleep(60)
            os._exit(0)
        time.sleep(60)
        """, Limits(wall_seconds=1))
    assert done.timed_out
    try:
        assert marked_processes(marker) == []
    finally:
        for pid in marked_processes(marker):
            os.kill(pid, 9)


def test_without_bwrap_the_grader_refuses_and_says_how_to_fix(tmp_path):
    code = ("from kitae.graders import build_grader\n"
            "build_grader({'type': 'python', 'source': 'def grade(s, i):\\n    return 1.0\\n'})\n")
    env = {**os.environ, "PATH": str(Path(sys.executable).parent), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "grader.sandbox: bubblewrap cannot isolate code on this machine: `bwrap` is not installed" in done.stderr
    assert "apt-get install bubblewrap" in done.stderr and "sandbox: none" in done.stderr


def test_sandbox_none_runs_unisolated(tmp_path):
    from kitae.graders import build_grader

    (tmp_path / "host.txt").write_text("visible")
    source = f"def grade(sample, item):\n    return float(open({str(tmp_path / 'host.txt')!r}).read() == 'visible')\n"
    grader = build_grader({"type": "python", "source": source, "sandbox": "none"})
    try:
        assert grader.grade_group({}, [{"output_text": "x"}])[0].score == 1.0  # it sees the machine
    finally:
        grader.close()


@pytest.mark.parametrize(
    "config, paths",
    [
        ({"rewards": [{"grader": {"type": "python", "sandbox": "none"}}]}, ["rewards[0].grader"]),
        ({"rewards": [{"grader": {"type": "code"}}, {"grader": {"type": "multi", "graders": {
            "a": {"type": "code", "sandbox": "none"}}}}]}, ["rewards[1].grader.graders.a"]),
        ({"rewards": [{"grader": {"type": "code", "sandbox": "bwrap"}}]}, []),
        ({"eval": {"grader": "code"}}, []),
    ],
)
def test_unsandboxed_finds_every_sandbox_none(config, paths):
    assert unsandboxed(config) == paths


def test_sandboxes_end_with_the_process_that_started_them(tmp_path):
    marker = "kt-" + uuid.uuid4().hex[:8]
    program = (f"import ctypes, time\nctypes.CDLL(None).prctl(15, ctypes.c_char_p({marker!r}.encode()), 0, 0, 0)\n"
               "time.sleep(60)")
    starter = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from kitae.sandbox import Limits, Sandbox
        argv = [sys.executable, "-I", "-S", "-c", {program!r}]
        Sandbox().spawn(argv, Path({str(tmp_path)!r}), Limits(wall_seconds=60))
        print("started", flush=True)
        time.sleep(60)
        """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    parent = subprocess.Popen([sys.executable, "-c", starter], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline() == "started\n"
        for _ in range(100):  # the code is running inside
            if marked_processes(marker):
                break
            time.sleep(0.05)
        assert marked_processes(marker)
    finally:
        parent.kill()  # as kill -9 of a training run
        parent.wait()
    try:
        deadline = time.monotonic() + 5
        while marked_processes(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marked_processes(marker) == []
    finally:
        for pid in marked_processes(marker):
            os.kill(pid, 9)


# ---- the kernel surface: the keyring, and the calls the seccomp filter denies --------------------------
def seccomp_numbers() -> dict[str, int]:
    from kitae.sandbox.seccomp import machine, numbers

    return numbers(machine())


def host_syscall(name: str, *args) -> int:
    """A system call in this (test) process, through libc's syscall(); -1 and errno on failure."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc.syscall(ctypes.c_long(seccomp_numbers()[name]), *args)


def add_session_key(description: bytes, secret: bytes) -> int:
    """A key in the session keyring of this thread (and of every thread that shares it), as a trainer's would be."""
    import ctypes

    key = host_syscall("add_key", b"user", description, secret, ctypes.c_size_t(len(secret)),
                       ctypes.c_long(-3))  # KEY_SPEC_SESSION_KEYRING
    assert key > 0, f"add_key failed: {os.strerror(ctypes.get_errno())}"
    return key


def test_the_session_keyring_is_out_of_reach(sandbox, tmp_path):
    secret = "sk-key-" + uuid.uuid4().hex
    description = f"kitae-test-{uuid.uuid4().hex[:8]}".encode()
    key = add_session_key(description, secret.encode())
    try:
        done = python(sandbox, tmp_path, f"""
            import ctypes, os
            libc = ctypes.CDLL(None, use_errno=True)
            libc.syscall.restype = ctypes.c_long
            keyctl, request_key = {seccomp_numbers()["keyctl"]}, {seccomp_numbers()["request_key"]}
            buf = ctypes.create_string_buffer(4096)
            found = libc.syscall(ctypes.c_long(request_key), b"user", {description!r}, None, ctypes.c_long(0))
            for key in ({key}, found):
                n = libc.syscall(ctypes.c_long(keyctl), ctypes.c_long(11), ctypes.c_long(key), buf, ctypes.c_long(4096))
                print(buf.raw[:n].decode() if n > 0 else os.strerror(ctypes.get_errno()))
            """)
    finally:
        host_syscall("keyctl", ctypes_long(21), ctypes_long(key))  # KEYCTL_INVALIDATE
    assert secret not in done.stdout.decode(), done.stdout
    assert done.stdout.decode().splitlines() == ["Operation not permitted"] * 2, done.stdout + done.stderr


def test_a_sandbox_gets_a_session_keyring_of_its_own():
    """Started from the spawner thread, which joins a new, empty session keyring before each start."""
    from kitae.sandbox.isolation import _spawn

    code = (f"import ctypes\nlibc = ctypes.CDLL(None)\nlibc.syscall.restype = ctypes.c_long\n"
            f"print(libc.syscall(ctypes.c_long({seccomp_numbers()['keyctl']}), 0, ctypes.c_long(-3), 0))")
    proc = _spawn([sys.executable, "-I", "-S", "-c", code], {"stdout": subprocess.PIPE})
    out, _ = proc.communicate(timeout=30)
    ours = host_syscall("keyctl", ctypes_long(0), ctypes_long(-3), ctypes_long(0))  # KEYCTL_GET_KEYRING_ID of @s
    assert ours > 0 and int(out) > 0 and int(out) != ours


def ctypes_long(value: int):
    import ctypes

    return ctypes.c_long(value)


# Each call with arguments that, unfiltered, succeed or fail with another errno than EPERM (EFAULT for a null
# path, EINVAL for a zero size), so only the filter answers EPERM. (name, arguments as C longs)
DENIED_CALLS = [
    ("keyctl", (0, -3, 0)),                   # KEYCTL_GET_KEYRING_ID of the session keyring: succeeds unfiltered
    ("add_key", (0, 0, 0, 0, -3)),            # null type: EFAULT
    ("request_key", (0, 0, 0, 0)),            # EFAULT
    ("ptrace", (0, 0, 0, 0)),                 # PTRACE_TRACEME: succeeds
    ("process_vm_readv", (0, 0, 0, 0, 0, 0)),  # pid 0: ESRCH
    ("io_uring_setup", (1, 0)),               # null params: EFAULT
    ("mount", (0, 0, 0, 0, 0)),               # null target: EFAULT
    ("umount2", (0, 0)),                      # EFAULT
    ("unshare", (0x10000000,)),               # CLONE_NEWUSER: succeeds
    ("setns", (-1, 0)),                       # EBADF
    ("bpf", (0, 0, 0)),                       # null attr: EFAULT (or EPERM where unprivileged bpf is off)
    ("perf_event_open", (0, 0, -1, -1, 0)),   # EFAULT
    ("userfaultfd", (-1,)),                   # bad flags: EINVAL
    ("pidfd_getfd", (-1, 0, 0)),              # EBADF
    ("open_by_handle_at", (-1, 0, 0)),        # EFAULT / EBADF
    ("chroot", (0,)),                         # EFAULT
]


def test_denied_system_calls_fail_with_eperm_inside(sandbox, tmp_path):
    numbers = seccomp_numbers()
    calls = [(name, numbers[name], args) for name, args in DENIED_CALLS]
    done = python(sandbox, tmp_path, f"""
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        for name, nr, args in {calls!r}:
            ctypes.set_errno(0)
            r = libc.syscall(ctypes.c_long(nr), *map(ctypes.c_long, args))
            print(name, "ok" if r >= 0 else os.strerror(ctypes.get_errno()))
        """)
    got = dict(line.split(" ", 1) for line in done.stdout.decode().splitlines())
    assert got == {name: "Operation not permitted" for name, _ in DENIED_CALLS}, done.stderr


def test_a_test_program_cannot_ptrace_its_harness():
    from kitae.graders import build_grader

    program = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
               "libc.ptrace.restype = ctypes.c_long\n"
               "r = libc.ptrace(ctypes.c_long(16), ctypes.c_long(os.getppid()), None, None)  # PTRACE_ATTACH\n"
               "print('attached' if r == 0 else 'refused')\n")
    grader = build_grader({"type": "code"})
    try:
        grade = grader.grade_group({"tests": [{"input": "", "output": "refused"}]},
                                   [{"output_text": f"```python\n{program}```"}])[0]
    finally:
        grader.close()
    assert grade.score == 1.0, grade.reason
