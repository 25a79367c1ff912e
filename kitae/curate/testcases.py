"""``testcases``: test cases for coding problems, generated and cross-checked by reference solutions (Kimi k1.5).

Kimi k1.5 builds test cases for coding problems that have none: a CYaRon generator makes 50 cases per problem;
10 ground-truth solutions are sampled and run on them; a case is valid when at least 7 of the 10 agree on its
output, and the problem is kept, with the valid cases as its tests, when at least 9 of the 10 pass all of them.

Here, for each row with a ``generator`` and ``solutions``:

1. the generator runs ``cases`` times (default 50). It is a program that reads a case number (0, 1, ...) on
   stdin, seeds its randomness with it, and prints one test input (``cyaron`` is preloaded for it); identical
   inputs count once;
2. ``solutions`` (default 10) of the row's reference solutions, sampled with ``seed``, run on every input;
   each is Python source, or ``{"language": "cpp", "source": ...}``. A solution that crashes or runs out of
   time on a case has no output for it;
3. a case is kept when at least ``agree`` (7) solutions print the same output (compared as ``compare``:
   whitespace-separated tokens by default, as the ``code`` grader does); the majority output is its answer;
4. the problem is kept when at least ``min_pass`` (9) solutions pass every kept case.

Kept rows get ``tests`` ([{"input", "output"}], what the ``code`` grader reads) and ``testcase_stats`` (inputs
generated and distinct, cases kept, which sampled solutions fail them: indices into ``solutions``); dropped
rows say why: no generator or solutions, fewer than ``solutions`` solutions, the generator failed, no case
reached agreement, too few solutions pass. Generators and solutions run in the sandbox (``sandbox: none``
only for code you trust). Every program in a row shares one sandbox per chunk of cases; each case runs in a
fresh process.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

from kitae.config import setting
from kitae.curate.report import StepReport, Table, histogram
from kitae.curate.step import Context, Dropped, Step, StepResult
from kitae.errors import ConfigError
from kitae.sandbox import Sandbox, SandboxKind, open_sandbox
from kitae.sandbox.programs import LANGUAGES, CaseLimits, CaseResult, Source, run_programs


@dataclass
class TestcasesConfig:
    cases: int = setting(50, minimum=1)
    solutions: int = setting(10, minimum=1)
    agree: int = 7
    min_pass: int = 9
    seed: int = 0
    compare: Literal["tokens", "lines", "exact"] = "tokens"
    time_limit: float = 2.0
    memory_mb: int = 512
    workers: int = setting(2, minimum=1)
    sandbox: SandboxKind = "bwrap"
    generator_field: str = "generator"
    solutions_field: str = "solutions"

    def validate(self, path: str) -> None:
        at = lambda k: f"{path}.{k}" if path else k  # noqa: E731
        for name in ("agree", "min_pass"):
            if not 1 <= getattr(self, name) <= self.solutions:
                raise ConfigError(at(name), f"must be between 1 and solutions ({self.solutions}), "
                                            f"got {getattr(self, name)}")


@dataclass
class ProblemResult:
    """What happened to one problem: the kept cases, who passed, or why it was dropped."""

    reason: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    tests: list[dict] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)


def run_testcases(rows: list[dict], cfg: TestcasesConfig, ctx: Context) -> StepResult:
    t0 = time.perf_counter()
    sandbox = open_sandbox(cfg.sandbox, "testcases.sandbox")
    limits = CaseLimits(seconds=cfg.time_limit, memory_mb=cfg.memory_mb,
                        total_seconds=max(60.0, cfg.cases * (2 * cfg.time_limit + 1)))
    progress = ctx.progress("testcases", len(rows))
    report = StepReport("testcases", rows_in=len(rows))
    kept, dropped, outcomes = [], [], []
    try:
        with ThreadPoolExecutor(cfg.workers, thread_name_prefix="kitae-testcases") as pool:
            for i, row in enumerate(rows):
                res = curate_problem(row, i, cfg, sandbox, limits, pool)
                outcomes.append(res)
                if res.reason:
                    report.drop(res.reason)
                    dropped.append(Dropped(row, res.reason, {"row": i + 1, **res.detail, **res.stats}))
                else:
                    kept.append({**row, "tests": res.tests, "testcase_stats": res.stats})
                progress(1)
    finally:
        sandbox.close()
    report.rows_out = len(kept)
    describe(report, rows, outcomes, cfg)
    report.stats["seconds"] = round(time.perf_counter() - t0, 1)
    return StepResult(kept, dropped, report)


def curate_problem(row: dict, index: int, cfg: TestcasesConfig, sandbox: Sandbox, limits: CaseLimits,
                   pool: ThreadPoolExecutor) -> ProblemResult:
    """Generate, cross-check and select the cases of one problem (steps 1-4 of the module docstring)."""
    generator, solutions = row.get(cfg.generator_field), row.get(cfg.solutions_field)
    if not isinstance(generator, str) or not generator.strip():
        return ProblemResult("no generator", {"field": cfg.generator_field})
    if not isinstance(solutions, list) or not solutions:
        return ProblemResult("no solutions", {"field": cfg.solutions_field})
    if len(solutions) < cfg.solutions:
        return ProblemResult("too few solutions", {"solutions": len(solutions), "needed": cfg.solutions})
    try:
        sources = [as_source(s, f"{cfg.solutions_field}[{k}]") for k, s in enumerate(solutions)]
    except ValueError as exc:
        return ProblemResult("bad solution", {"error": str(exc)})
    picked = sorted(random.Random(f"{cfg.seed}:{index}").sample(range(len(sources)), cfg.solutions))
    inputs, problem = generate_inputs(generator, cfg, sandbox, limits, pool)
    if problem is not None:
        return problem
    runs = run_programs(sandbox, [sources[k] for k in picked], [{"input": x} for x in inputs], "stdio", limits,
                        cfg.workers, pool)
    failed = next((run.error for run in runs if run.error), None)
    if failed:
        return ProblemResult("sandbox error", {"error": failed})
    unbuilt = [CaseResult("not run", detail="compile error") for _ in inputs]
    return select_cases(inputs, [unbuilt if run.compile_error else run.results for run in runs], picked, cfg)


def generate_inputs(generator: str, cfg: TestcasesConfig, sandbox: Sandbox, limits: CaseLimits,
                    pool: ThreadPoolExecutor) -> tuple[list[str], ProblemResult | None]:
    """The distinct inputs the generator prints for case numbers 0..cases-1, or why there are none."""
    numbers = [{"input": f"{i}\n"} for i in range(cfg.cases)]
    run = run_programs(sandbox, [Source("python", generator)], numbers, "stdio", limits, cfg.workers, pool,
                       preload=("cyaron",))[0]
    if run.error or run.compile_error:
        return [], ProblemResult("generator failed", {"error": run.error or run.compile_error})
    made = [r.stdout for r in run.results if r.finished and r.stdout.strip()]
    if not made:
        failed = [r for r in run.results if not r.finished]
        if not failed:
            return [], ProblemResult("generator failed", {"error": "the generator printed nothing"})
        last = [line for line in failed[0].stderr.strip().splitlines() if line.strip()][-1:] or ["no output"]
        return [], ProblemResult("generator failed", {"error": f"{failed[0].describe(limits)}: {last[0][:300]}"})
    return list(dict.fromkeys(made)), None


def select_cases(inputs: list[str], results: list[list[CaseResult]], picked: list[int],
                 cfg: TestcasesConfig) -> ProblemResult:
    """Keep the cases ≥ agree solutions agree on; keep the problem when ≥ min_pass solutions pass them all."""
    tests, kept_answers = [], []
    for i, text in enumerate(inputs):
        answers = [normalize(r[i].stdout, cfg.compare) if r[i].finished else None for r in results]
        votes = Counter(a for a in answers if a is not None)
        if votes:
            answer, count = votes.most_common(1)[0]
            if count >= cfg.agree:
                raw = next(r[i].stdout for r, a in zip(results, answers) if a == answer)
                tests.append({"input": text, "output": raw})
                kept_answers.append((i, answer))
    passing = [k for k, r in zip(picked, results)
               if all(r[i].finished and normalize(r[i].stdout, cfg.compare) == a for i, a in kept_answers)]
    stats = {"generated": cfg.cases, "distinct": len(inputs), "valid": len(tests),
             "solutions_passing": len(passing) if tests else None,
             "failing_solutions": [k for k in picked if k not in passing] if tests else None, "sampled": picked}
    if not tests:
        return ProblemResult("no case reached agreement", stats=stats)
    if len(passing) < cfg.min_pass:
        return ProblemResult("too few solutions pass", stats=stats)
    return ProblemResult(tests=tests, stats=stats)


def normalize(output: str, compare: str) -> str:
    """The form two outputs must share to agree: the ``code`` grader's comparison, as a key."""
    if compare == "exact":
        return output
    if compare == "lines":
        return "\n".join(line.rstrip() for line in output.rstrip().splitlines())
    return " ".join(output.split())


def as_source(solution: Any, where: str) -> Source:
    """A solution: Python source text, or {"language": "python" | "cpp", "source": text}."""
    if isinstance(solution, str):
        return Source("python", solution)
    if isinstance(solution, dict) and isinstance(solution.get("source"), str):
        language = solution.get("language", "python")
        if language not in LANGUAGES:
            raise ValueError(f"{where}.language: one of {', '.join(LANGUAGES)}, got {language!r}")
        return Source(language, solution["source"])
    raise ValueError(f"{where}: expected Python source or {{language, source}}")


def describe(report: StepReport, rows: list[dict], outcomes: list[ProblemResult], cfg: TestcasesConfig) -> None:
    """Counts, a histogram of passing solutions, and one line per problem."""
    valid = [o.stats["valid"] for o in outcomes if not o.reason]
    report.stats.update({"cases": cfg.cases, "solutions": cfg.solutions, "agree": cfg.agree,
                         "min_pass": cfg.min_pass, "kept cases (mean)": round(sum(valid) / len(valid), 1)
                         if valid else None})
    with_stats = [o for o in outcomes if o.stats.get("solutions_passing") is not None]
    if with_stats:
        counts = Counter(o.stats["solutions_passing"] for o in with_stats)
        report.tables.append(Table(f"solutions passing every kept case (of {cfg.solutions})",
                                   ["passing", "problems", "share", ""],
                                   histogram([(str(k), counts.get(k, 0)) for k in range(cfg.solutions + 1)])))
    lines = [[row.get("id", f"row {i + 1}"), o.stats.get("distinct"), o.stats.get("valid"),
              o.stats.get("solutions_passing"), o.reason or "kept"] for i, (row, o) in enumerate(zip(rows, outcomes))]
    report.tables.append(Table("problems", ["problem", "distinct inputs", "valid cases", "passing", "outcome"],
                               lines))


STEP = Step("testcases", TestcasesConfig, run_testcases)
