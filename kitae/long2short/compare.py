"""Several models on one prompt set, as in Kimi k1.5's long2short comparison (Figure 7).

Each model is evaluated with :func:`kitae.scoring.evaluate.evaluate` (pass@1 averaged over k samples, template
compliance, mean and p90 completion tokens), with the same prompts, grader, sampling settings and seed. The
token-efficiency view puts pass@1 against mean completion tokens; a model is on the frontier when no other
model scores at least as well with fewer tokens on average.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kitae.graders.base import Grader
from kitae.rollout.base import SamplingParams

COLUMNS = [("pass@1", "pass@1", 3), ("len_mean", "mean tok", 1), ("len_p90", "p90 tok", 0),
           ("compliance", "compliant", 3), ("trunc_rate", "truncated", 3)]


@dataclass
class ModelReport:
    name: str
    path: str
    metrics: dict[str, float]
    results: list[dict] = field(default_factory=list, repr=False)
    frontier: bool = False

    def summary(self) -> dict[str, Any]:
        return {"name": self.name, "path": self.path, "frontier": self.frontier, **self.metrics}


def parse_model_arg(arg: str) -> tuple[str, str]:
    """'NAME=PATH' or 'PATH' (named after its folder) -> (name, path)."""
    name, sep, path = arg.partition("=")
    if sep and name and path:
        return name, path
    return Path(arg.rstrip("/")).name or arg, arg


def unique_names(names: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        out.append(n if seen[n] == 1 else f"{n}#{seen[n]}")
    return out


def evaluate_model(
    path: str, rows: list[dict], grader: Grader, k: int, sampling: SamplingParams, pass_threshold: float = 1.0,
    device: str | None = None, batch_prompts: int = 32, progress: Callable[[int], None] | None = None,
    chat_template_kwargs: dict | None = None, environment: Any = None,
) -> tuple[dict[str, float], list[dict]]:
    """(metrics, per-sample results) of one model: :func:`kitae.scoring.evaluate.evaluate` on a freshly loaded
    model, released afterwards. ``progress(n)`` is called after each batch with the prompts done;
    ``chat_template_kwargs``: the chat template's variables for every prompt (a run's model.chat_template_kwargs);
    ``environment``: a run's environment section (kitae.agents.config): every sample is an episode with its tools."""
    import torch

    from kitae.rollout.vision import load_engine
    from kitae.scoring.evaluate import evaluate

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    engine = load_engine(path, device=device)
    engine.set_chat(chat_template_kwargs)
    if environment is None:
        return evaluate(engine, rows, grader, k, sampling, pass_threshold, batch_prompts, progress)
    from kitae.agents.engine import episode_engine

    agent = episode_engine(engine, environment, chat_template_kwargs)
    try:
        return evaluate(agent, rows, grader, k, sampling, pass_threshold, batch_prompts, progress)
    finally:
        agent.close()


def mark_frontier(reports: list[ModelReport]) -> None:
    """frontier = no other model has pass@1 >= and mean tokens <= with one of them strictly better."""
    for r in reports:
        s, t = _pass_at_1(r), r.metrics.get("len_mean", math.nan)
        r.frontier = not math.isnan(s) and not any(
            o is not r and _pass_at_1(o) >= s and o.metrics["len_mean"] <= t
            and (_pass_at_1(o) > s or o.metrics["len_mean"] < t)
            for o in reports
        )


def _pass_at_1(r: ModelReport) -> float:
    """NaN where the grader scored none of the model's samples (pass@1 None): never on the frontier."""
    value = r.metrics.get("pass@1")
    return math.nan if value is None else value


def format_table(reports: list[ModelReport]) -> str:
    width = max([5] + [len(r.name) for r in reports])
    head = f"{'model':<{width}}" + "".join(f"{label:>11}" for _, label, _ in COLUMNS) + "   frontier"
    lines = [head, "-" * len(head)]
    for r in reports:
        cells = "".join(f"{_fmt(r.metrics.get(key), d):>11}" for key, _, d in COLUMNS)
        lines.append(f"{r.name:<{width}}{cells}   {'*' if r.frontier else ''}")
    return "\n".join(lines)


def efficiency_plot(reports: list[ModelReport], width: int = 56, height: int = 12) -> str:
    """ASCII scatter of pass@1 (up, 0 to 1) against mean completion tokens (right, the models' range padded by
    5%); each model is drawn as its table row's number ('+' where two share a cell), like the paper's
    token-efficiency figure."""
    xs = [r.metrics["len_mean"] for r in reports]
    ys = [_pass_at_1(r) for r in reports]
    x0, x1 = _span(xs)
    y0, y1 = 0.0, 1.0
    grid = [[" "] * width for _ in range(height)]
    for i, (x, y) in enumerate(zip(xs, ys)):
        if math.isnan(y):
            continue  # nothing scored: listed below, not drawn
        col = round((x - x0) / (x1 - x0) * (width - 1))
        row = height - 1 - round((y - y0) / (y1 - y0) * (height - 1))
        grid[row][col] = str(i + 1) if grid[row][col] == " " else "+"
    lines = ["pass@1"]
    for j, cells in enumerate(grid):
        label = f"{y1 - (y1 - y0) * j / (height - 1):.2f}" if j in (0, height - 1) else ""
        lines.append(f"{label:>6} |" + "".join(cells))
    lines.append(" " * 7 + "+" + "-" * width)
    lines.append(f"{'':7}{x0:<10.1f}{'mean completion tokens':^{width - 20}}{x1:>10.1f}")
    lines += [f"  {i + 1} = {r.name}" for i, r in enumerate(reports)]
    return "\n".join(lines)


def write_results(reports: list[ModelReport], out: Path) -> list[Path]:
    """out/NAME.jsonl (one row per sample) and out/summary.json; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for r in reports:
        path = out / f"{_safe(r.name)}.jsonl"
        with path.open("w", encoding="utf-8") as f:
            for row in r.results:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        files.append(path)
    summary = out / "summary.json"
    summary.write_text(json.dumps([r.summary() for r in reports], indent=2, ensure_ascii=False) + "\n")
    return files + [summary]


def _span(values: list[float]) -> tuple[float, float]:
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.05 or max(abs(hi) * 0.05, 0.5)
    return lo - pad, hi + pad


def _fmt(x: Any, digits: int) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_.#" else "_" for ch in name)
