"""A program (Python or C++) run on test cases in the sandbox: compiled once, every case in a fresh process.

    run = run_program(Sandbox(), "python", "print(sum(map(int, input().split())))",
                      [{"input": "1 2\\n"}, {"input": "3 4\\n"}], workers=2)
    [r.stdout for r in run.results]            # ['3\\n', '7\\n']

C++ is compiled with ``g++ -std=c++17 -O2`` inside the sandbox (the work folder writable for that step only);
a compile error (or a Python syntax error) is ``run.compile_error``. The cases are split into ``workers``
chunks, each run by ``_harness.py`` in its own sandbox, in parallel; inside, each case is a child process
with its own limits (:class:`CaseLimits`). ``run.error`` is set when the sandbox or the harness failed (not
the program's fault, :func:`harness_failure`): callers abstain on it, and count it, rather than score.

Modes: ``stdio`` feeds ``case["input"]`` on stdin and captures stdout; ``call`` (Python only) runs the
program, then evaluates ``case["call"]`` (``"add(1, 2)"``) in its namespace and returns the value's repr.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
import tempfile
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kitae.sandbox.isolation import Limits, Sandbox, interpreter
from kitae.sandbox.process import Completed, exit_cause, run
from kitae.sandbox.seccomp import one_process_hex

LANGUAGES = ("python", "cpp")
HARNESS = Path(__file__).with_name("_harness.py")
SUFFIX = {"python": "py", "cpp": "cpp"}
CPP_FLAGS = ["-std=c++17", "-O2", "-pipe"]


@dataclass(frozen=True)
class CaseLimits:
    """Limits per case, and for one program's run as a whole.

    ``seconds`` is CPU time per case; a case is also stopped after ``2 x seconds + 1`` of wall-clock time (a
    program that sleeps or waits). ``total_seconds`` is the wall clock for all cases of one program.
    """

    seconds: float = 2.0
    memory_mb: int = 512
    output_kb: int = 1024
    processes: int = 16
    total_seconds: float = 60.0
    compile_seconds: float = 60.0

    @property
    def wall_seconds(self) -> float:
        return 2 * self.seconds + 1


@dataclass
class CaseResult:
    """One case: ``status`` ok / exit (non-zero status) / signal / timeout / not run."""

    status: str
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    returncode: int | None = None
    signal: int | None = None
    value: str | None = None
    output_truncated: bool = False
    detail: str = ""

    @property
    def finished(self) -> bool:
        return self.status == "ok"

    def describe(self, limits: CaseLimits) -> str:
        """Why the case did not finish normally, for people."""
        if self.status == "timeout":
            return f"time limit exceeded (stopped after {limits.wall_seconds:g}s of wall-clock time)"
        if self.status == "signal":
            cause = exit_cause(-self.signal)
            return "time limit exceeded (CPU)" if self.signal == 24 else f"runtime error: {cause}"
        if self.status == "exit":
            return f"runtime error: exit status {self.returncode}"
        if self.status == "not run":
            return f"not run: {self.detail}"
        return "ok"


@dataclass
class ProgramRun:
    results: list[CaseResult] = field(default_factory=list)
    compile_error: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class Source:
    language: str
    code: str


def run_program(sandbox: Sandbox, language: str, source: str, cases: list[dict[str, Any]], mode: str = "stdio",
                limits: CaseLimits = CaseLimits(), workers: int = 1, pool: Executor | None = None) -> ProgramRun:
    """Compile (C++) and run ``source`` on every case; results in the order of ``cases``."""
    return run_programs(sandbox, [Source(language, source)], cases, mode, limits, workers, pool)[0]


def run_programs(sandbox: Sandbox, programs: list[Source], cases: list[dict[str, Any]], mode: str = "stdio",
                 limits: CaseLimits = CaseLimits(), workers: int = 1, pool: Executor | None = None,
                 preload: tuple[str, ...] = ()) -> list[ProgramRun]:
    """Several programs on the same cases, in one sandbox per chunk of cases (reference solutions, generators).

    ``limits.total_seconds`` is each program's budget; ``preload`` modules are imported once by the harness
    before the cases (``cyaron`` for generators), so each case's process starts with them.
    """
    for program in programs:
        if program.language not in LANGUAGES:
            raise ValueError(f"language {program.language!r}: one of {', '.join(LANGUAGES)}")
        if mode == "call" and program.language != "python":
            raise ValueError("call mode runs Python functions; C++ programs read stdin")
    workdir = Path(tempfile.mkdtemp(prefix="kitae-program-"))
    try:
        shutil.copy(HARNESS, workdir / HARNESS.name)
        runs = [ProgramRun() for _ in programs]
        entries = {}
        for k, program in enumerate(programs):
            folder = workdir / f"p{k}"
            folder.mkdir()
            (folder / f"main.{SUFFIX[program.language]}").write_text(program.code, encoding="utf-8")
            problem = compile_cpp(sandbox, folder, limits) if program.language == "cpp" else None
            if problem is not None:
                runs[k] = problem
            else:
                entries[k] = ({"kind": "python", "path": f"p{k}/main.py"} if program.language == "python"
                              else {"kind": "exec", "path": f"./p{k}/main"})
        if entries and cases:
            _run_chunks(sandbox, workdir, entries, runs, cases, mode, limits, workers, pool, preload)
        return runs
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def compile_cpp(sandbox: Sandbox, folder: Path, limits: CaseLimits) -> ProgramRun | None:
    """Compile main.cpp to main in ``folder``, in the sandbox; a ProgramRun with the error, or None when it built."""
    compiler = shutil.which("g++")
    if compiler is None:
        return ProgramRun(error="g++ is not installed (Debian/Ubuntu: apt-get install g++)")
    budget = Limits(wall_seconds=limits.compile_seconds, cpu_seconds=limits.compile_seconds, memory_mb=2048,
                    processes=16, file_mb=256)
    done = run(sandbox, [compiler, *CPP_FLAGS, "-o", "main", "main.cpp"], folder, budget, writable=True)
    if done.returncode == 0:
        return None
    message = _first_lines(done.stderr.decode(errors="replace"))
    if done.returncode == 1 and "error" in message:
        return ProgramRun(compile_error=message)
    return ProgramRun(compile_error=f"the compiler {done.describe()}: {message}")


def _run_chunks(sandbox: Sandbox, workdir: Path, entries: dict[int, dict], runs: list[ProgramRun],
                cases: list[dict], mode: str, limits: CaseLimits, workers: int, pool: Executor | None,
                preload: tuple[str, ...]) -> None:
    """Fill ``runs[k].results`` for every program in ``entries``, the cases split in ``workers`` chunks."""
    n = max(1, min(workers, len(cases)))
    chunks = [list(range(c, len(cases), n)) for c in range(n)]  # interleaved: slow cases spread out
    for k in entries:
        runs[k].results = [CaseResult("not run") for _ in cases]
    own = pool is None
    pool = pool or ThreadPoolExecutor(n)
    try:
        done = list(pool.map(lambda idx: _run_chunk(sandbox, workdir, entries, [cases[i] for i in idx], mode,
                                                    limits, preload), chunks))
    finally:
        if own:
            pool.shutdown()
    for idx, (rows, failure) in zip(chunks, done):
        for k in entries:
            if failure:
                runs[k].error = failure
        for row in rows:
            k = row.pop("program")
            if "compile_error" in row:
                runs[k].compile_error = row["compile_error"]
            else:
                runs[k].results[idx[row.pop("case")]] = CaseResult(
                    **{key: v for key, v in row.items() if key in CaseResult.__dataclass_fields__})
    for k in entries:
        if runs[k].compile_error:
            runs[k].results = []


def _run_chunk(sandbox: Sandbox, workdir: Path, entries: dict[int, dict], cases: list[dict], mode: str,
               limits: CaseLimits, preload: tuple[str, ...]) -> tuple[list[dict], str | None]:
    """The harness's rows for these cases (every program in ``entries``), and an error if the sandbox failed."""
    output_bytes = limits.output_kb * 1024
    order = sorted(entries)
    job = {"programs": [entries[k] for k in order], "mode": mode, "cases": cases,
           "cpu_seconds": limits.seconds, "wall_seconds": limits.wall_seconds, "memory_mb": limits.memory_mb,
           "output_bytes": output_bytes, "program_seconds": limits.total_seconds, "sys_path": site_packages(),
           "preload": list(preload), "in_sandbox": sandbox.isolated, "one_process": one_process_hex()}
    budget = Limits(wall_seconds=limits.total_seconds * len(order) + 5, cpu_seconds=None,
                    memory_mb=limits.memory_mb + 512, processes=limits.processes,
                    file_mb=max(64, 4 * math.ceil(limits.output_kb / 1024)))
    done = run(sandbox, [interpreter(), "-I", "-S", HARNESS.name], workdir, budget,
               stdin=json.dumps(job).encode(), max_output=len(order) * len(cases) * (6 * output_bytes + 8192))
    rows, ready, harness_error = [], False, None
    for line in done.stdout.decode(errors="replace").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            break  # a line cut short when the sandbox was killed
        if "ready" in row or "harness_error" in row:
            ready, harness_error = True, row.get("harness_error")
            continue
        row["program"] = order[row["program"]]
        rows.append(row)
    failure = harness_failure(done, ready, harness_error)
    if failure:
        return [], failure
    why = (f"the {limits.total_seconds:g}s total time limit ran out" if done.timed_out
           else f"the sandbox ended early ({done.describe()})")
    _mark_missing(rows, order, len(cases), why)
    return rows, None


def harness_failure(done: Completed, ready: bool, harness_error: str | None) -> str | None:
    """Why the harness, not the program, failed; None when what is missing is the program's doing.

    A harness that never said it was ready, reported an error of its own or exited with a status (its cases
    never kill it that way: they are its children) failed by itself: the grade abstains with this error,
    it never scores. A harness killed by a signal or stopped at the time limit may be the program's doing (a
    case that kills its parent, or runs too long): the cases it did not reach are "not run" and fail.
    """
    stderr = _first_lines(done.stderr.decode(errors="replace"))
    if not ready:
        return f"the sandbox failed to start ({done.describe()}): {stderr or 'no output'}"
    if harness_error:
        return f"the test harness failed: {harness_error}"
    if done.returncode is not None and done.returncode > 0:
        return f"the test harness {done.describe()}: {stderr or 'no output'}"
    return None


def _mark_missing(rows: list[dict], order: list[int], n: int, why: str) -> None:
    """Rows for the cases the harness never reached (killed at the time limit, or by the program)."""
    seen = {(row["program"], row.get("case")) for row in rows}
    compiled_out = {row["program"] for row in rows if "compile_error" in row}
    for k in order:
        if k in compiled_out:
            continue
        rows += [{"program": k, "case": i, "status": "not run", "detail": why} for i in range(n) if (k, i) not in seen]


def site_packages() -> list[str]:
    """Where this Python's packages live, for programs run with ``python -S`` (cyaron in generators)."""
    return [p for p in sys.path if p.endswith(("site-packages", "dist-packages")) and Path(p).is_dir()]


def _first_lines(text: str, lines: int = 12, width: int = 2000) -> str:
    return "\n".join(text.strip().splitlines()[:lines])[:width]
