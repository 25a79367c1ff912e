"""Where a run's record goes: its run store (kitae.store; the main process's, None in the others) and the loggers
of ``logging.report_to`` (kitae.trainer.loggers). Each step's metrics and groups (every process's), each
evaluation, the run's events and how it ended."""

from __future__ import annotations

from typing import Any, Callable

from kitae.errors import KitaeError
from kitae.trainer.loggers import Loggers
from kitae.trainer.processes import gather


class RunLog:
    """Writes one run's record to ``store`` (None outside the main process: then nothing is written) and
    ``loggers``."""

    def __init__(self, acc, store, loggers: Loggers):
        self.acc, self.store, self.loggers = acc, store, loggers

    def step(self, step: int, metrics: dict[str, float], records: list) -> list:
        """The step's metrics and groups (every process's: gathered in a multi-process run); returns the groups as
        logged."""
        if self.acc.num_processes > 1:
            records = gather(self.acc, records)
            for i, r in enumerate(records):
                r.group_index = i
        if self.store is not None:
            self.store.log_groups(step, records)
            self.store.log_metrics(step, metrics)
            self.loggers.log(step, metrics)
        return records

    def eval(self, step: int, metrics: dict[str, float], samples: list[dict]) -> None:
        self.store.log_eval(step, metrics, samples)
        self.loggers.log_eval(step, metrics)

    def event(self, step: int, kind: str, message: str) -> None:
        if self.store is not None:
            self.store.log_event(step, kind, message)

    def finish(self, status: str, summary: Callable[[], dict[str, Any]], error: str | None) -> None:
        """The loggers closed; the run's status and ``summary()`` stored and the store closed (which lets the
        run's lock go). A store that cannot write (a full disk) raises, unless an ``error`` stopped the run
        already: that is the one to see."""
        self.loggers.close()
        if self.store is None:
            return
        final = summary()
        try:
            self.store.finish(status, final)
        except KitaeError:
            if error is None:
                raise
        finally:
            self.store.close()
