"""A program (Python or C++) run on test cases in the sandbox: compiled once, every case in a fresh process.

    run = run_program(Sandbox(), "python", "print(sum(map(int, input().split())))",
                      [{"input": "1 2\\n"}, {"input": "3 4\\n"}], workers=2)
    [r.stdout for r in run.results]            # ['3\\n', '7\\n']

C++ is compiled with ``g++ -std=c++17 -O2`` inside the sandbox (the work folder writable for that step only);
a compile error (or a Python syntax error) is ``run.compile_error``. The cases are split into ``workers``
chunks, each run by ``_harness.py`` in its own sandbox, in parallel; inside, each case is a child process
with its own limits (:class:`CaseLimits`). ``run.error`` is set when the sandbox itself failed (not the
program's fault): callers abstain on it rather than score.

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

from kitae.sandbox.isolation import Limits, Sandbox
from kitae.sandbox.process import Completed, exit_cause, run

LANGUAGES = ("python", "cpp")
HARNESS = Path(__file__).with_name("_harness.py")
SOURCE_FILE = {"python": "main.py", "cpp": "main.cpp"}
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


def run_program(sandbox: Sandbox, language: str, source: str, cases: list[dict[str, Any]], mode: str = "stdio",
                limits: CaseLimits = CaseLimits(), workers: int = 1, pool: Executor | None = None) -> ProgramRun:
    """Compile (C++) and run ``source`` on every case; results in the order of ``cases``."""
    if language not in LANGUAGES:
        raise ValueError(f"language {language!r}: one of {', '.join(LANGUAGES)}")
    if mode == "call" and language != "python":
        raise ValueError("call mode runs Python functions; C++ programs read stdin")
    workdir = Path(tempfile.mkdtemp(prefix="kitae-program-"))
    try:
        (workdir / SOURCE_FILE[language]).write_text(source, encoding="utf-8")
        shutil.copy(HARNESS, workdir / HARNESS.name)
        if language == "cpp":
            problem = compile_cpp(sandbox, workdir, limits)
            if problem is not None:
                return problem
        return _run_chunks(sandbox, workdir, language, cases, mode, limits, workers, pool)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def compile_cpp(sandbox: Sandbox, workdir: Path, limits: CaseLimits) -> ProgramRun | None:
    """Compile main.cpp to main in the sandbox; a ProgramRun with the compile error, or None when it built."""
    compiler = shutil.which("g++")
    if compiler is None:
        return ProgramRun(error="g++ is not installed (Debian/Ubuntu: apt-get install g++)")
    budget = Limits(wall_seconds=limits.compile_seconds, cpu_seconds=limits.compile_seconds, memory_mb=2048,
                    processes=16, file_mb=256)
    done = run(sandbox, [compiler, *CPP_FLAGS, "-o", "main", "main.cpp"], workdir, budget, writable=True)
    if done.returncode == 0:
        return None
    if done.returncode == 1 and b"error" in done.stderr:
        return ProgramRun(compile_error=_first_lines(done.stderr.decode(errors="replace")))
    return ProgramRun(compile_error=f"the compiler {done.describe()}: "
                                    + _first_lines(done.stderr.decode(errors="replace")))


def _run_chunks(sandbox: Sandbox, workdir: Path, language: str, cases: list[dict], mode: str,
                limits: CaseLimits, workers: int, pool: Executor | None) -> ProgramRun:
    n = max(1, min(workers, len(cases)))
    chunks = [list(range(k, len(cases), n)) for k in range(n)]  # interleaved: slow cases spread out
    own = pool is None
    pool = pool or ThreadPoolExecutor(n)
    try:
        runs = list(pool.map(lambda idx: _run_chunk(sandbox, workdir, language, [cases[i] for i in idx], mode,
                                                    limits), chunks))
    finally:
        if own:
            pool.shutdown()
    merged = ProgramRun(results=[CaseResult("not run")] * len(cases))
    for idx, chunk in zip(chunks, runs):
        if chunk.compile_error or chunk.error:
            return chunk
        for i, result in zip(idx, chunk.results):
            merged.results[i] = result
    return merged


def _run_chunk(sandbox: Sandbox, workdir: Path, language: str, cases: list[dict], mode: str,
               limits: CaseLimits) -> ProgramRun:
    output_bytes = limits.output_kb * 1024
    job = {"kind": "python" if language == "python" else "exec",
           "program": "main.py" if language == "python" else "./main", "mode": mode, "cases": cases,
           "cpu_seconds": limits.seconds, "wall_seconds": limits.wall_seconds, "memory_mb": limits.memory_mb,
           "output_bytes": output_bytes, "sys_path": site_packages()}
    budget = Limits(wall_seconds=limits.total_seconds, cpu_seconds=None, memory_mb=limits.memory_mb + 512,
                    processes=limits.processes, file_mb=max(64, 4 * math.ceil(limits.output_kb / 1024)))
    done = run(sandbox, [sys.executable, "-I", "-S", HARNESS.name], workdir, budget,
               stdin=json.dumps(job).encode(), max_output=len(cases) * (6 * output_bytes + 8192))
    return _parse(done, len(cases), limits)


def _parse(done: Completed, n: int, limits: CaseLimits) -> ProgramRun:
    results = []
    for line in done.stdout.decode(errors="replace").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            break  # a line cut short when the sandbox was killed
        if "compile_error" in row:
            return ProgramRun(compile_error=row["compile_error"])
        results.append(CaseResult(**{k: v for k, v in row.items() if k in CaseResult.__dataclass_fields__}))
    stderr = done.stderr.decode(errors="replace")
    if not results and done.returncode not in (0, None) and "bwrap:" in stderr:
        return ProgramRun(error=f"the sandbox failed to start: {_first_lines(stderr)}")
    if len(results) < n:
        why = (f"the {limits.total_seconds:g}s total time limit ran out" if done.timed_out
               else f"the sandbox ended early ({done.describe()})")
        results += [CaseResult("not run", detail=why) for _ in range(n - len(results))]
    return ProgramRun(results=results[:n])


def site_packages() -> list[str]:
    """Where this Python's packages live, for programs run with ``python -S`` (cyaron in generators)."""
    return [p for p in sys.path if p.endswith(("site-packages", "dist-packages")) and Path(p).is_dir()]


def _first_lines(text: str, lines: int = 12, width: int = 2000) -> str:
    return "\n".join(text.strip().splitlines()[:lines])[:width]
