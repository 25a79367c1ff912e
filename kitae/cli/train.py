"""`kitae train`: run GRPO from a YAML config, or resume a run."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    app.command("train")(train)


def train(
    config: Optional[Path] = typer.Argument(None, help="YAML config (see examples/zero.yaml)."),
    set_: list[str] = typer.Option([], "--set", help="Override a config value: --set optim.lr=1e-5 (repeatable)."),
    resume: Optional[Path] = typer.Option(None, "--resume", help="Continue the run in this folder (runs/NAME) from "
                                          "its newest complete checkpoint."),
    allow_config_change: bool = typer.Option(
        False, "--allow-config-change", help="With --resume: apply config.yaml edits and --set values that differ "
        "from the run's saved config (without it they are refused). Each change is recorded in the run's events. "
        "The model, its dtype, LoRA, seed, training data and sampler never change on resume."),
    resume_from_scratch: bool = typer.Option(
        False, "--resume-from-scratch", help="With --resume: restart the run at step 0 (e.g. when no checkpoint is "
        "usable). The history so far (a copy of run.db) and the checkpoints/ folder are first put in "
        "runs/NAME/restarts/TIME/; the restart is recorded in the run's events."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
) -> None:
    """Train with GRPO (or a variant) on the rewards in CONFIG; progress bar, run store, checkpoints, evals.

    Before the model loads, everything else is checked: the config, every grader spec and reward function
    (`module:function`, found in the current folder or the config file's folder), the data, and that every
    prompt plus max_new_tokens fits the model's context.
    The run lives in runs/NAME: config.yaml, run.db (metrics, every group of samples, evals) and checkpoints/.
    Ctrl-C saves a checkpoint and stops; `kitae train --resume runs/NAME` continues with its history intact,
    from the newest complete checkpoint (a broken newer one is skipped and named). It refuses, before the model
    loads, when no checkpoint is usable or when the config differs from the run's saved one; `kitae runs show`
    lists resumes, restarts, skipped checkpoints and config changes.
    """
    from kitae.errors import KitaeError
    from kitae.trainer.config import load_train_config
    from kitae.trainer.preflight import preflight

    if resume is None and (resume_from_scratch or allow_config_change):
        flag = "--resume-from-scratch" if resume_from_scratch else "--allow-config-change"
        raise KitaeError(f"{flag} goes with --resume runs/NAME")
    if resume is not None:
        saved = resume / "config.yaml"
        if not saved.exists():
            raise KitaeError(f"{resume}: no config.yaml here; is this a run folder (runs/NAME)?")
        config = config or saved  # a CONFIG given with --resume is compared with the run's saved one
        cfg = load_train_config(config, list(set_))
        cfg.output_dir, cfg.name = str(resume.parent), resume.name
    elif config is None:
        raise KitaeError("give a config file (e.g. examples/zero.yaml) or --resume runs/NAME")
    else:
        cfg = load_train_config(config, list(set_))
    checked = preflight(cfg, config.parent)  # every check that does not need the weights, before they load
    _run(cfg, resume is not None, quiet, checked, allow_config_change=allow_config_change,
         resume_from_scratch=resume_from_scratch)


def _run(cfg, resume: bool, quiet: bool, checked=None, **resume_options: bool) -> None:
    from tqdm import tqdm

    from kitae.trainer.loop import Trainer

    trainer = Trainer(cfg, resume=resume, checked=checked, **resume_options)
    show = trainer.acc.is_main_process and not quiet
    bar = tqdm(total=cfg.optim.steps, initial=trainer.start_step, desc=cfg.name, unit="step", disable=not show)

    def on_step(step: int, m: dict) -> None:
        bar.update(1)
        bar.set_postfix(
            reward=_fmt(m.get("reward")), kl=_fmt(m.get("kl")), len=_fmt(m.get("len_mean"), 1), refresh=False
        )

    trainer.on_step = on_step
    summary = trainer.train()
    bar.close()
    if trainer.acc.is_main_process:
        typer.echo(format_summary(summary))


def _fmt(x, digits: int = 3) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def format_summary(s: dict) -> str:
    lines = [f"run {s.get('name')} {s.get('status')} after {s.get('steps')} steps  ({s.get('path')})"]
    first, last = s.get("first_eval"), s.get("latest_eval")
    if first and last:
        keys = [k for k in ("pass@1", "compliance", "len_mean", "trunc_rate") if k in (last.get("metrics") or {})]
        lines.append(f"{'eval':<12}{'step ' + str(first['step']):>12}{'step ' + str(last['step']):>12}")
        for k in keys:
            lines.append(f"{k:<12}{_fmt(first['metrics'].get(k)):>12}{_fmt(last['metrics'].get(k)):>12}")
    lines.append(f"inspect it: kitae runs show {s.get('name')}")
    return "\n".join(lines)
