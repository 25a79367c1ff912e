"""``difficulty``: each prompt's pass rate under the current model, as its difficulty (Kimi k1.5 §2.1).

Kimi k1.5: "for each prompt, an SFT model generates answers ten times using a relatively high sampling
temperature. The pass rate is then calculated and used as a proxy for the prompt's difficulty — the lower the
pass rate, the higher the difficulty." Here: ``n`` samples (default 10) at ``temperature`` (default 1.0) from
``model`` (default: the bundled model), graded by ``grader`` (default ``answer``, the bundled task's
correctness check; any grader spec works); a sample passes when its score >= ``pass_threshold``.

Each row gets ``pass_rate`` (passes / graded samples; None when the grader abstained on every sample). With
``drop_solved`` / ``drop_unsolved`` the prompts solved n/n or 0/n times go: they carry no GRPO signal (every
sample in the group gets the same reward, so every advantage is zero).

Departure: samples and grades are kept per prompt in ``<out>.progress.jsonl``, so a long run can be stopped
and resumed (see :mod:`kitae.curate.sampling`).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from kitae.config import setting
from kitae.curate.report import StepReport, Table, histogram
from kitae.curate.sampling import ProgressFile, PromptResult, get_engine, prompt_results
from kitae.curate.step import Context, Dropped, Step, StepResult
from kitae.curate.text import prompt_text
from kitae.errors import ConfigError, DataError

LABELS = ("difficulty", "lang")  # row fields that get a per-label table when present


@dataclass
class SampledStepConfig:
    """The settings of a step that samples the model and grades the samples (difficulty, hackable)."""

    model: str | None = None
    n: int = 10
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 128
    grader: Any = "answer"
    pass_threshold: float = 1.0
    seed: int = 0
    batch_prompts: int = setting(16, minimum=1)
    dtype: str = "float32"
    device: str = "cpu"

    def validate(self, path: str) -> None:
        validate_sampling(self, path)


@dataclass
class DifficultyConfig(SampledStepConfig):
    drop_solved: bool = False
    drop_unsolved: bool = False


def validate_sampling(cfg: Any, path: str) -> None:
    from kitae.models import resolve_model_path

    at = lambda k: f"{path}.{k}" if path else k  # noqa: E731
    resolve_model_path(cfg.model, at("model"))  # a missing folder fails here, before any prompt is read
    if cfg.n < 1:
        raise ConfigError(at("n"), f"need at least one sample per prompt, got {cfg.n}")
    if cfg.temperature < 0:
        raise ConfigError(at("temperature"), f"must be >= 0 (0 = greedy), got {cfg.temperature}")


def sampling_params(cfg: Any) -> Any:
    from kitae.rollout.base import SamplingParams

    return SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens,
                          seed=cfg.seed)


def settings(cfg: Any, step: str, **extra: Any) -> dict:
    """What a progress file must agree on to be resumed."""
    keys = ("model", "n", "temperature", "top_p", "max_new_tokens", "grader", "pass_threshold", "seed",
            "batch_prompts", "dtype")
    return {"step": step, **{k: getattr(cfg, k) for k in keys}, **extra}


def check_references(rows: list[dict], cfg: Any, ctx: Context, step: str) -> None:
    """The answer and math graders compare with reference_answer: every row needs one."""
    from kitae.graders import load_spec

    kind = load_spec(cfg.grader, f"{step}.grader").get("type")
    if kind not in ("answer", "math"):
        return
    for i, row in enumerate(rows):
        if row.get("reference_answer") in (None, ""):
            raise DataError(ctx.source, i + 1, "reference_answer",
                            f"missing; the {step} step grades samples against it with the {kind!r} grader "
                            "(give the row a reference answer, or pass another grader)")


def run_graded(rows: list[dict], prompts: list[list[dict]], cfg: Any, ctx: Context, step: str,
               **extra: Any) -> list[PromptResult]:
    """Sample, grade and record every prompt (resuming from the progress file)."""
    from kitae.graders import build_grader

    check_references(rows, cfg, ctx, step)
    grader = build_grader(cfg.grader, f"{step}.grader")
    progress = ProgressFile(ctx.sidecar("progress.jsonl"), settings(cfg, step, **extra), ctx.restart)
    engine = get_engine(ctx, cfg.model, cfg.dtype, cfg.device)
    try:
        return prompt_results(rows, prompts, engine, grader, cfg.n, sampling_params(cfg), cfg.batch_prompts,
                                cfg.pass_threshold, progress, ctx.progress(step, len(rows)))
    finally:
        grader.close()


def run_difficulty(rows: list[dict], cfg: DifficultyConfig, ctx: Context) -> StepResult:
    t0 = time.perf_counter()
    results = run_graded(rows, [r["messages"] for r in rows], cfg, ctx, "difficulty")
    report = StepReport("difficulty", rows_in=len(rows))
    kept, dropped = [], []
    for i, (row, res) in enumerate(zip(rows, results)):
        rate = None if res.rate is None else round(res.rate, 4)
        out = {**row, "pass_rate": rate}
        reason = _drop_reason(rate, cfg)
        if reason:
            report.drop(reason)
            dropped.append(Dropped(out, reason, {"row": i + 1, "passes": res.passes, "graded": res.graded}))
        else:
            kept.append(out)
    report.rows_out = len(kept)
    describe(report, rows, results, cfg.n, "pass rate", "passes")
    report.stats.update({"model": cfg.model or "bundled", "n": cfg.n, "temperature": cfg.temperature,
                         "seconds": round(time.perf_counter() - t0, 1)})
    report.examples = example_rows(rows, results, lambda r: r.graded and r.passes == 0)
    return StepResult(kept, dropped, report)


def _drop_reason(rate: float | None, cfg: DifficultyConfig) -> str | None:
    if rate == 1.0 and cfg.drop_solved:
        return "always solved"
    if rate == 0.0 and cfg.drop_unsolved:
        return "never solved"
    return None


def describe(report: StepReport, rows: list[dict], results: list[PromptResult], n: int, what: str,
             unit: str) -> None:
    """Histogram of passes per prompt, per-label means, and abstentions, into the report."""
    counts = Counter(r.passes for r in results if r.graded == n)
    other = sum(1 for r in results if r.graded != n)
    hist = [(f"{k}/{n}", counts.get(k, 0)) for k in range(n + 1)]
    if other:
        hist.append(("partly graded", other))
    report.tables.append(Table(f"{what} ({unit} out of {n} samples)", [unit, "prompts", "share", ""],
                               histogram(hist)))
    rates = [r.rate for r in results if r.rate is not None]
    report.stats.update({
        f"mean {what}": round(sum(rates) / len(rates), 4) if rates else None,
        f"{unit} {n}/{n}": counts.get(n, 0), f"{unit} 0/{n}": counts.get(0, 0),
        "ungraded": sum(1 for r in results if r.graded == 0),
        "grader errors": sorted({e for r in results for e in r.errors})[:3],
    })
    for label in LABELS:
        table = by_label(rows, results, label, n, what)
        if table:
            report.tables.append(table)


def by_label(rows: list[dict], results: list[PromptResult], label: str, n: int, what: str) -> Table | None:
    groups: dict[str, list[PromptResult]] = {}
    for row, res in zip(rows, results):
        if row.get(label) is not None:
            groups.setdefault(str(row[label]), []).append(res)
    if not groups:
        return None
    table_rows = []
    for name in sorted(groups):
        rs = groups[name]
        rates = [r.rate for r in rs if r.rate is not None]
        mean = sum(rates) / len(rates) if rates else None
        table_rows.append([name, len(rs), mean, sum(r.passes == n for r in rs), sum(r.passes == 0 for r in rs)])
    return Table(f"{what} by {label}", [label, "prompts", f"mean {what}", f"{n}/{n}", f"0/{n}"], table_rows)


def example_rows(rows: list[dict], results: list[PromptResult], pick, limit: int = 5,
                 passing: float | None = None) -> list[dict]:
    """Up to `limit` rows that `pick` selects, each with one sample: the first, or with `passing` the first
    whose score reached it."""
    out = []
    for row, res in zip(rows, results):
        if pick(res) and len(out) < limit:
            out.append({"prompt": prompt_text(row), "reference": row.get("reference_answer"),
                        "passes": f"{res.passes}/{res.graded}", "sample": shown_sample(res, passing)})
    return out


def shown_sample(res: PromptResult, passing: float | None = None) -> str:
    """A sample for a report, without the U+FFFD a token limit leaves when it cuts a character's bytes."""
    texts = res.texts
    if passing is not None:
        texts = [t for t, s in zip(res.texts, res.scores) if s is not None and s >= passing] or res.texts
    return texts[0].rstrip("\ufffd") if texts else ""


STEP = Step("difficulty", DifficultyConfig, run_difficulty)
