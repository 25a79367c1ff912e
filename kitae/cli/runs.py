"""`kitae runs list`, `kitae runs show NAME` and `kitae runs samples NAME`: read the run store (runs/NAME/run.db)
and print it."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:  # the store loads only when a runs command runs
    from kitae.store import RunSummary

runs_app = typer.Typer(help="List and inspect training runs (runs/NAME/run.db).", no_args_is_help=True)

RUNS_OPTION = typer.Option(Path("runs"), "--runs", help="Folder that holds the runs.")


def register(app: typer.Typer) -> None:
    app.add_typer(runs_app, name="runs")


@runs_app.command("list")
def list_command(runs: Path = RUNS_OPTION) -> None:
    """One line per run: name, status, model, steps, latest reward, latest eval score, last update."""
    from kitae.store import list_runs

    summaries = list_runs(runs)
    if not summaries:
        typer.echo(f"no runs in {runs}/ (start one with `kitae train`, or point --runs at the folder)")
        return
    typer.echo(format_table(summaries))


@runs_app.command("show")
def show_command(
    name: str = typer.Argument(..., help="Run name (a folder under --runs) or a run folder's path."),
    runs: Path = RUNS_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON (every evaluation with all its "
                                 "metrics under all_evals), for scripts."),
    config: bool = typer.Option(False, "--config", help="Also print the run's config."),
) -> None:
    """A run's status, latest metrics and every evaluation; its config with --config.

    A run.db edited by hand is named down to the cell: an error when the summary needs that cell, otherwise a
    `damaged` line (and "damaged" in --json) beside what can be shown."""
    from kitae.store import open_run

    with open_run(runs, name) as store:
        with store.snapshot():
            summary = store.summary()
            evals = [{"step": e.step, "score": e.score, "metrics": e.metrics, "n_samples": e.n_samples,
                      "logged_at": e.logged_at} for e in store.evals()]
            summary["damaged"] = store.damage()  # a hand-edited cell the summary does not read (a sample's)
    if as_json:
        typer.echo(json.dumps({**summary, "all_evals": evals}, indent=2, ensure_ascii=False))
    else:
        typer.echo(format_summary(summary, evals, config))


@runs_app.command("samples")
def samples_command(
    name: str = typer.Argument(..., help="Run name (a folder under --runs) or a run folder's path."),
    step: int = typer.Option(None, "--step", help="The step whose samples to print (default: the last step)."),
    group: int = typer.Option(None, "--group", help="Only this group (its index in the step, from 0)."),
    runs: Path = RUNS_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Print JSON for scripts: one object with run, step and "
                                 "groups, each with its samples (docs/run_store.md)."),
) -> None:
    """The stored samples of a step (default: the last), for people and scripts.

    The prompt, the messages (an agent's turns with each tool call, its arguments and result or error), every
    reward component with its score and reason, how each finished (and why an episode ended), and which
    completion-token spans were trained."""
    from kitae.cli.samples import format_step, group_json, step_groups
    from kitae.store import open_run

    with open_run(runs, name) as store:
        with store.snapshot():
            shown, groups = step_groups(store, step, group)
            run = store.brief().name
    if as_json:
        typer.echo(json.dumps({"run": run, "step": shown, "groups": [group_json(g) for g in groups]}, indent=2,
                              ensure_ascii=False))
    else:
        typer.echo(format_step(run, shown, groups))


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


def format_summary(summary: dict[str, Any], evals: list[dict[str, Any]], with_config: bool = False) -> str:
    lines = [
        f"run       {summary['name']}  ({summary['path']})",
        f"status    {summary['status']}  (pid {summary['pid']} on {summary['host']})",
        f"model     {summary['model'] or '-'}",
        f"started   {fmt_time(summary['started_at'])}   updated {fmt_time(summary['updated_at'])}"
        + (f"   finished {fmt_time(summary['finished_at'])}" if summary["finished_at"] else ""),
        f"steps     {'-' if summary['steps'] is None else summary['steps']}",
        *([f"damaged   {summary['damaged']}"] if summary.get("damaged") else []),
        *_sandbox_lines(summary.get("unsandboxed") or []),
        "",
        *_metric_lines(summary["metrics"], summary["steps"]),
        "",
        *eval_table(evals),
        *alarm_lines(summary.get("alarms") or [], summary["name"]),
        *_event_lines([e for e in summary.get("events") or [] if e["kind"] not in ("alarm", "alarm_cleared")]),
        *_final_lines(summary.get("final")),
    ]
    if with_config:
        lines += ["", "config", *_yaml_lines(summary["config"])]
    return "\n".join(lines).rstrip()


def _sandbox_lines(paths: list[str]) -> list[str]:
    if not paths:
        return []
    return [f"sandbox   none at {', '.join(paths)}: this run ran untrusted code WITHOUT isolation"]


# what the trainer's final summary repeats of the summary above it; anything else it holds (an error) is shown
_SHOWN = {"status", "name", "path", "steps", "metrics", "first_eval", "latest_eval"}


def _final_lines(final: dict[str, Any] | None) -> list[str]:
    extra = {k: v for k, v in (final or {}).items() if k not in _SHOWN}
    if not extra:
        return []
    return ["", "final summary", *_yaml_lines(extra)]


def _metric_lines(metrics: dict[str, dict[str, Any]], last_step: int | None) -> list[str]:
    if not metrics:
        return ["latest metrics: none logged yet"]
    width = max(len(key) for key in metrics)
    lines = ["latest metrics"]
    for key, m in metrics.items():
        stale = "" if m["step"] == last_step else f"  (step {m['step']})"
        lines.append(f"  {key.ljust(width)}  {fmt_number(m['value'])}{stale}")
    return lines


def eval_table(evals: list[dict[str, Any]]) -> list[str]:
    """One row per evaluation: step, score and each top-level metric (slices such as pass@1/easy are in
    --json and on the run page)."""
    if not evals:
        return ["evals: none yet"]
    keys: dict[str, None] = {}
    for e in evals:
        keys.update({k: None for k in e["metrics"] if "/" not in k and k != "score"})
    header = ["step", "score", *keys]
    rows = [[str(e["step"]), fmt_number(e["score"]), *(fmt_number(e["metrics"].get(k)) for k in keys)]
            for e in evals]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    table = ["  " + "  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in [header, *rows]]
    slices = sorted({k for e in evals for k in e["metrics"] if "/" in k})
    note = [f"  (also per slice: {', '.join(slices[:4])}{', ...' if len(slices) > 4 else ''}; see --json)"]
    return [f"evals ({len(evals)})", *table, *(note if slices else [])]


def alarm_lines(alarms: list[dict[str, Any]], run: str) -> list[str]:
    """Each alarm raised (kitae.trainer.alarms), oldest first: its step, kind and message, its evidence and the
    groups that show it (`kitae ui` opens them). Sample text in the evidence is printed as JSON strings."""
    if not alarms:
        return []
    lines = ["", f"alarms ({len(alarms)}; docs/reward_hacking.md says what each means)"]
    for a in alarms:
        lines.append(f"  step {a['step']:<6}  {a['kind']}  {a['message']}")
        for key, value in (a.get("evidence") or {}).items():
            shown = json.dumps(value, ensure_ascii=False)
            lines.append(f"      {key}: {shown if len(shown) <= 300 else shown[:300] + '...'}")
        if a.get("groups"):
            ids = ", ".join(str(g["id"]) for g in a["groups"])
            lines.append(f"      groups: {ids}  (kitae ui: #/run/{run}/group/ID)")
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


def _yaml_lines(data: Any) -> list[str]:
    import yaml

    return _indent(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))


def _indent(text: str) -> list[str]:
    return ["  " + line for line in text.rstrip().splitlines()]


def fmt_number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def fmt_time(ts: float | None) -> str:
    return "-" if ts is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))
