"""Optional copies of the training metrics for TensorBoard, Weights & Biases and trackio (``logging.report_to``).

The run store (runs/NAME/run.db) is always written and is what ``kitae ui`` shows; these loggers are for
people who already watch their runs elsewhere, like Hugging Face's ``report_to``. Each backend is an
optional dependency, imported only when it is named; a missing package is a ConfigError that names the
pip extra. Backends are registered by name in :data:`LOGGERS`.

    logger = make_loggers(["tensorboard"], run_dir, config)   # [] or ["none"] gives a logger that does nothing
    logger.log(step, {"reward": 0.41, "kl": 0.002})           # None values are skipped
    logger.log_eval(step, {"pass@1": 0.375})                  # reported as eval/pass@1
    logger.close()

| name          | package      | where it goes |
|---------------|--------------|---------------|
| `tensorboard` | tensorboard  | runs/NAME/tensorboard/ (``tensorboard --logdir runs``) |
| `wandb`       | wandb        | project WANDB_PROJECT (default "kitae"), run NAME; offline with WANDB_MODE=offline |
| `trackio`     | trackio      | project TRACKIO_PROJECT (default "kitae"), run NAME, trackio's local database |

Departure from HF's ``report_to``: "all" is not accepted (a silent dependency on whatever happens to be
installed); name the backends you want.
"""

from __future__ import annotations

import importlib
import math
import os
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Protocol

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
    return LOGGERS.register(name)


def run_name(run_dir: Path, config: dict) -> str:
    return str(config.get("name") or run_dir.name)


class Backend:
    """A backend logs metrics with ``log``; evaluations are the same metrics under ``eval/``."""

    def log(self, step: int, metrics: dict[str, float]) -> None:
        raise NotImplementedError

    def log_eval(self, step: int, metrics: dict[str, float]) -> None:
        self.log(step, {EVAL_PREFIX + k: v for k, v in metrics.items()})


# ---- backends ------------------------------------------------------------------------------------
@register_logger("tensorboard")
class TensorBoardLogger(Backend):
    """Scalars in runs/NAME/tensorboard/ (one event file per process start); the config as text."""

    def __init__(self, run_dir: Path, config: dict):
        require("tensorboard", "tensorboard")
        tb = require("torch.utils.tensorboard", "tensorboard")
        self.logdir = run_dir / "tensorboard"
        self.writer = tb.SummaryWriter(log_dir=str(self.logdir), flush_secs=10)
        if config:
            import yaml

            text = yaml.safe_dump(config, sort_keys=False, allow_unicode=True)
            self.writer.add_text("config", "```\n" + text + "```", 0)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)

    def close(self) -> None:
        self.writer.close()


@register_logger("wandb")
class WandbLogger(Backend):
    """A W&B run named after the kitae run, in project WANDB_PROJECT (default "kitae"); files under the run
    folder. W&B steps must not go back, so a resumed run continues the same W&B run only with WANDB_RUN_ID."""

    def __init__(self, run_dir: Path, config: dict):
        wandb = require("wandb", "wandb")
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "kitae"), name=run_name(run_dir, config),
                              config=config, dir=str(run_dir))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(metrics, step=step)

    def close(self) -> None:
        self.run.finish()


@register_logger("trackio")
class TrackioLogger(Backend):
    """A trackio run named after the kitae run, in project TRACKIO_PROJECT (default "kitae")."""

    def __init__(self, run_dir: Path, config: dict):
        self.trackio = require("trackio", "trackio")
        self.trackio.init(project=os.environ.get("TRACKIO_PROJECT", "kitae"), name=run_name(run_dir, config),
                          config=config)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.trackio.log(metrics, step=step)

    def close(self) -> None:
        self.trackio.finish()
