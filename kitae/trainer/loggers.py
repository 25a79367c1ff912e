"""Optional copies of the training metrics for TensorBoard, Weights & Biases and trackio (``logging.report_to``).

The run store (runs/NAME/run.db) is always written and is what ``kitae ui`` shows; these loggers are for
people who already watch their runs elsewhere, like Hugging Face's ``report_to``. The backends are
accelerate's trackers (``accelerate.tracking``: TensorBoardTracker, WandBTracker, TrackioTracker); each
backend's package is an optional dependency, imported only when it is named. Backends are registered by
name in :data:`LOGGERS`.

    logger = make_loggers(["tensorboard"], run_dir, config)   # [] or ["none"] gives a logger that does nothing
    logger.log(step, {"reward": 0.41, "kl": 0.002})           # None and NaN values are skipped
    logger.log_eval(step, {"pass@1": 0.375})                  # reported as eval/pass@1
    logger.close()

| name          | package      | where it goes |
|---------------|--------------|---------------|
| `tensorboard` | tensorboard  | runs/NAME/tensorboard/ (``tensorboard --logdir runs``); the config as hparams |
| `wandb`       | wandb        | project WANDB_PROJECT (default "kitae"), run NAME; offline with WANDB_MODE=offline |
| `trackio`     | trackio      | project TRACKIO_PROJECT (default "kitae"), run NAME, trackio's local database |

What kitae adds around accelerate's trackers (they lack it):
- a missing package is a ConfigError naming the pip extra (``pip install 'kitae[wandb]'``), raised when the
  loggers are made; accelerate raises a bare ImportError from ``start()``, for TensorBoard one naming tensorboardX;
- names are checked when the config is read (unknown: did-you-mean; repeated: an error); "all" is not
  accepted (a silent dependency on whatever happens to be installed): name the backends you want;
- values that are None, NaN or booleans are dropped (accelerate's trackers pass NaN and booleans on as numbers);
- evaluations go under ``eval/`` (accelerate has one ``log``);
- TensorBoard's hparams take only flat scalars, so the nested config is flattened to ``algorithm.loss``-style
  keys, lists written as JSON text (:func:`flat_config`);
- accelerate's trackers need accelerate's process state; a caller without an Accelerator (a script calling
  make_loggers) gets a PartialState made for it;
- closing closes every tracker even when one fails (accelerate's ``end_training`` stops at the first failure).

Departure from HF's ``report_to``: the W&B and trackio project is an environment variable (accelerate's
``project_name``), the run is named after the kitae run. Offline W&B is W&B's own ``WANDB_MODE=offline``.
"""

from __future__ import annotations

import importlib
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Protocol

from kitae.config import setting
from kitae.errors import ConfigError
from kitae.registry import Registry

LOGGERS = Registry("report_to logger")
KEY_PATH = "logging.report_to"
EVAL_PREFIX = "eval/"


class Logger(Protocol):
    def log(self, step: int, metrics: dict[str, Any]) -> None: ...

    def log_eval(self, step: int, metrics: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


def make_loggers(report_to: list[str] | str | None, run_dir: str | Path, config: dict | None = None) -> "Loggers":
    """One logger that reports to every backend named in `report_to` (a list, or one name)."""
    names = check_report_to(report_to)
    run_dir = Path(run_dir)
    built: list[Logger] = []
    try:
        for name in names:
            built.append(LOGGERS.get(name)(run_dir, config or {}))
    except BaseException:
        Loggers(built).close()
        raise
    return Loggers(built)


def check_report_to(report_to: list[str] | str | None, path: str = KEY_PATH) -> list[str]:
    """The backend names of `report_to` (a list, or one name; "none" is dropped); ConfigError on an unknown or
    repeated name."""
    names = [report_to] if isinstance(report_to, str) else list(report_to or [])
    names = [n for n in names if n != "none"]
    for i, name in enumerate(names):
        if name not in LOGGERS:
            LOGGERS.get(name, f"{path}[{i}]")  # raises ConfigError with did-you-mean
    if len(set(names)) != len(names):
        raise ConfigError(path, f"a backend is named twice: {names}")
    return names


class Loggers:
    """Several loggers as one; values that are None or NaN are dropped before they reach a backend."""

    def __init__(self, loggers: list[Logger]):
        self.loggers = loggers

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        clean = _numbers(metrics)
        for logger in self.loggers:
            logger.log(step, clean)

    def log_eval(self, step: int, metrics: dict[str, Any]) -> None:
        clean = _numbers(metrics)
        for logger in self.loggers:
            logger.log_eval(step, clean)

    def close(self) -> None:
        """Close every logger, even when one fails; the first failure is raised afterwards."""
        errors = []
        for logger in self.loggers:
            try:
                logger.close()
            except Exception as exc:  # noqa: BLE001 - the others must still flush
                errors.append(exc)
        self.loggers = []
        if errors:
            raise errors[0]

    def __enter__(self) -> "Loggers":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _numbers(metrics: dict[str, Any]) -> dict[str, float]:
    out = {}
    for key, value in metrics.items():
        if value is None or isinstance(value, bool):
            continue
        value = float(value)
        if not math.isnan(value):
            out[key] = value
    return out


def require(module: str, name: str) -> ModuleType:
    """Import an optional backend, or say which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(KEY_PATH, f"'{name}' needs the {name} package, which is not installed: "
                          f"pip install 'kitae[{name}]' (or pip install {name}); {exc}") from exc


def register_logger(name: str) -> Callable:
    """Register a backend: a callable ``(run_dir, config) -> Logger``."""
    return LOGGERS.register(name)


def run_name(run_dir: Path, config: dict) -> str:
    return str(config.get("name") or run_dir.name)


def flat_config(config: dict, prefix: str = "") -> dict[str, Any]:
    """The config as one level of scalar values, the way TensorBoard's hparams take it.

    >>> flat_config({"name": "r", "algorithm": {"loss": "dapo", "kl": {"coef": 0.0}}, "optim": {"betas": [0.9, 0.99]}})
    {'name': 'r', 'algorithm.loss': 'dapo', 'algorithm.kl.coef': 0.0, 'optim.betas': '[0.9, 0.99]'}
    """
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            flat.update(flat_config(value, f"{prefix}{key}."))
        elif value is None or isinstance(value, (bool, int, float, str)):
            flat[prefix + str(key)] = value
        else:
            flat[prefix + str(key)] = json.dumps(value, default=str, ensure_ascii=False)
    return flat


class TrackerLogger:
    """An accelerate tracker behind kitae's logger interface, started when made."""

    def __init__(self, tracker: Any):
        from accelerate import PartialState

        PartialState()  # the trackers log through accelerate's logger, which needs it (the trainer has one)
        tracker.start()
        self.tracker = tracker

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.tracker.log(metrics, step=step)

    def log_eval(self, step: int, metrics: dict[str, float]) -> None:
        self.log(step, {EVAL_PREFIX + k: v for k, v in metrics.items()})

    def close(self) -> None:
        self.tracker.finish()


# ---- backends ------------------------------------------------------------------------------------
@register_logger("tensorboard")
def tensorboard_logger(run_dir: Path, config: dict) -> TrackerLogger:
    """Scalars in runs/NAME/tensorboard/ (one event file per process start); the config as hparams, which
    accelerate writes into timestamped folders below it (an event file, and an hparams.yml)."""
    require("tensorboard", "tensorboard")
    from accelerate.tracking import TensorBoardTracker

    logger = TrackerLogger(TensorBoardTracker("tensorboard", run_dir, flush_secs=10))  # -> run_dir/tensorboard
    if config:
        try:
            logger.tracker.store_init_configuration(flat_config(config))
        except BaseException:
            logger.close()
            raise
    return logger


@register_logger("wandb")
def wandb_logger(run_dir: Path, config: dict) -> TrackerLogger:
    """A W&B run named after the kitae run, in project WANDB_PROJECT (default "kitae"); files under the run
    folder. W&B steps must not go back, so a resumed run continues the same W&B run only with WANDB_RUN_ID."""
    require("wandb", "wandb")
    from accelerate.tracking import WandBTracker

    project = os.environ.get("WANDB_PROJECT", "kitae")  # accelerate's run_name is the W&B project
    return TrackerLogger(WandBTracker(project, name=run_name(run_dir, config), config=config, dir=str(run_dir)))


@register_logger("trackio")
def trackio_logger(run_dir: Path, config: dict) -> TrackerLogger:
    """A trackio run named after the kitae run, in project TRACKIO_PROJECT (default "kitae")."""
    require("trackio", "trackio")
    from accelerate.tracking import TrackioTracker

    project = os.environ.get("TRACKIO_PROJECT", "kitae")  # accelerate's run_name is the trackio project
    return TrackerLogger(TrackioTracker(project, name=run_name(run_dir, config), config=config))


@dataclass
class LoggingConfig:
    save_every: int = setting(25, minimum=0)  # 0: a checkpoint at the end only
    keep_checkpoints: int = setting(2, minimum=0)  # 0: keep every one
    report_to: list[str] | str = field(default_factory=list)  # tensorboard, wandb, trackio; one name alone is fine

    def resolve(self, path: str) -> None:
        if isinstance(self.report_to, str):  # HF's TrainingArguments take one name as well as a list
            self.report_to = [self.report_to]

    def validate(self, path: str) -> None:
        check_report_to(self.report_to, f"{path}.report_to")
