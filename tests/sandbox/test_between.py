"""Nothing crosses from one grade to the next, nor from one test case to the next: processes, files, the reply channel.

Each test is an attack written as a grader or a program; before the fixes each one got through (a daemon outlived
its grade until the grader closed, a case read what the case before it left in /tmp, one sample's grade decided
the scores of the samples after it).
"""

from __future__ import annotations

import os
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from kitae.graders import build_grader
from tests.sandbox.test_probes import marked_processes


def survivors(marker: str, wait_s: float = 3.0) -> list[int]:
    deadline = time.monotonic() + wait_s
    while marked_processes(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    return marked_processes(marker)


def kill_marked(marker: str) -> None:
    import os

    for pid in marked_processes(marker):
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass


# A child that leaves its session and sleeps, started through libc (which no audit hook sees): forked, or forked
# and exec'd into a Python that names itself
DAEMONS = {
    "setsid fork": """
        pid = libc.fork()
        if pid == 0:
            libc.setsid()
            libc.prctl(15, ctypes.c_char_p(MARKER.encode()), 0, 0, 0)
            time.sleep(30)
            os._exit(0)
        """,
    "fork and exec": """
        import sys
        code = (f"import ctypes, time; ctypes.CDLL(None).prctl(15, ctypes.c_char_p({MARKER!r}.encode()), 0, 0, 0); "
                "time.sleep(30)")
        argv = [sys.executable.encode(), b"-S", b"-c", code.encode()]
        pid = libc.fork()
        if pid == 0:
            libc.setsid()
            libc.execv(argv[0], (ctypes.c_char_p * 5)(*argv, None))
            os._exit(1)
        time.sleep(1)
        """,
}


@pytest.mark.parametrize("how", list(DAEMONS))
def test_a_python_grade_s_processes_end_with_the_grade(how):
    """A grade is one process (its seccomp filter refuses forks): the daemon does not even start (the grade
    returns 0.5, not 1.0), and the walls behind that (the sandbox kills what a grade left) still hold."""
    marker = "kb-" + uuid.uuid4().hex[:8]
    body = textwrap.indent(textwrap.dedent(DAEMONS[how]), "    ")
    source = (f"import ctypes, os, time\nMARKER = {marker!r}\nlibc = ctypes.CDLL(None)\n\n"
              f"def grade(sample, item):\n{body}\n    return 1.0 if pid > 0 else 0.5\n")
    grader = build_grader({"type": "python", "source": source, "timeout": 10})
    try:
        assert grader.grade_group({}, [{"output_text": "x"}])[0].score == 0.5, "the grade started a process"
        assert survivors(marker) == [], "a process the grade started is alive after it, while the grader is open"
    finally:
        grader.close()
        kill_marked(marker)


# Each program prints "clean" when nothing of an earlier case is there, so every case passes only when the
# cases are kept apart
LEFTOVERS = {
    "a daemon": """
        import ctypes, os, time
        libc = ctypes.CDLL(None)
        others = [p for p in os.listdir("/proc") if p.isdigit() and open(f"/proc/{p}/comm").read().strip() == MARKER]
        pid = libc.fork()
        if pid == 0:
            libc.setsid()
            libc.prctl(15, ctypes.c_char_p(MARKER.encode()), 0, 0, 0)
            time.sleep(30)
            os._exit(0)
        print("dirty" if others or pid > 0 else "clean")  # a case is one process: the fork fails
        """,
    "a file in /tmp": """
        import os
        seen = os.path.exists("/tmp/left-by-a-case") or os.path.exists("/dev/shm/left-by-a-case")
        open("/tmp/left-by-a-case", "w").write("x")
        open("/dev/shm/left-by-a-case", "w").write("x")
        print("dirty" if seen else "clean")
        """,
}


@pytest.mark.parametrize("what", list(LEFTOVERS))
def test_a_test_case_finds_nothing_of_the_case_before(what):
    marker = "kc-" + uuid.uuid4().hex[:8]
    program = f"MARKER = {marker!r}\n" + textwrap.dedent(LEFTOVERS[what])
    grader = build_grader({"type": "code", "workers": 1, "time_limit": 2})
    try:
        grade = grader.grade_group({"tests": [{"input": "", "output": "clean"}] * 3},
                                   [{"output_text": f"```python\n{program}```"}])[0]
    finally:
        grader.close()
        kill_marked(marker)
    assert grade.score == 1.0, grade.reason


# A python grader that runs the completion's code (as graders of programs do) and scores it 0. The completion
# takes over the worker's channels it inherited: a thread answers 1.0 on every pipe it holds (the reply channel
# among them) to this request and to every request it reads from stdin after, while the grade never returns.
EXECUTES_COMPLETIONS = """
def grade(sample, item):
    try:
        exec(sample["output_text"], {})
    except Exception:
        pass
    return 0.0
"""

FORGER = """
import os, threading
FORGED = b'{"ok": true, "value": 1.0}\\n'
pipes = []
for fd in range(3, 64):
    try:
        if os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:"):
            pipes.append(fd)
    except OSError:
        pass

def answer_every_request():
    while True:
        for fd in pipes:
            try:
                os.write(fd, FORGED)
            except OSError:
                pass
        if not os.read(0, 1 << 16):
            return

threading.Thread(target=answer_every_request, daemon=True).start()
threading.Event().wait()
"""


def test_one_sample_cannot_forge_the_grades_of_the_samples_after_it():
    grader = build_grader({"type": "python", "source": EXECUTES_COMPLETIONS, "timeout": 3})
    try:
        grades = grader.grade_group({}, [{"output_text": FORGER}] + [{"output_text": "pass"}] * 3)
        later = grader.grade_group({}, [{"output_text": "pass"}] * 2)
    finally:
        grader.close()
    assert [g.score for g in grades[1:] + later] == [0.0] * 5, [(g.score, g.error) for g in grades + later]


def test_a_grade_does_not_change_the_next_grade_s_module_state():
    source = "SEEN = []\n\ndef grade(sample, item):\n    SEEN.append(1)\n    return float(len(SEEN))\n"
    grader = build_grader({"type": "python", "source": source})
    try:
        grades = grader.grade_group({}, [{"output_text": "x"}] * 3)
    finally:
        grader.close()
    assert [g.score for g in grades] == [1.0, 1.0, 1.0]  # each grade starts from the worker as the source left it


def _pipes(pid: int | str) -> set[str]:
    """The pipes (``pipe:[inode]``) among a process's open files."""
    found = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("pipe:"):
            found.add(target)
    return found


def test_no_process_of_the_sandbox_but_the_worker_holds_its_channels():
    """bubblewrap's init (pid 1 of the sandbox) keeps the standard streams it was started with. Were the worker's
    request and reply channels its stdin and stdout, a grade could open them in /proc/1/fd (when kitae runs
    as a plain user, the sandbox's init is that user's and dumpable) and write replies for the samples after
    it. So they are other fds, which the init closes: it holds no pipe this process holds."""
    from kitae.sandbox import Sandbox
    from kitae.sandbox.worker import Worker

    worker = Worker("python", sandbox=Sandbox(), source="def grade(sample, item):\n    return 0.0\n",
                    fork_per_request=True)
    try:
        assert worker.call({"sample": {}, "item": {}}) == 0.0
        init = int(Path(f"/proc/{worker._proc.pid}/task/{worker._proc.pid}/children").read_text().split()[0])
        assert os.path.basename(Path(f"/proc/{init}/cmdline").read_bytes().split(b"\0")[0]) == b"bwrap"
        assert _pipes(init) & _pipes("self") == set(), "the sandbox's init holds the worker's channels"
    finally:
        worker.close()
