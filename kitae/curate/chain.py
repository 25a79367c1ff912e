"""Running curation steps alone or chained, and what they write. The input file is never written to.

One step, ``--out curated/dedupe.jsonl``:

    curated/dedupe.jsonl            the rows kept (fields the step adds: pass_rate, guessable, domain, ...)
    curated/dedupe.dropped.jsonl    every row that went: {"step", "reason", "row", evidence..., "item": row}
    curated/dedupe.report.json      the report (counts, tables, examples)
    curated/difficulty.progress.jsonl   difficulty/hackable only: per-prompt samples, for resuming

A chain, ``--out curated/`` (a folder): each step's files as ``01-format.jsonl``, ``02-dedupe.jsonl``, ...,
the last step's rows as ``curated.jsonl``, all reports in ``report.json`` and the recipe as run in
``recipe.yaml``. Rerunning a chain reruns every step; ``difficulty`` and ``hackable`` pick up their progress
files and only sample the prompts not done yet.

A recipe (YAML)::

    data: kitae/assets/data/arith/train.jsonl
    out: curated/arith
    steps:
      - format                                    # a step with its defaults
      - dedupe: {eval: [kitae/assets/data/arith/test.jsonl]}
      - difficulty: {n: 10, drop_solved: true, drop_unsolved: true}
      - balance: {bands: {hard: 1, medium: 1, easy: 1}}
    threads: 1                                    # optional: torch threads (default: by model size)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import yaml

from kitae.config import apply_overrides, from_dict, read_yaml, setting, to_dict
from kitae.curate.step import STEPS, Context, Progress, StepResult, no_progress
from kitae.errors import ConfigError


@dataclass
class PlannedStep:
    name: str
    config: Any


def parse_step(name: str, data: Any, path: str) -> PlannedStep:
    step = STEPS.get(name, path)
    return PlannedStep(name, from_dict(step.config, data, f"{path}.{name}" if path else name))


def parse_steps(entries: list[Any], overrides: list[str] | None = None, path: str = "steps") -> list[PlannedStep]:
    """Steps from a recipe list (``"format"`` or ``{"dedupe": {...}}``), with ``step.key=value`` overrides."""
    if not isinstance(entries, list) or not entries:
        raise ConfigError(path, "give a list of steps, e.g. [format, dedupe, difficulty, balance]")
    raw = []
    for i, entry in enumerate(entries):
        if isinstance(entry, str):
            raw.append((entry, {}))
        elif isinstance(entry, dict) and len(entry) == 1:
            name, cfg = next(iter(entry.items()))
            raw.append((str(name), dict(cfg or {})))
        else:
            raise ConfigError(f"{path}[{i}]", "a step is a name or a one-key mapping {name: {settings}}")
    for item in overrides or []:
        name = item.partition(".")[0]
        targets = [cfg for n, cfg in raw if n == name]
        if not targets:
            raise ConfigError(item, f"no step {name!r} in this chain ({', '.join(n for n, _ in raw)})")
        for cfg in targets:
            apply_overrides(cfg, [item.partition(".")[2]])
    return [parse_step(name, cfg, f"{path}[{i}]") for i, (name, cfg) in enumerate(raw)]


@dataclass
class Recipe:
    """A chain's recipe file (the module docstring shows one)."""

    data: str | None = None  # the input dataset (--data overrides it)
    out: str | None = None  # the output folder (--out overrides it)
    steps: list[Any] | None = None  # a step is a name or {name: {settings}} (parse_steps checks them)
    threads: int | None = setting(None, minimum=1)  # torch threads (default: by model size)


def load_recipe(path: str | Path) -> dict:
    """The recipe's keys that it sets (data, out, steps, threads), checked; errors name the file and the key."""
    data = read_yaml(path)
    try:
        recipe = from_dict(Recipe, data)
    except ConfigError as exc:
        raise ConfigError(str(path), str(exc)) from None
    return {k: v for k, v in to_dict(recipe).items() if v is not None}


# ---- running ------------------------------------------------------------------------------------
def check_paths(inputs: list[Path], outputs: list[Path]) -> None:
    """Refuse to write over an input (the input is never touched)."""
    resolved = {p.resolve() for p in inputs}
    for out in outputs:
        if out.resolve() in resolved:
            raise ConfigError("--out", f"{out} is the input; curation writes a new dataset, choose another path")


def step_files(out: Path) -> dict[str, Path]:
    stem = out.name[: -len(".jsonl")] if out.name.endswith(".jsonl") else out.stem
    return {"rows": out, "dropped": out.with_name(f"{stem}.dropped.jsonl"),
            "report": out.with_name(f"{stem}.report.json")}


def write_result(result: StepResult, step: str, out: Path) -> None:
    from kitae.data.loader import write_jsonl

    files = step_files(out)
    write_jsonl(files["rows"], result.rows)
    write_jsonl(files["dropped"], (d.to_dict(step) for d in result.dropped))
    files["report"].write_text(json.dumps(result.report.to_dict(), ensure_ascii=False, indent=2) + "\n",
                               encoding="utf-8")


def run_step(
    planned: PlannedStep, rows: list[dict], out: Path | None = None, source: str = "<rows>",
    progress: Callable[[str, int], Progress] = no_progress, engines: dict | None = None, restart: bool = False,
    threads: int | None = None,
) -> StepResult:
    """Run one step on rows; with `out`, write its rows, dropped rows and report there. `threads`: torch threads
    for a step that runs a model (None: chosen from the model's size, kitae.threads)."""
    if out is not None and not out.name.endswith(".jsonl"):
        raise ConfigError("--out", f"{out}: a step writes JSON Lines; give a path ending in .jsonl")
    ctx = Context(out=out, source=source, progress=progress, engines={} if engines is None else engines,
                  restart=restart, threads=threads)
    result = STEPS.get(planned.name).run(rows, planned.config, ctx)
    if out is not None:
        write_result(result, planned.name, out)
    return result


def run_chain(
    steps: list[PlannedStep], rows: list[dict], out_dir: Path, source: str = "<rows>",
    progress: Callable[[str, int], Progress] = no_progress, restart: bool = False,
    on_step: Callable[[str, StepResult], None] = lambda name, result: None, threads: int | None = None,
) -> list[StepResult]:
    """Run steps in order, each on the previous one's rows, writing every step's files into `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    source_in = source
    engines: dict = {}
    results = []
    for k, planned in enumerate(steps, 1):
        out = out_dir / f"{k:02d}-{planned.name}.jsonl"
        result = run_step(planned, rows, out, source, progress, engines, restart, threads)
        results.append(result)
        on_step(planned.name, result)
        rows, source = result.rows, str(out)
    from kitae.data.loader import write_jsonl

    write_jsonl(out_dir / "curated.jsonl", rows)
    summary = {"steps": [r.report.to_dict() for r in results], "rows_out": len(rows)}
    (out_dir / "report.json").write_text(json.dumps(summary, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    recipe = {"data": source_in, "out": str(out_dir), **({"threads": threads} if threads else {}),
              "steps": [{p.name: to_dict(p.config)} for p in steps]}
    (out_dir / "recipe.yaml").write_text(yaml.safe_dump(recipe, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return results


def chain_summary(results: list[StepResult]) -> str:
    """One line per step: rows in -> out, and the main reasons rows went."""
    lines = []
    for r in results:
        reasons = ", ".join(f"{n} {why}" for why, n in r.report.dropped.most_common(3))
        lines.append(f"  {r.report.step:<11} {r.report.rows_in:6d} -> {r.report.rows_out:6d}"
                     + (f"   ({reasons})" if reasons else ""))
    return "\n".join(lines)
