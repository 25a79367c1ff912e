"""`kitae runs list` and `kitae runs show NAME`: read the run store (runs/NAME/run.db) and print it."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import typer
import yaml

from kitae.store import RunSummary, list_runs, open_run

runs_app = typer.Typer(help="List and inspect training runs (runs/NAME/run.db).", no_args_is_help=True)

RUNS_OPTION = typer.Option(Path("runs"), "--runs", help="Folder that holds the runs.")


def register(app: typer.Typer) -> None:
    app.add_typer(runs_app, name="runs")


@runs_app.command("list")
def list_command(runs: Path = RUNS_OPTION) -> None:
    """One line per run: name, status, model, steps, latest reward, latest eval score, last update."""
    summaries = list_runs(runs)
    if not summaries:
        typer.echo(f"no runs in {runs}/ (start one with `kitae train`, or point --runs at the folder)")
        return
    typer.echo(format_table(summaries))


@runs_app.command("show")
def show_command(
    name: str = typer.Argument(..., help="Run name (a folder under --runs) or a run folder's path."),
    runs: Path = RUNS_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON, for scripts."),
) -> None:
    """A run's status, latest metrics, first and latest evaluation, and config."""
    with open_run(runs, name) as store:
        summary = store.summary()
    if as_json:
        typer.echo(json.dumps(summary, indent=2, ensure_ascii=False))
    else:
        typer.echo(format_summary(summary))


# ---- formatting ----------------------------------------------------------------------------------
TABLE_HEADER = ("NAME", "STATUS", "MODEL", "STEPS", "REWARD", "EVAL", "UPDATED")


def format_table(summaries: list[RunSummary]) -> str:
    rows = [TABLE_HEADER] + [_table_row(s) for s in summaries]
    widths = [max(len(row[i]) for row in rows) for i in range(len(TABLE_HEADER))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines += [f"{s.name}: {s.error}" for s in summaries if s.error]
    return "\n".join(lines)


def _table_row(s: RunSummary) -> tuple[str, ...]:
    steps = "-" if s.steps is None else str(s.steps)
    reward, score = fmt_number(s.reward), fmt_number(s.eval_score)
    return (s.name, s.status, s.model or "-", steps, reward, score, fmt_time(s.updated_at))


def format_summary(summary: dict[str, Any]) -> str:
    lines = [
        f"run       {summary['name']}  ({summary['path']})",
        f"status    {summary['status']}  (pid {summary['pid']} on {summary['host']})",
        f"model     {summary['model'] or '-'}",
        f"started   {fmt_time(summary['started_at'])}   updated {fmt_time(summary['updated_at'])}"
        + (f"   finished {fmt_time(summary['finished_at'])}" if summary["finished_at"] else ""),
        f"steps     {'-' if summary['steps'] is None else summary['steps']}",
        *_sandbox_lines(summary.get("unsandboxed") or []),
        "",
        *_metric_lines(summary["metrics"], summary["steps"]),
        "",
        *_eval_lines(summary),
        *_event_lines(summary.get("events") or []),
    ]
    if summary["final"]:
        lines += ["", "final summary", *_indent(yaml.safe_dump(summary["final"], sort_keys=False, allow_unicode=True))]
    lines += ["", "config", *_indent(yaml.safe_dump(summary["config"], sort_keys=False, allow_unicode=True))]
    return "\n".join(lines).rstrip()


def _sandbox_lines(paths: list[str]) -> list[str]:
    if not paths:
        return []
    return [f"sandbox   none at {', '.join(paths)}: this run ran untrusted code WITHOUT isolation"]


def _metric_lines(metrics: dict[str, dict[str, Any]], last_step: int | None) -> list[str]:
    if not metrics:
        return ["latest metrics: none logged yet"]
    width = max(len(key) for key in metrics)
    lines = ["latest metrics"]
    for key, m in metrics.items():
        stale = "" if m["step"] == last_step else f"  (step {m['step']})"
        lines.append(f"  {key.ljust(width)}  {fmt_number(m['value'])}{stale}")
    return lines


def _eval_lines(summary: dict[str, Any]) -> list[str]:
    if not summary["evals"]:
        return ["evals: none yet"]
    lines = [f"evals ({summary['evals']})"]
    for label in ("first", "latest"):
        e = summary[f"{label}_eval"]
        others = "  ".join(f"{k} {fmt_number(v)}" for k, v in e["metrics"].items() if k != "score")
        lines.append(f"  {label:<6}  step {e['step']:<6}  score {fmt_number(e['score'])}   {others}")
    return lines


def _event_lines(events: list[dict[str, Any]]) -> list[str]:
    """Resumes, restarts, skipped checkpoints and config changes, oldest first."""
    if not events:
        return []
    width = max(len(e["kind"]) for e in events)
    lines = ["", f"events ({len(events)})"]
    for e in events:
        lines.append(f"  {fmt_time(e['logged_at'])}  step {e['step']:<6}  {e['kind'].ljust(width)}  {e['message']}")
    return lines


def _indent(text: str) -> list[str]:
    return ["  " + line for line in text.rstrip().splitlines()]


def fmt_number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def fmt_time(ts: float | None) -> str:
    return "-" if ts is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))
