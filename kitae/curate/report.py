"""What a curation step tells its user: counts in and out, why rows went, and tables (printed and saved as JSON).

    report = StepReport("dedupe", rows_in=100, rows_out=93)
    report.drop("exact duplicate", 4)
    report.tables.append(Table("kept by lang", ["lang", "rows"], [["en", 50], ["ja", 43]]))
    print(report.render())                  # plain-text tables
    report.to_dict()                        # what <out>.report.json holds
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[Any]]

    def render(self) -> str:
        cells = [[_cell(v) for v in row] for row in self.rows]
        widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(self.headers)]
        line = "  ".join(h.ljust(w) for h, w in zip(self.headers, widths))
        out = [self.title, "  " + line.rstrip(), "  " + "  ".join("-" * w for w in widths)]
        for r in cells:
            out.append("  " + "  ".join(_align(v, w) for v, w in zip(r, widths)).rstrip())
        return "\n".join(out)

    def to_dict(self) -> dict:
        return {"title": self.title, "headers": self.headers, "rows": self.rows}


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return "" if value is None else str(value)


def _align(text: str, width: int) -> str:
    numeric = text.replace(".", "", 1).replace("-", "", 1).isdigit()
    return text.rjust(width) if numeric else text.ljust(width)


@dataclass
class StepReport:
    """One step's report. ``dropped`` counts rows per reason; ``stats`` holds step-specific numbers."""

    step: str
    rows_in: int = 0
    rows_out: int = 0
    dropped: Counter = field(default_factory=Counter)
    tagged: Counter = field(default_factory=Counter)
    stats: dict[str, Any] = field(default_factory=dict)
    tables: list[Table] = field(default_factory=list)
    examples: list[dict] = field(default_factory=list)

    def drop(self, reason: str, count: int = 1) -> None:
        self.dropped[reason] += count

    def tag(self, label: str, count: int = 1) -> None:
        self.tagged[label] += count

    def render(self, max_examples: int = 5) -> str:
        head = f"[{self.step}] {self.rows_in} rows in, {self.rows_out} out"
        if self.dropped:
            head += f" ({sum(self.dropped.values())} dropped)"
        parts = [head]
        parts += [f"  dropped  {n:6d}  {reason}" for reason, n in self.dropped.most_common()]
        parts += [f"  tagged   {n:6d}  {label}" for label, n in self.tagged.most_common()]
        shown = {k: v for k, v in self.stats.items() if v not in (None, [], {}, "")}
        if shown:
            parts.append("  " + "  ".join(f"{k}: {_short(v, 80)}" for k, v in shown.items()))
        parts += [t.render() for t in self.tables]
        if self.examples:
            parts.append("examples")
            parts += [f"  {_example(e)}" for e in self.examples[:max_examples]]
        return "\n".join(parts)

    def to_dict(self) -> dict:
        return {
            "step": self.step,
            "rows_in": self.rows_in,
            "rows_out": self.rows_out,
            "dropped": dict(self.dropped),
            "tagged": dict(self.tagged),
            "stats": self.stats,
            "tables": [t.to_dict() for t in self.tables],
            "examples": self.examples,
        }


def _example(e: dict) -> str:
    return "  ".join(f"{k}={_short(v)}" for k, v in e.items())


def _short(value: Any, width: int = 60) -> str:
    text = _cell(value).replace("\n", " ")
    return text if len(text) <= width else text[: width - 1] + "…"


def histogram(counts: list[tuple[str, int]], width: int = 30) -> list[list[Any]]:
    """Table rows [label, count, share, bar] for labelled counts."""
    total = sum(n for _, n in counts) or 1
    most = max((n for _, n in counts), default=0) or 1
    return [[label, n, n / total, "#" * round(width * n / most)] for label, n in counts]
