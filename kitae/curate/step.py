"""What every curation step shares: its result, the context it runs in, and the registry of steps by name.

A step is a pure-ish function ``run(rows, cfg, ctx) -> StepResult`` with a config dataclass; it never edits
the rows it is given (it copies a row before adding fields) and never touches the input file. The pipeline
(:mod:`kitae.curate.chain`) writes what it returns: kept rows, dropped rows with their reasons, a report.

Adding a step::

    @dataclass
    class ShortConfig:
        max_chars: int = 500

    def run_short(rows, cfg, ctx):
        report = StepReport("short", rows_in=len(rows))
        kept, dropped = [], []
        for i, row in enumerate(rows):
            if len(prompt_text(row)) > cfg.max_chars:
                dropped.append(Dropped(row, "too long", {"row": i + 1}))
                report.drop("too long")
            else:
                kept.append(row)
        report.rows_out = len(kept)
        return StepResult(kept, dropped, report)

    STEPS.register("short", Step("short", ShortConfig, run_short))
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kitae.curate.report import StepReport
from kitae.registry import Registry

Progress = Callable[[int], None]


def no_progress(desc: str, total: int) -> Progress:
    return lambda n: None


@dataclass
class Dropped:
    """A row a step removed: ``reason`` is the short category counted in the report, ``detail`` the evidence."""

    row: dict
    reason: str
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self, step: str) -> dict:
        return {"step": step, "reason": self.reason, **self.detail, "item": self.row}


@dataclass
class StepResult:
    rows: list[dict]
    dropped: list[Dropped]
    report: StepReport


@dataclass
class Context:
    """Where a step runs. ``out`` is the step's output file (resume files live beside it); ``engines`` caches
    rollout engines by model so chained model-based steps load a model once; ``threads`` is the torch thread
    count a step that runs a model uses (None: kitae.threads' rule for that model's size)."""

    out: Path | None = None
    source: str = "<rows>"
    progress: Callable[[str, int], Progress] = no_progress
    engines: dict[str, Any] = field(default_factory=dict)
    restart: bool = False
    threads: int | None = None

    def sidecar(self, suffix: str) -> Path | None:
        """A file beside the output: curated/dedupe.jsonl -> curated/dedupe.<suffix>."""
        return None if self.out is None else self.out.with_name(f"{_stem(self.out)}.{suffix}")


def _stem(path: Path) -> str:
    return path.name[: -len(".jsonl")] if path.name.endswith(".jsonl") else path.stem


@dataclass(frozen=True)
class Step:
    name: str
    config: type
    run: Callable[[list[dict], Any, Context], StepResult]


STEPS = Registry("curate step")
STEPS.register_lazy("format", "kitae.curate.formats:STEP")
STEPS.register_lazy("dedupe", "kitae.curate.dedupe:STEP")
STEPS.register_lazy("difficulty", "kitae.curate.difficulty:STEP")
STEPS.register_lazy("hackable", "kitae.curate.hackable:STEP")
STEPS.register_lazy("balance", "kitae.curate.balance:STEP")
STEPS.register_lazy("testcases", "kitae.curate.testcases:STEP")
