"""A grade's memory is capped as a whole, not per process: a program that forks children, each allocating as
much as its own limit allows, must not hold more than the grade's cap in total.

The program allocates BLOCK_MB itself, then starts three children that each allocate BLOCK_MB, report it, and
hold it until the program has every report: the sum it prints is memory held at one time. Before the fix, each
process had the cap to itself (an address-space rlimit), and the program held 4 x BLOCK_MB with a cap of
CAP_MB (the issue's 1.3 GB with 512 MB caps).
"""

from __future__ import annotations

import pytest

from kitae.graders import build_grader
from kitae.sandbox import Sandbox
from kitae.sandbox.programs import CaseLimits, run_program

CAP_MB, BLOCK_MB = 256, 100

HOLD_TOGETHER = f"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)

def allocate():
    try:
        return bytearray(b"\\x01") * ({BLOCK_MB} << 20)  # written, so resident, not only reserved
    except MemoryError:
        return None

def held_together():
    mine = allocate()
    reports_r, reports_w = os.pipe()
    release_r, release_w = os.pipe()
    children = []
    for _ in range(3):
        pid = libc.fork()  # through libc: what an audit hook or os.fork's checks would not see
        if pid == 0:
            os.close(release_w)
            block = allocate()
            os.write(reports_w, b"%d\\n" % ({BLOCK_MB} if block is not None else 0))
            os.close(reports_w)
            os.read(release_r, 1)  # hold it until the program has every report
            os._exit(0)
        if pid > 0:
            children.append(pid)
    os.close(reports_w)
    total = {BLOCK_MB} if mine is not None else 0
    with os.fdopen(reports_r) as reports:
        total += sum(int(line) for line in reports)  # to the end: every child has reported (or died)
    os.close(release_w)
    for pid in children:
        os.waitpid(pid, 0)
    return total
"""

# The same in C++: an exec'd binary keeps the limits of the case's process
HOLD_TOGETHER_CPP = f"""
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/wait.h>
#include <unistd.h>

static long allocate() {{
    char *p = (char *)malloc({BLOCK_MB}L << 20);
    if (!p) return 0;
    memset(p, 1, {BLOCK_MB}L << 20);  // written, so resident
    return {BLOCK_MB};
}}

int main() {{
    long total = allocate();
    int reports[2], release[2];
    if (pipe(reports) || pipe(release)) return 2;
    int children = 0;
    for (int i = 0; i < 3; i++) {{
        pid_t pid = fork();
        if (pid == 0) {{
            close(release[1]);
            long mine = allocate();
            if (write(reports[1], &mine, sizeof mine) != sizeof mine) _exit(1);
            close(reports[1]);
            char c;
            if (read(release[0], &c, 1) < 0) _exit(1);  // hold it until the program has every report
            _exit(0);
        }}
        if (pid > 0) children++;
    }}
    close(reports[1]);
    long got;
    while (read(reports[0], &got, sizeof got) == sizeof got) total += got;
    close(release[1]);
    while (children-- > 0) wait(nullptr);
    printf("%ld\\n", total);
}}
"""


def test_a_python_grade_holds_no_more_than_its_memory_cap():
    source = HOLD_TOGETHER + "\n\ndef grade(sample, item):\n    return float(held_together())\n"
    grader = build_grader({"type": "python", "source": source, "memory_mb": CAP_MB, "timeout": 30})
    try:
        grade = grader.grade_group({}, [{"output_text": ""}])[0]
    finally:
        grader.close()
    assert grade.error is None, grade.error
    assert BLOCK_MB <= grade.score <= CAP_MB, f"the grade held {grade.score:g} MB at once with a cap of {CAP_MB} MB"


@pytest.mark.parametrize("language", ["python", "cpp"])
def test_a_test_case_holds_no_more_than_its_memory_cap(language):
    program = HOLD_TOGETHER + "\nprint(held_together())\n" if language == "python" else HOLD_TOGETHER_CPP
    sandbox = Sandbox()
    try:
        run = run_program(sandbox, language, program, [{"input": ""}],
                          limits=CaseLimits(memory_mb=CAP_MB, seconds=10))
    finally:
        sandbox.close()
    assert run.error is None and run.compile_error is None, run
    result = run.results[0]
    assert result.status == "ok", (result.status, result.stderr[-2000:])
    held = int(result.stdout)
    assert BLOCK_MB <= held <= CAP_MB, f"the case held {held} MB at once with a cap of {CAP_MB} MB"
