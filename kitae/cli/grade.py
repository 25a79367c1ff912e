"""``kitae grade`` (grade samples with a grader spec) and ``kitae grader validate|list``.

    kitae grade --grader examples/graders/numeric.yaml --data examples/graders/finance.jsonl --out graded.jsonl
    kitae grader validate --grader examples/graders/numeric.yaml --data examples/graders/finance_labeled.jsonl
    kitae grader list
    kitae grader attack --grader numeric --data bundled:arith/train
    kitae grader lint --grader examples/graders/judge_group.yaml --policy-model Qwen/Qwen2.5-0.5B-Instruct

The library does the work (kitae.graders.rows, kitae.graders.agreement, kitae.graders.attacks,
kitae.graders.lint) and raises; this module prints.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

if TYPE_CHECKING:  # the graders load only when a command grades (kitae --help starts in a blink)
    from kitae.graders.base import Grade

GRADER_HELP = "Grader spec: a .yaml/.json file, inline YAML/JSON, or a type name such as 'numeric'."
DATA_HELP = ('JSON Lines: {"item": {...}, "sample": {"output_text": ...}} or {"item": ..., "samples": [...]}.')


def register(app: typer.Typer) -> None:
    app.command("grade")(grade)
    grader_app = typer.Typer(help="Check graders: agreement with your own scores, canned attacks, common "
                             "mistakes, available types.", no_args_is_help=True)
    grader_app.command("validate")(validate)
    grader_app.command("attack")(attack)
    grader_app.command("lint")(lint)
    grader_app.command("list")(list_types)
    app.add_typer(grader_app, name="grader")


def grade(
    grader: str = typer.Option(..., "--grader", "-g", help=GRADER_HELP),
    data: Path = typer.Option(..., "--data", "-d", help=DATA_HELP),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write graded rows here (default: stdout)."),
    concurrency: int = typer.Option(8, help="Groups graded at the same time."),
) -> None:
    """Grade every sample of a file; print mean, distribution, abstentions and errors."""
    from kitae.graders import build_grader
    from kitae.graders.base import run_sync
    from kitae.graders.rows import agrade_rows, graded_row, load_rows

    g = build_grader(grader, "--grader")
    rows = load_rows(data)
    try:
        grades = run_sync(agrade_rows(g, rows, concurrency))
    finally:
        g.close()
    lines = [json.dumps(graded_row(r, gs), ensure_ascii=False) + "\n" for r, gs in zip(rows, grades)]
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("".join(lines), encoding="utf-8")
    else:
        sys.stdout.write("".join(lines))
    flat = [x for gs in grades for x in gs]
    typer.echo(summarize(flat) + (f"\nwrote {len(lines)} rows to {out}" if out else ""), err=out is None)
    _fail_when_nothing_graded(flat)


def _fail_when_nothing_graded(grades: list[Grade]) -> None:
    """Exit 1 when the grader failed on every sample: no score at all, and errors (the commonest printed above)."""
    errors = sum(1 for g in grades if g.error)
    if grades and errors and all(g.score is None for g in grades):
        typer.secho(f"error: the grader failed on every sample ({errors} of {len(grades)} with an error, none "
                    "scored); fix the grader spec or the data and grade again", fg=typer.colors.RED, err=True)
        raise typer.Exit(1)


def summarize(grades: list[Grade]) -> str:
    """Mean, distribution, abstain and error counts, per-sub-score means."""
    scores = [g.score for g in grades if g.score is not None]
    errors = [g.error for g in grades if g.error]
    lines = [f"samples: {len(grades)}  scored: {len(scores)}  abstained: {len(grades) - len(scores)}"
             f"  errors: {len(errors)}"]
    if scores:
        lines.append(f"mean: {sum(scores) / len(scores):.4f}  min: {min(scores):.4g}  max: {max(scores):.4g}")
        lines += ["distribution:"] + [f"  {label:>11}  {count:5d}  {bar}" for label, count, bar in distribution(scores)]
    subs = sorted({k for g in grades for k in g.sub_scores})
    for name in subs:
        values = [g.sub_scores[name] for g in grades if g.sub_scores.get(name) is not None]
        if values:
            lines.append(f"  {name}: mean {sum(values) / len(values):.4f} over {len(values)}")
    for error, count in Counter(errors).most_common(3):
        lines.append(f"error x{count}: {error[:200]}")
    return "\n".join(lines)


def distribution(scores: list[float], bins: int = 5, width: int = 30) -> list[tuple[str, int, str]]:
    distinct = sorted(set(scores))
    if len(distinct) <= 6 and all(round(v, 3) == v for v in distinct):  # few round values: count each
        counts = [(f"{v:g}", scores.count(v)) for v in distinct]
    else:
        low, high = min(scores), max(scores)
        step = (high - low) / bins
        counts = []
        for b in range(bins):
            lo, hi = low + b * step, low + (b + 1) * step
            n = sum(1 for s in scores if lo <= s < hi or (b == bins - 1 and s == high))
            counts.append((f"[{lo:.2f},{hi:.2f}{']' if b == bins - 1 else ')'}", n))
    most = max(n for _, n in counts)
    return [(label, n, "#" * round(width * n / most)) for label, n in counts]


def validate(
    grader: str = typer.Option(..., "--grader", "-g", help=GRADER_HELP),
    data: Path = typer.Option(..., "--data", "-d", help=DATA_HELP + ' Each sample carries "human_score".'),
    worst: int = typer.Option(5, help="How many of the worst disagreements to show."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    concurrency: int = typer.Option(8, help="Groups graded at the same time."),
    judge_checks: bool = typer.Option(False, "--judge-checks", help="Also probe LLM judges: scores under permuted "
                                      "sample orders and injection probes (extra judge calls; kitae/judge/checks.py)."),
) -> None:
    """Compare the grader's ranking with your own scores before a long run (the hosted RFT grader guide's advice)."""
    from kitae.graders import build_grader, load_spec
    from kitae.graders.agreement import validate as run_validation
    from kitae.graders.rows import load_rows

    spec = load_spec(grader, "--grader")
    g = build_grader(spec, "--grader")
    rows = load_rows(data)
    try:
        report = run_validation(g, rows, spec=spec, concurrency=concurrency, worst=worst)
        if judge_checks:
            from kitae.judge.checks import render_judge_checks, run_judge_checks

            judges = run_judge_checks(g, rows)
    finally:
        g.close()
    if as_json:
        extra = {"judge_checks": [j.to_dict() for j in judges]} if judge_checks else {}
        typer.echo(json.dumps({**report.to_dict(), **extra}, ensure_ascii=False, indent=2))
        return
    typer.echo(render_report(report, rows))
    if judge_checks:
        typer.echo(render_judge_checks(judges))


def render_report(report, rows) -> str:
    a = report.agreement
    fmt = lambda v: "n/a" if v is None else f"{v:.3f}"  # noqa: E731
    lines = [
        f"samples with both scores: {a.n_samples}  (grader abstained on {report.abstained}, errors {report.errors})",
        f"Spearman rho: {fmt(a.spearman)}   Kendall tau-b: {fmt(a.kendall)}",
        f"within-group pairwise agreement: {fmt(a.pairwise)}  over {a.pairs} pairs"
        f" ({a.grader_ties} tied by the grader)",
    ]
    if a.worst:
        lines.append("worst disagreements (you preferred the first, the grader the second):")
        for d in a.worst:
            row = rows[d.group]
            lines.append(f"  row {row.number}: sample {d.better} you {d.human[0]:g} / grader {d.grader[0]:.3g}"
                         f"  vs  sample {d.worse} you {d.human[1]:g} / grader {d.grader[1]:.3g}")
            for idx in (d.better, d.worse):
                lines.append(f"      [{idx}] {_excerpt(row.samples[idx]['output_text'])}")
    for w in report.warnings:
        lines.append(f"warning: {w}")
    lines.append(report.verdict)
    return "\n".join(lines)


def _excerpt(text: str, n: int = 90) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= n else flat[: n - 3] + "..."


def list_types() -> None:
    """List the grader types a spec's `type` can name."""
    from kitae.graders import GRADERS
    for name in GRADERS.names():
        try:
            doc = (GRADERS.get(name).__doc__ or "").strip()
        except Exception as exc:  # an optional dependency missing: still list the name
            doc = f"(unavailable: {exc})"
        typer.echo(f"{name:18} {plain(doc.splitlines()[0]) if doc else ''}".rstrip())


def plain(text: str) -> str:
    """A docstring line as plain text: ``code`` and `code` lose their backticks, :role:`x` its role."""
    return re.sub(r"(:\w+:)?`{1,2}([^`]+)`{1,2}", r"\2", text)


# ---- kitae grader attack ------------------------------------------------------------------------------
ATTACK_DATA_HELP = ("The rows to attack: a prompt set as training reads it (a .jsonl/.parquet file, a datasets "
                    "folder, bundled:arith/train) with reference_answer, or rows of `kitae grade` "
                    "(item + samples; a row without a reference is measured against its best sample).")


def attack(
    grader: str = typer.Option(..., "--grader", "-g", help=GRADER_HELP),
    data: str = typer.Option(..., "--data", "-d", help=ATTACK_DATA_HELP),
    attacks: Optional[Path] = typer.Option(None, "--attacks", help="Your own attacks, added to the built-in "
                                           "ones: a YAML or JSON Lines file of {name, template} ({prompt}, "
                                           "{reference}, {item.FIELD}, ...; docs/reward_hacking.md)."),
    reference_field: str = typer.Option("reference_answer", help="The row field that holds the right answer."),
    limit: int = typer.Option(200, min=0, help="Attack the first N rows (0: all); a judge makes one call a row."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    strict: bool = typer.Option(False, "--strict", help="Exit 1 when any attack is flagged."),
    concurrency: int = typer.Option(8, help="Groups graded at the same time."),
) -> None:
    """Before training: grade canned cheating answers and flag those the grader rewards.

    Attacks: empty, the prompt echoed, one digit changed, number spray, the
    prompt's numbers as equations, an injection, ... (your own: --attacks).
    Flagged when one earns >= 50% of the reference's credit or does as well
    as the reference on >= 25% of rows. Details: docs/reward_hacking.md.
    """
    from kitae.graders import build_grader
    from kitae.graders.attacks import BUILTIN_ATTACKS, load_attack_rows, load_attacks, run_attacks
    from kitae.trainer.config import resolve_data_path

    chosen = list(BUILTIN_ATTACKS) + (load_attacks(attacks) if attacks is not None else [])
    rows = load_attack_rows(resolve_data_path(data))
    rows = rows[:limit] if limit else rows
    g = build_grader(grader, "--grader")
    try:
        report = run_attacks(g, rows, chosen, reference_field=reference_field, concurrency=concurrency)
    finally:
        g.close()
    if as_json:
        typer.echo(json.dumps(report.to_dict(), ensure_ascii=False, indent=2))
    else:
        typer.echo(render_attacks(report))
    if strict and report.flagged:
        raise typer.Exit(1)


def render_attacks(report) -> str:
    pct = lambda v: "   -" if v is None else f"{v:4.0%}"  # noqa: E731
    ref = "n/a" if report.reference_mean is None else f"{report.reference_mean:.3f}"
    lines = [f"{report.rows} rows; the reference answer graded as the answer: mean {ref}",
             f"{'attack':22} {'mean':>6} {'credit':>6} {'ties':>5} {'rows':>5}  verdict"]
    for a in report.attacks:
        mean = "     -" if a.mean is None else f"{a.mean:6.3f}"
        verdict = {True: "FLAGGED: " + a.why, False: "ok", None: "- " + a.why}[a.flagged]
        lines.append(f"{a.name:22} {mean} {pct(a.credit):>6} {pct(a.ties_reference):>5} {a.rows:5d}  {verdict}")
    for note in report.notes:
        lines.append(f"note: {note}")
    flagged = report.flagged
    for a in flagged:
        lines.append(f"  {a.name}: {a.example!r}")
    if flagged:
        lines.append(f"FLAGGED {len(flagged)} of {len(report.attacks)} attacks: the grader rewards "
                     f"{', '.join(a.name for a in flagged)}; a policy trained on it can learn them "
                     "(docs/reward_hacking.md says what to do)")
    else:
        lines.append(f"no attack flagged ({len(report.attacks)} tried)")
    return "\n".join(lines)


# ---- kitae grader lint ----------------------------------------------------------------------------------
def lint(
    grader: str = typer.Option(..., "--grader", "-g", help=GRADER_HELP),
    data: Optional[str] = typer.Option(None, "--data", "-d", help="Optional: the prompt set or labelled rows "
                                       "(as for `kitae grader attack` / `validate`) the checks look at."),
    policy_model: Optional[str] = typer.Option(None, "--policy-model", help="The model you will train (a folder "
                                               "or a Hub id): warns when a judge is the same model."),
    reference_field: str = typer.Option("reference_answer", help="The row field that holds the right answer."),
    as_json: bool = typer.Option(False, "--json", help="Print the warnings as JSON."),
    strict: bool = typer.Option(False, "--strict", help="Exit 1 on any warning."),
) -> None:
    """Warn about the hosted RFT grader guide's common mistakes in a grader spec.

    A spec every other command refuses (a NaN, infinite or negative weight,
    every weight 0) is an error here too, in the same words: exit 2.
    Warnings: the judge is the policy model; numeric grading where most references hold
    no number; similarity alone on free-form answers; under 30 labelled
    samples. No judge is called. Details: docs/reward_hacking.md.
    """
    from kitae.graders import load_spec
    from kitae.graders.attacks import load_attack_rows
    from kitae.graders.lint import lint as run_lint
    from kitae.trainer.config import resolve_data_path

    spec = load_spec(grader, "--grader")
    rows = load_attack_rows(resolve_data_path(data)) if data is not None else None
    report = run_lint(spec, rows, policy_model, reference_field, path="--grader")
    if as_json:
        typer.echo(json.dumps(report.to_dict(), ensure_ascii=False, indent=2))
    elif report.errors:
        for e in report.errors:
            typer.echo(f"error: {e}", err=True)
        typer.echo(f"{len(report.errors)} error(s): the spec is refused by every command; the checks did not run",
                   err=True)
    else:
        for w in report.warnings:
            typer.echo(f"warning ({w.kind}): {w.message}")
        typer.echo(f"{len(report.warnings)} warning(s) from {len(report.checks)} checks: {', '.join(report.checks)}")
    if report.errors:
        raise typer.Exit(2)
    if strict and report.warnings:
        raise typer.Exit(1)
