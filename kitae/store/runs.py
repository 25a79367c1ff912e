"""The runs folder: runs/NAME/{config.yaml, checkpoints/step-N/, run.db}. Listing runs and opening one by name."""

from __future__ import annotations

from pathlib import Path

from kitae.errors import KitaeError
from kitae.store.records import RunSummary
from kitae.store.status import STALE_AFTER_S
from kitae.store.store import DB_NAME, RunStore, available_runs, run_not_found


def list_runs(runs_dir: str | Path = "runs", stale_after: float = STALE_AFTER_S) -> list[RunSummary]:
    """One summary per run under `runs_dir`, newest first. A run.db that cannot be read is listed as
    "unreadable" with the reason, so one broken run never hides the others. A missing folder has no runs."""
    runs_dir = Path(runs_dir)
    summaries = [_brief(runs_dir / name, stale_after) for name in available_runs(runs_dir)]
    return sorted(summaries, key=lambda s: (-(s.started_at or 0.0), s.name))


def _brief(run_dir: Path, stale_after: float) -> RunSummary:
    try:
        with RunStore.open(run_dir, stale_after, read_only=True) as store:
            return store.brief()
    except Exception as exc:  # noqa: BLE001 - any broken run.db is reported in its row, never raised
        reason = str(exc) if isinstance(exc, KitaeError) else f"{type(exc).__name__}: {exc}"
        return RunSummary(name=run_dir.name, path=str(run_dir), status="unreadable", error=reason)


def open_run(runs_dir: str | Path, name: str, stale_after: float = STALE_AFTER_S, read_only: bool = True) -> RunStore:
    """Open run `name` under `runs_dir` (or `name` itself when it is a run folder's path), to read it (also on
    read-only storage); ``read_only=False`` to write.

    Raises KitaeError listing the runs that exist, with a did-you-mean for a near miss."""
    runs_dir = Path(runs_dir)
    for candidate in (runs_dir / name, Path(name)):
        if (candidate / DB_NAME).is_file():
            return RunStore.open(candidate, stale_after, read_only=read_only)
    raise run_not_found(runs_dir, name)
