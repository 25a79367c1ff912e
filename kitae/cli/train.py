"""`kitae train`: run GRPO from a YAML config, or resume a run."""

from __future__ import annotations

import math
import shlex
from pathlib import Path
from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    app.command("train")(train)


def train(
    config: Optional[Path] = typer.Argument(None, help="YAML config (see examples/zero.yaml)."),
    set_: list[str] = typer.Option([], "--set", metavar="KEY=VALUE", help="Override a config value: --set optim.lr=1e-5 (repeatable)."),
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
    stop_on_alarm: list[str] = typer.Option(
        [], "--stop-on-alarm", metavar="KIND", help="Stop the run at a checkpoint when this alarm is raised "
        "(repeatable; `all` for every kind): reward_vs_eval, component_dominance, answer_shape, length_jump, "
        "length_collapse, entropy_collapse, kl_blowup, zero_spread, eval_collapse, mismatch_growth "
        "(docs/reward_hacking.md). "
        "The step finishes, a checkpoint is saved, and the run exits with status 3 and the resume command. "
        "Adds to alarms.stop_on."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
    plan: bool = typer.Option(False, "--plan", help="Print the memory plan's full table (`kitae plan`) before the "
                              "model loads. On a CUDA device its peak against the device's size is printed anyway "
                              "(the table too when it does not fit); on CPU nothing unless asked."),
) -> None:
    """Train with GRPO (or a variant) on the rewards in CONFIG; progress bar, run store, checkpoints, evals.

    Before the model loads, everything else is checked: the config, every grader spec and reward function
    (`module:function`, found in the current folder or the config file's folder), the data, and that every
    prompt plus max_new_tokens fits the model's context.
    The run lives in runs/NAME: config.yaml, run.db (metrics, every group of samples, evals) and checkpoints/.
    Ctrl-C (SIGTERM: 143) saves a checkpoint, stops with exit status 130 and prints the resume command (during
    the final evaluation of a trained run it ends that evaluation and the run is finished): `kitae train --resume
    runs/NAME` continues with its history intact, from the newest complete checkpoint (a broken newer one is
    skipped and named). It refuses, before the model loads, when no checkpoint is usable or when the config
    differs from the run's saved one; `kitae runs show` lists resumes, restarts, skipped checkpoints and config
    changes. One process trains a run at a time (runs/NAME/run.lock): a second `kitae train` of a run that is
    training is refused, naming its pid.
    """
    from kitae.errors import KitaeError
    from kitae.store.failures import NO_SPACE, READ_ONLY, write_failure
    from kitae.trainer.alarms import check_kinds
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
    if stop_on_alarm:  # a kind already in the config (as on --resume, saved by the first run) is not a change
        kinds = check_kinds(list(stop_on_alarm), "--stop-on-alarm")
        cfg.alarms.stop_on = list(dict.fromkeys([*cfg.alarms.stop_on, *kinds]))
    checked = preflight(cfg, config.parent)  # every check that does not need the weights, before they load
    if resume is None:
        show_memory_plan(cfg, checked, full=plan)
    try:
        _run(cfg, resume is not None, quiet, checked, allow_config_change=allow_config_change,
             resume_from_scratch=resume_from_scratch)
    except OSError as exc:  # a full disk or a read-only folder under a write no library call names (a logger's)
        if exc.errno not in NO_SPACE + READ_ONLY:
            raise
        raise write_failure(exc, exc.filename or cfg.run_dir, cfg.run_dir) from exc


def show_memory_plan(cfg, checked, full: bool = False) -> None:
    """The memory plan at the top of a run (kitae.trainer.memory_plan): on CUDA, one line per device with its
    peak against the GPU's size (the whole table when it does not fit: the run goes on, the plan is an estimate);
    anywhere, the whole table with --plan. The prompt length is the longest of the first PLAN_ROWS prompts."""
    import torch

    from kitae.trainer.memory_plan import first_fit_hint, format_plan, make_plan, setup_of

    cuda = torch.cuda.is_available()
    if not (cuda or full):
        return
    sizes = [torch.cuda.get_device_properties(0).total_memory] if cuda else []
    memory = make_plan(setup_of(cfg, cuda, longest_prompt(cfg, checked)), sizes)
    short = not full and memory.fits() is not False
    typer.echo("memory plan: " + format_plan(memory, concise=short).replace("\n", "\n  "))
    if memory.fits() is False:
        typer.echo(first_fit_hint(), err=True)


PLAN_ROWS = 512  # prompts measured for the memory plan's prompt length (pre-flight checked them all)


def longest_prompt(cfg, checked) -> int | None:
    """Tokens of the longest of the first PLAN_ROWS training prompts (None for image prompts: the plan's default)."""
    from kitae.chat import format_prompt

    rows, tok = checked.train_rows[:PLAN_ROWS], checked.tokenizer
    if tok is None or checked.processor is not None or not rows:
        return None
    kwargs = cfg.model.chat_template_kwargs
    return max(len(tok(format_prompt(tok, r["messages"], kwargs), add_special_tokens=False)["input_ids"]) for r in rows)


def _run(cfg, resume: bool, quiet: bool, checked=None, **resume_options: bool) -> None:
    """Train; a run stopped by Ctrl-C (or SIGTERM) exits 128 + the signal (130, 143) and says how to resume."""
    from kitae.trainer.loop import Trainer

    try:
        trainer = Trainer(cfg, resume=resume, checked=checked, **resume_options)
    except KeyboardInterrupt:  # before the first step: nothing saved, nothing to resume
        typer.echo("\ninterrupted before training started; nothing was saved", err=True)
        raise typer.Exit(130) from None
    show = trainer.acc.is_main_process and not quiet
    bar = step_bar(cfg.optim.steps, trainer.start_step, cfg.name, disable=not show)
    console = Console(bar, show, trainer.acc.is_main_process)
    console.busy = trainer.worker_has_no_core if cfg.sampling.async_ else None
    trainer.on_step, trainer.on_eval_start, trainer.on_eval = console.on_step, console.on_eval_start, console.on_eval
    trainer.on_alarm = console.on_alarm
    try:
        summary = trainer.train()
    except KeyboardInterrupt:  # a second Ctrl-C stops at once, without saving the step it was in
        bar.close()
        typer.echo(f"interrupted; resume from the newest checkpoint with: {resume_command(cfg)}", err=True)
        raise typer.Exit(130) from None
    bar.close()
    if trainer.acc.is_main_process:
        typer.echo(format_summary(summary))
    if trainer.final_eval_interrupted and trainer.acc.is_main_process:
        typer.echo(f"the final evaluation was stopped early; run it with: {resume_command(cfg)}", err=True)
    if trainer.stop_signal is not None and summary["status"] == "stopped":
        if trainer.acc.is_main_process:
            typer.echo(interrupted_line(summary.get("steps"), cfg), err=True)
        raise typer.Exit(128 + trainer.stop_signal)
    if trainer.stop_alarm is not None:
        if trainer.acc.is_main_process:
            typer.echo(alarm_stop_line(trainer.stop_alarm, summary.get("steps"), cfg), err=True)
        raise typer.Exit(ALARM_EXIT)


def resume_command(cfg) -> str:
    return f"kitae train --resume {shlex.quote(str(cfg.run_dir))}"


ALARM_EXIT = 3  # the exit status of a run stopped by one of alarms.stop_on


def alarm_stop_line(alarm, step: int | None, cfg) -> str:
    """The last line of a run that an alarm stopped: which alarm, where it stopped, how to go on."""
    return (f"stopped by alarm {alarm.key} at step {step}: {alarm.message}\n"
            f"inspect it: kitae runs show {cfg.name}; resume with: {resume_command(cfg)}")


def alarm_line(alarm) -> str:
    """`alarm at step 12: answer_shape: 66% of step 12's samples carry ... (kitae runs show NAME)`"""
    return f"alarm at step {alarm.step}: {alarm.kind}: {alarm.message}"


def interrupted_line(step: int | None, cfg) -> str:
    """What a stopped run tells a person: where it stopped and the command that continues it."""
    if not step:  # stopped in the step-0 evaluation: no step trained, no checkpoint
        return "interrupted before the first step; nothing to resume: start the run again"
    return f"interrupted at step {step}; resume with: {resume_command(cfg)}"


# ---- the step bar and its ETA ----------------------------------------------------------------------
class StepClock:
    """Seconds per training step for the ETA: the mean of the last `window` steps' own times (the loop's
    ``secs_per_step``, which holds no evaluation, checkpoint or start-up time), leaving out the first step of
    the process once a second one is there: it pays for warm-up (first allocations, the first backward), and
    steps early in a run change length as the model's completions do, so old steps should not count long.

    >>> clock = StepClock(window=3)
    >>> for seconds in (30.0, 2.0, 4.0):
    ...     clock.add(seconds)
    >>> clock.seconds_per_step(), clock.eta(10)
    (3.0, 30.0)
    """

    def __init__(self, window: int = 10):
        self.window = window
        self.times: list[float] = []

    def add(self, seconds: float) -> None:
        self.times.append(float(seconds))

    def seconds_per_step(self) -> float | None:
        if not self.times:
            return None
        recent = (self.times[1:] if len(self.times) > 1 else self.times)[-self.window:]
        return sum(recent) / len(recent)

    def eta(self, steps_left: int) -> float | None:
        per_step = self.seconds_per_step()
        return None if per_step is None else per_step * steps_left


def step_bar(total: int, initial: int, desc: str, disable: bool = False, **kw):
    """The tqdm bar of `kitae train`: its rate and ETA come from a StepClock (``bar.clock``), not from tqdm's
    smoothed average of the time between updates, which counts the first step's warm-up for a long while."""
    from tqdm import tqdm

    class StepBar(tqdm):
        def __init__(self, *args, **kwargs):
            self.clock = StepClock()  # before tqdm's __init__, which draws the bar
            super().__init__(*args, **kwargs)

        @property
        def format_dict(self):
            d = super().format_dict
            per_step = self.clock.seconds_per_step()
            if per_step:
                d["rate"] = 1.0 / per_step  # tqdm's remaining time is (total - n) / rate
            return d

    return StepBar(total=total, initial=initial, desc=desc, unit="step", disable=disable, **kw)


class Console:
    """What a person watching `kitae train` sees: the step bar, each evaluation on its own bar and then as a
    line when it ends. Evaluation time is taken out of the step bar's clock, so its ETA counts steps only."""

    def __init__(self, bar, show: bool, main: bool, write=None):
        self.bar, self.show, self.main = bar, show, main
        self.write = write or bar.write  # a line printed above the bars
        self.busy = None  # sampling.async: () -> whether the rollout worker has no core of its own now

    def on_step(self, step: int, m: dict) -> None:
        if m.get("secs_per_step") is not None and hasattr(self.bar, "clock"):
            self.bar.clock.add(m["secs_per_step"])
        self.bar.update(1)
        busy = {"async": "no free core, sync is faster"} if self.busy and self.show and self.busy() else {}
        self.bar.set_postfix(
            reward=_fmt(m.get("reward")), kl=_fmt(m.get("kl")), len=_fmt(m.get("len_mean"), 1), **busy, refresh=False
        )

    def on_alarm(self, alarm) -> None:
        if self.main:
            self.write(alarm_line(alarm))

    def on_eval_start(self, step: int, prompts: int):
        from tqdm import tqdm

        ebar = tqdm(total=prompts, desc=f"eval at step {step}", unit="prompt", leave=False, position=1,
                    disable=not self.show)

        def progress(done: int) -> None:
            ebar.update(done - ebar.n)
            if done >= prompts:
                ebar.close()

        return progress

    def on_eval(self, step: int, metrics: dict, seconds: float) -> None:
        if not self.bar.disable:  # the evaluation's time is not the steps' time
            self.bar.start_t += seconds
            self.bar.last_print_t += seconds
        if self.main:
            self.write(eval_line(step, metrics, seconds))


EVAL_KEYS = ("pass@1", "compliance", "len_mean", "trunc_rate", "tool_use")  # tool_use: agent runs only


def eval_line(step: int, metrics: dict, seconds: float | None = None) -> str:
    """`eval step 100  pass@1 0.239  compliance 0.996  len_mean 3.4  trunc_rate 0.000  (12 s)`; pass@1 is
    `n/a (the eval grader abstained on every sample)` when nothing was scored."""
    parts = [f"{k} {_fmt(metrics[k], 1 if k == 'len_mean' else 3)}" for k in EVAL_KEYS if k in metrics]
    if "pass@1" in metrics and metrics["pass@1"] is None and metrics.get("abstain_rate") == 1.0:
        parts[0] = "pass@1 n/a (the eval grader abstained on every sample)"
    took = f"  ({seconds:.0f} s)" if seconds is not None else ""
    return f"eval step {step:<5} " + "  ".join(parts) + took


def _fmt(x, digits: int = 3) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def format_summary(s: dict) -> str:
    """The last lines of a run: status, and how the held-out numbers moved from the first evaluation to the
    latest (each evaluation was printed as it happened; `kitae runs show NAME` lists them all)."""
    lines = [f"run {s.get('name')} {s.get('status')} after {s.get('steps')} steps  ({s.get('path')})"]
    first, last = s.get("first_eval"), s.get("latest_eval")
    if first and last and first["step"] != last["step"]:
        a, b = first.get("metrics") or {}, last.get("metrics") or {}
        moved = [f"{k} {_fmt(a.get(k), 1 if k == 'len_mean' else 3)} -> {_fmt(b[k], 1 if k == 'len_mean' else 3)}"
                 for k in EVAL_KEYS if k in b]
        lines.append(f"step {first['step']} -> {last['step']}: " + "  ".join(moved))
    lines.append(f"inspect it: kitae runs show {s.get('name')}")
    return "\n".join(lines)
