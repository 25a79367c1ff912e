"""What `kitae train --resume runs/NAME` goes on from, decided before the model loads; and what it records.

:func:`plan_resume` (every process, before the model loads) refuses early, each time naming what is wrong:

- the config: the config to resume with (the run's config.yaml, edited or not, plus ``--set``) is compared with
  the config saved in run.db. A changed field is refused, listing each one old → new, unless
  ``allow_config_change``; fields in FROZEN are refused even then (the checkpoint was made with them); fields in
  FREE (how long to train, how often to save and evaluate) change without asking. Every change is recorded.
- the checkpoint: the newest complete one (:func:`kitae.trainer.checkpoint.find_checkpoint`); broken newer ones
  are skipped and named. With none usable and steps already logged, resuming would silently retrain over the
  run's history from step 0, so it is refused unless ``from_scratch``.

:func:`remove_stale_saves` (the main process, holding the run lock, before anything else of a resume, so that a
refused or failed resume leaves no temporary folder either) removes the ``step-N.tmp`` folders of a save that was
cut short. :func:`trim_and_record_resume` (the main process, once the model is loaded) trims the run store back to the
checkpoint's step (the steps logged after it are redone) and writes it all down: skipped checkpoints, the
resume (and which logged steps are redone), a restart from scratch (after copying run.db and moving
checkpoints/ to ``restarts/TIME/``: nothing is deleted), and the config change, in the run's events.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kitae.errors import ConfigError, KitaeError
from kitae.store import DB_NAME, RunStore
from kitae.store.failures import write_failure
from kitae.trainer.checkpoint import Checkpoint, find_checkpoint, remove_stale_tmp
from kitae.trainer.config import load_train_config

log = logging.getLogger(__name__)

# field (or section) -> why it cannot change on resume; refused even with --allow-config-change
FROZEN = {
    "name": "the run's name is its folder's name; rename the folder back",
    "seed": "the sampling seeds and the prompt order follow it",
    "model.path": "the checkpoint holds this model's weights",
    "model.revision": "the checkpoint holds this revision's weights",
    "model.dtype": "the checkpoint's weights and optimizer state are in this dtype",
    "model.master_weights": "the checkpoint's optimizer state is kept in these weights' dtype",
    "model.lora": "the checkpoint holds this adapter",
    "data.train": "the prompt sampler's state indexes these rows",
    "data.sampler.name": "the checkpoint holds this sampler's state",
    "sampling.async": "the checkpoint holds the groups sampled ahead for the next steps",
}
# fields that change without --allow-config-change (still recorded): how long to train and how the run is watched
FREE = ("optim.steps", "logging.save_every", "logging.keep_checkpoints", "logging.report_to", "eval.every", "threads",
        # where the rollout servers are and how long to wait for them (servers restarted on new addresses)
        # (the server engine's settings, kitae.rollout.server.ServerSettings)
        "sampling.engine.servers", "sampling.engine.api_key_env", "sampling.engine.server_timeout",
        "sampling.engine.server_down_secs", "sampling.engine.server_max_wait", "sampling.engine.sync_dir")
IGNORED = ("output_dir",)  # where the run folder is now, not how it trains


@dataclass
class ConfigChange:
    field: str  # dotted path; list items by index (rewards[0].weight)
    old: Any
    new: Any

    def __str__(self) -> str:
        return f"{self.field}: {_show(self.old)} → {_show(self.new)}"

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field, "old": self.old, "new": self.new}


@dataclass
class ResumePlan:
    checkpoint: Checkpoint | None  # None: training starts at step 0
    skipped: list[tuple[Path, str]] = field(default_factory=list)  # newer checkpoints that were broken, and why
    changes: list[ConfigChange] = field(default_factory=list)
    last_logged: int | None = None  # the run's last logged step before this resume
    restart: bool = False  # --resume-from-scratch

    @property
    def step(self) -> int:
        return self.checkpoint.step if self.checkpoint else 0

    def changed(self, path: str) -> bool:
        return any(_under(c.field, (path,)) for c in self.changes)


def plan_resume(cfg: Any, allow_config_change: bool = False, from_scratch: bool = False) -> ResumePlan:
    """Check that run `cfg.run_dir` can be resumed with `cfg`; raise ConfigError / KitaeError naming what is wrong."""
    run_dir = cfg.run_dir
    if not (run_dir / DB_NAME).is_file():
        raise KitaeError(f"{run_dir / DB_NAME} is missing: there is no run history here to resume "
                         f"(start a new run with `kitae train CONFIG`)")
    with RunStore.open(run_dir, read_only=True) as store:
        store.check_cells()  # a damaged history is refused here, not after the model loaded or mid-run
        saved, last = store.config, store.last_logged_step()
    changes = config_changes(_normalized(saved), cfg.to_dict())
    check_config_changes(changes, allow_config_change, run_dir)
    if not os.access(run_dir, os.W_OK):
        raise KitaeError(f"{run_dir} is read-only: a resumed run writes its run store and checkpoints there; copy "
                         "the run folder to writable storage and resume the copy")
    if from_scratch:
        return ResumePlan(None, changes=changes, last_logged=last, restart=True)
    ckpt, skipped = find_checkpoint(run_dir)
    if ckpt is None and last:  # step 0 (an eval before training) is redone as it was: nothing lost
        raise KitaeError(_no_checkpoint_message(run_dir, skipped, last))
    if ckpt is not None:
        _check_staleness(cfg, changes, ckpt.step, run_dir)
    return ResumePlan(ckpt, skipped, changes, last)


def _check_staleness(cfg: Any, changes: list[ConfigChange], step: int, run_dir: Path) -> None:
    """An async run's checkpoint holds the groups sampled ahead, up to the old ``max_staleness`` versions behind
    the policy that trains them: a lower bound cannot hold for them (a higher one can)."""
    change = next((c for c in changes if c.field == "sampling.max_staleness"), None)
    if change is None or not cfg.sampling.async_ or None in (change.old, change.new) or change.new >= change.old:
        return
    last = min(cfg.optim.steps, step + 1 + change.old)
    raise ConfigError(str(run_dir / "config.yaml"), f"{change} cannot be lowered on resume: steps {step + 1} to "
                      f"{last} were sampled ahead before the checkpoint of step {step}, up to {change.old} policy "
                      f"versions behind, and the resumed run trains on them; resume with max_staleness "
                      f"{change.old} or more (a lower bound applies to a new run)")


def _no_checkpoint_message(run_dir: Path, skipped: list[tuple[Path, str]], last: int) -> str:
    if not (run_dir / "checkpoints").is_dir():
        why = [f"no checkpoints/ folder in {run_dir}"]
    elif not skipped:
        why = [f"{run_dir / 'checkpoints'} holds no step-N checkpoint"]
    else:
        why = [f"{path}: {problem}" for path, problem in skipped]
    return (
        f"{run_dir}: no usable checkpoint to resume from, and the run has logged steps up to {last}:\n"
        + "".join(f"  {line}\n" for line in why)
        + "Resuming would train again from step 0 over that history. To restart the run at step 0 anyway "
        f"(a copy of run.db and the checkpoints/ folder are first put in {run_dir / 'restarts'}/), run:\n"
        f"  kitae train --resume {run_dir} --resume-from-scratch"
    )


# ---- the config ---------------------------------------------------------------------------------------
def _normalized(saved: dict) -> dict:
    """The saved config as this kitae builds it (defaults of fields added since filled in), or as it is."""
    try:
        return load_train_config(data=copy.deepcopy(saved)).to_dict()  # validation fills in names: not in place
    except KitaeError:
        return saved


def config_changes(old: Any, new: Any, path: str = "") -> list[ConfigChange]:
    """Every field that differs between two config dicts, in config order."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[ConfigChange] = []
        for key in list(old) + [k for k in new if k not in old]:
            sub = f"{path}.{key}" if path else str(key)
            if sub not in IGNORED:
                out += config_changes(old.get(key), new.get(key), sub)
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new) and any(
        isinstance(x, dict) for x in old + new
    ):
        return [c for i, (a, b) in enumerate(zip(old, new)) for c in config_changes(a, b, f"{path}[{i}]")]
    return [] if old == new else [ConfigChange(path, old, new)]


def check_config_changes(changes: list[ConfigChange], allow: bool, run_dir: Path) -> None:
    """Refuse FROZEN fields always, and other changed fields (but FREE ones) unless `allow`."""
    source = str(run_dir / "config.yaml")
    frozen = [c for c in changes if _frozen_reason(c.field)]
    if frozen:
        lines = "".join(f"  {c}  (cannot change on resume: {_frozen_reason(c.field)})\n" for c in frozen)
        raise ConfigError(source, "with any --set values, it differs from the run's saved config in fields that "
                          "cannot change on resume:\n"
                          f"{lines}put them back, or start a new run under another name to train with them")
    asked = [c for c in changes if not _under(c.field, FREE)]
    if asked and not allow:
        lines = "".join(f"  {c}\n" for c in asked)
        raise ConfigError(source, f"with any --set values, it differs from the run's saved config (run.db):\n{lines}"
                          "resume with the saved values (undo the edit or the --set), or add --allow-config-change "
                          "to apply the change from the next step on (it is recorded in the run's events)")


def _frozen_reason(path: str) -> str | None:
    return next((why for key, why in FROZEN.items() if _under(path, (key,))), None)


def _under(path: str, keys: tuple[str, ...]) -> bool:
    return any(path == k or path.startswith((k + ".", k + "[")) for k in keys)


def _show(value: Any) -> str:
    return f"'{value}'" if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def write_config_yaml(path: Path, config: dict, run_dir: Path) -> None:
    """The run's config.yaml; a failed write (a full disk) is a KitaeError naming the file and the fix."""
    try:
        path.write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True))
    except OSError as exc:
        raise write_failure(exc, path, run_dir) from exc


# ---- recording it (main process, after the model loaded) ----------------------------------------------
def remove_stale_saves(run_dir: Path) -> None:
    """The step-N.tmp folders of a save cut short (a SIGKILL, a full disk), removed. Only under the run lock: no
    trainer is saving into them now."""
    for path in remove_stale_tmp(run_dir):
        log.info("removed %s, left by a checkpoint save that did not finish", path)


def trim_and_record_resume(store: RunStore, plan: ResumePlan, cfg: Any) -> None:
    """Move aside what a restart replaces, trim the steps to redo, and record each thing in the run's events;
    save the new config when it changed."""
    run_dir = store.run_dir
    if plan.restart:
        _restart(store, plan)
    else:
        _resumed(store, plan)
    if plan.changes:
        store.change_config(plan.step, cfg.to_dict(), "; ".join(map(str, plan.changes)),
                            [c.to_dict() for c in plan.changes])
        write_config_yaml(run_dir / "config.yaml", cfg.to_dict(), run_dir)
        log.warning("config changed on resume from step %d: %s", plan.step, "; ".join(map(str, plan.changes)))


def _resumed(store: RunStore, plan: ResumePlan) -> None:
    ckpt = plan.checkpoint
    for path, problem in plan.skipped:
        log.warning("%s: %s; skipping it", path, problem)
        store.log_event(plan.step, "checkpoint_skipped", f"{_rel(path, store)}: {problem}; an older checkpoint "
                        "was used", {"checkpoint": str(path), "problem": problem})
    removed = [plan.step + 1, plan.last_logged] if plan.last_logged is not None and plan.last_logged > plan.step else None
    redo = f"; steps {removed[0]}-{removed[1]} logged after it are redone" if removed else ""
    if ckpt is None:
        message = "resumed at step 0: there was no checkpoint yet and no training step logged"
    else:
        message = f"resumed from {_rel(ckpt.path, store)}{redo}"
    if plan.skipped:
        log.warning("resuming from %s (step %d)", ckpt.path if ckpt else "step 0", plan.step)
    store.truncate_after(plan.step)  # steps after the checkpoint are redone: none lost, none twice
    store.log_event(plan.step, "resumed", message,
                    {"checkpoint": str(ckpt.path) if ckpt else None, "removed_steps": removed})


def _restart(store: RunStore, plan: ResumePlan) -> None:
    run_dir = store.run_dir
    previous = _free_folder(run_dir / "restarts" / time.strftime("%Y%m%d-%H%M%S"))
    store.backup(previous / DB_NAME)
    kept = ["run.db"]
    if (run_dir / "checkpoints").is_dir():  # a later resume must not pick a checkpoint of the earlier history
        os.replace(run_dir / "checkpoints", previous / "checkpoints")
        kept.append("checkpoints/")
    removed = [1, plan.last_logged] if plan.last_logged else None
    store.truncate_after(0)
    steps = f"steps 1-{plan.last_logged}" if removed else "no steps"
    message = f"restarted at step 0 (--resume-from-scratch); the history before it ({steps}: " \
              f"{' and '.join(kept)}) is kept in {previous}"
    store.log_event(0, "restarted", message, {"previous": str(previous), "removed_steps": removed})
    log.warning("%s", message)


def _free_folder(path: Path) -> Path:
    candidate, n = path, 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    candidate.mkdir(parents=True)
    return candidate


def _rel(path: Path, store: RunStore) -> str:
    try:
        return str(path.relative_to(store.run_dir))
    except ValueError:
        return str(path)
