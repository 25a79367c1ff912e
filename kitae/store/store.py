"""RunStore: one run's SQLite database, runs/NAME/run.db, written by the trainer and read by everyone else.

Modelled on trackio: the storage is the contract and the writer's API is small (create, log_*, finish).
Every ``log_*`` call, ``change_config``, ``truncate_after`` and ``finish`` is one transaction, so a reader sees a step whole or
not at all and a trainer killed with SIGKILL leaves every committed step readable. The reading half of the
API lives in :mod:`kitae.store.reader`.

    store = RunStore.create("runs/gsm8k-1", name="gsm8k-1", config=cfg, model="Qwen/Qwen3-0.6B")
    for step in range(1, steps + 1):
        store.log_groups(step, groups)
        store.log_metrics(step, {"reward": 0.41, "kl": 0.002})
    store.finish("finished")

Departure from trackio: one database per run (not per project), so a run folder is self-contained and can
be copied, deleted or truncated for a resume on its own.

One writer: a store opened to write holds the run's lock (:mod:`kitae.store.lock`) until it is closed; readers
(``read_only=True``) never take it. A SQLite error (a damaged run.db, a full disk) is raised as a KitaeError
that names the file and the fix (:mod:`kitae.store.failures`).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

from kitae.errors import KitaeError
from kitae.registry import closest
from kitae.store.reader import RunReader
from kitae.registry import unknown_name_message
from kitae.store.failures import sqlite_failure, write_failure
from kitae.store.lock import RunLock
from kitae.store.records import GroupRecord, SampleRecord, group_stats, prompt_key, scalar, to_json, valid_text
from kitae.store.schema import SCHEMA_VERSION, check_version, connect, create_schema
from kitae.store.status import FINAL_STATUSES, STALE_AFTER_S, this_host

DB_NAME = "run.db"
EVENT_KINDS = (
    "resumed",  # training went on from a checkpoint; the steps logged after it were removed, to be redone
    "restarted",  # --resume-from-scratch: back to step 0; the earlier history was copied aside first
    "checkpoint_skipped",  # a checkpoint was incomplete or unreadable; an older one was used
    "config_changed",  # the config changed on resume (data: the changed fields, old and new)
    "step_skipped",  # an optimizer step was skipped: its gradient norm was not finite (kitae.trainer.update)
    "alarm",  # a sign of reward hacking or of a run that stopped learning (kitae.trainer.alarms; data: kind,
    # subject, evidence, groups)
    "alarm_cleared",  # an alarm's sign has been gone for alarms.clear_steps steps; it may be raised again
    "eval_interrupted",  # a signal (Ctrl-C, SIGTERM) stopped the final evaluation of a run whose steps were all
    # trained and saved: the run is finished, that evaluation is missing (`kitae train --resume` runs it)
)


class RunStore(RunReader):
    """A handle on runs/NAME/run.db. Use :meth:`create` for a new run and :meth:`open` for an existing one."""

    def __init__(self, run_dir: Path, conn: sqlite3.Connection, stale_after: float = STALE_AFTER_S,
                 version: int = SCHEMA_VERSION, run_lock: RunLock | None = None):
        self.run_dir = run_dir
        self.stale_after = stale_after
        self.version = version  # the database's schema version (a reader leaves an older one as it is)
        self._conn = conn
        self._lock = threading.RLock()  # between this process's threads
        self._run_lock = run_lock  # between processes: a writer's hold on the run folder, released by close()

    # ---- opening ------------------------------------------------------------------------------
    @classmethod
    def create(
        cls, run_dir: str | Path, name: str | None = None, config: dict | None = None, model: str = "",
        lock: RunLock | None = None,
    ) -> "RunStore":
        """Start a new run: status "running", this process's pid and host, start time now.

        The store holds the run's lock until it is closed: ``lock``, one this process took already (the
        trainer takes it before loading the model), or a new one; a run another process writes is refused."""
        run_dir = Path(run_dir)
        db_path = run_dir / DB_NAME
        if db_path.exists():
            if lock is not None:
                lock.release()
            raise KitaeError(f"run '{run_dir.name}' already exists ({db_path}); resume it or choose another run name")
        lock = lock or RunLock.acquire(run_dir)
        try:
            store = cls(run_dir, _connect(db_path), run_lock=lock)
        except BaseException:
            lock.release()
            raise
        now = time.time()
        try:
            with store._write() as db:
                create_schema(db)
                db.execute(
                    "INSERT INTO run (id, name, model, config, status, pid, host, started_at, heartbeat_at) "
                    "VALUES (1, ?, ?, ?, 'running', ?, ?, ?, ?)",
                    (name or run_dir.name, model, to_json(config or {}), os.getpid(), this_host(), now, now),
                )
        except BaseException:
            store.close()
            raise
        return store

    @classmethod
    def open(cls, run_dir: str | Path, stale_after: float = STALE_AFTER_S, read_only: bool = False,
             lock: RunLock | None = None) -> "RunStore":
        """Open an existing run, to resume it or to read it. Raises KitaeError naming the runs that exist.

        ``read_only``: for readers (`kitae runs`, the web page); also works on read-only storage, leaves a
        database written by an older kitae as it is instead of upgrading it, and takes no lock. A writer holds
        the run's lock until it is closed (``lock``: as for :meth:`create`)."""
        run_dir = Path(run_dir)
        db_path = run_dir / DB_NAME
        if not db_path.is_file():
            if lock is not None:
                lock.release()
            raise run_not_found(run_dir.parent, run_dir.name)
        if not read_only:
            lock = lock or RunLock.acquire(run_dir)
        conn = None
        try:
            conn = _connect(db_path, read_only=read_only)
            version = check_version(conn, db_path, upgrade=not read_only)
        except BaseException as exc:
            if conn is not None:
                conn.close()
            if lock is not None:
                lock.release()
            if isinstance(exc, sqlite3.Error):
                raise sqlite_failure(exc, db_path) from exc
            raise
        return cls(run_dir, conn, stale_after, version, run_lock=lock)

    @property
    def db_path(self) -> Path:
        return self.run_dir / DB_NAME

    def close(self) -> None:
        """Close the database and, for a writer, let the run's lock go."""
        with self._lock:
            try:
                self._conn.close()
            finally:
                if self._run_lock is not None:
                    self._run_lock.release()

    def __enter__(self) -> "RunStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- writing ------------------------------------------------------------------------------
    @contextmanager
    def _write(self) -> Iterator["_Writer"]:
        """One transaction; it also refreshes the heartbeat, so a logging trainer is a live trainer."""
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    yield _Writer(self._conn)
                    self._conn.execute("UPDATE run SET heartbeat_at = ? WHERE id = 1", (time.time(),))
                    self._conn.execute("COMMIT")
                except BaseException:
                    if self._conn.in_transaction:  # SQLite rolls back on its own after some errors (a full disk)
                        self._conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise sqlite_failure(exc, self.db_path) from exc

    def mark_running(self) -> None:
        """On resume: status "running" again, owned by this process."""
        with self._write() as db:
            db.execute(
                "UPDATE run SET status = 'running', pid = ?, host = ?, finished_at = NULL, summary = NULL WHERE id = 1",
                (os.getpid(), this_host()),
            )

    def heartbeat(self) -> None:
        with self._write():
            pass

    def log_metrics(self, step: int, metrics: dict[str, Any]) -> None:
        """Per-step scalars. Logging a key again at the same step replaces its value; NaN is stored as NULL."""
        rows = [(key, int(step), value) for key, value in _numbers(step, metrics).items()]
        with self._write() as db:
            db.executemany(
                "INSERT INTO metrics (key, step, value) VALUES (?, ?, ?) "
                "ON CONFLICT (key, step) DO UPDATE SET value = excluded.value",
                rows,
            )

    def log_groups(self, step: int, groups: list[GroupRecord]) -> None:
        """Every group of a step with its samples. A group logged again (same step and index) is replaced."""
        with self._write() as db:
            for group in groups:
                self._replace_group(db, int(step), group)

    def _replace_group(self, db: "_Writer", step: int, group: GroupRecord) -> None:
        key = (step, group.group_index)
        old = db.execute("SELECT id FROM groups WHERE step = ? AND group_index = ?", key).fetchone()
        if old is not None:
            db.execute("DELETE FROM samples WHERE group_id = ?", (old["id"],))
            db.execute("DELETE FROM groups WHERE id = ?", (old["id"],))
        cursor = db.execute(
            "INSERT INTO groups (step, group_index, prompt, prompt_key, messages, reference, item, n_samples, "
            "n_scored, n_truncated, reward_mean, reward_std) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            _group_row(step, group),
        )
        db.executemany(
            "INSERT INTO samples (group_id, sample_index, step, text, completion_tokens, finish_reason, reward, "
            "advantage, scores, reasons, sub_scores, errors, policy_version, thinking_open, turns, sampled_tokens, "
            "trained_spans, episode) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(cursor.lastrowid, i, step, *_sample_row(s)) for i, s in enumerate(group.samples)],
        )

    def log_eval(self, step: int, metrics: dict[str, Any], samples: list[dict] | None = None) -> None:
        """An evaluation at `step`: its metrics and, optionally, the graded samples. Replaces an earlier one."""
        samples = samples or []
        values = _numbers(step, metrics)
        with self._write() as db:
            db.execute(
                "INSERT OR REPLACE INTO evals (step, metrics, n_samples, logged_at) VALUES (?, ?, ?, ?)",
                (int(step), to_json(values), len(samples), time.time()),
            )
            db.execute("DELETE FROM eval_samples WHERE step = ?", (int(step),))
            db.executemany(
                "INSERT INTO eval_samples (step, sample_index, data) VALUES (?, ?, ?)",
                [(int(step), i, to_json(sample)) for i, sample in enumerate(samples)],
            )

    def log_event(self, step: int, kind: str, message: str, data: dict | None = None) -> None:
        """Something that happened to the run itself (one of EVENT_KINDS) when it stood at `step`, with a
        one-line message for people. Events are never truncated: they are the run's own history."""
        with self._write() as db:
            self._insert_event(db, step, kind, message, data or {})

    def set_meta(self, key: str, value: str) -> None:
        """Set a value of the meta table (see :meth:`meta_value`)."""
        with self._write() as db:
            db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    def change_config(self, step: int, config: dict, message: str, changes: list[dict]) -> None:
        """The config changed on resume from `step`: save the new config and a "config_changed" event listing
        `changes` (``{"field", "old", "new"}`` each), in one transaction."""
        with self._write() as db:
            db.execute("UPDATE run SET config = ? WHERE id = 1", (to_json(config),))
            self._insert_event(db, step, "config_changed", message, {"changes": changes})

    @staticmethod
    def _insert_event(db: sqlite3.Connection, step: int, kind: str, message: str, data: dict) -> None:
        if kind not in EVENT_KINDS:
            raise KitaeError(unknown_name_message("event kind", kind, list(EVENT_KINDS)))
        db.execute(
            "INSERT INTO events (step, kind, message, data, logged_at) VALUES (?, ?, ?, ?, ?)",
            (int(step), kind, message, to_json(data), time.time()),
        )

    def backup(self, dest: str | Path) -> None:
        """Copy the whole database, consistently, to `dest` (a new file), e.g. before a restart from step 0."""
        dest = Path(dest)
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            target = sqlite3.connect(dest)
            try:
                with self._lock:
                    self._conn.backup(target)
            finally:
                target.close()
        except sqlite3.Error as exc:
            raise sqlite_failure(exc, dest) from exc
        except OSError as exc:
            raise write_failure(exc, dest, self.run_dir) from exc

    def truncate_after(self, step: int) -> None:
        """Delete every row logged for a step after `step`: resuming from checkpoint step-N calls it with N."""
        with self._write() as db:
            for table in ("metrics", "samples", "groups", "evals", "eval_samples"):
                db.execute(f"DELETE FROM {table} WHERE step > ?", (int(step),))

    def finish(self, status: str = "finished", summary: dict | None = None) -> None:
        """Mark the run over: "finished", "crashed" (an exception) or "stopped" (a person stopped it)."""
        if status not in FINAL_STATUSES:
            raise KitaeError(f"finish status '{status}' is not one of {', '.join(FINAL_STATUSES)}")
        with self._write() as db:
            db.execute(
                "UPDATE run SET status = ?, finished_at = ?, summary = ? WHERE id = 1",
                (status, time.time(), None if summary is None else to_json(summary)),
            )


class _Writer:
    """The connection as a write transaction hands it out: every text parameter is made valid UTF-8 first
    (:func:`valid_text`), so no text the trainer passes on (a completion, a grader's error) can fail a write."""

    def __init__(self, conn: sqlite3.Connection):
        self._conn = conn

    def execute(self, sql: str, params: tuple | list = ()) -> sqlite3.Cursor:
        return self._conn.execute(sql, _valid(params))

    def executemany(self, sql: str, rows: Iterable[tuple | list]) -> sqlite3.Cursor:
        return self._conn.executemany(sql, (_valid(row) for row in rows))


def _valid(params: tuple | list) -> tuple:
    return tuple(valid_text(p) if isinstance(p, str) else p for p in params)


def _numbers(step: int, metrics: dict[str, Any]) -> dict[str, float | None]:
    """Metric values as floats, or an error that names the metric and step."""
    out = {}
    for key, value in metrics.items():
        try:
            out[key] = scalar(value)
        except (TypeError, ValueError):
            raise KitaeError(f"metric '{key}' at step {step} is {value!r}, not a number or None") from None
    return out


def _group_row(step: int, group: GroupRecord) -> tuple:
    stats = group_stats(group.samples)
    return (
        step,
        group.group_index,
        group.prompt,
        prompt_key(group.prompt),
        to_json(group.messages),
        group.reference,
        to_json(group.item),
        stats.n_samples,
        stats.n_scored,
        stats.n_truncated,
        stats.reward_mean,
        stats.reward_std,
    )


def _sample_row(sample: SampleRecord) -> tuple:
    return (
        sample.text,
        int(sample.completion_tokens),
        sample.finish_reason,
        scalar(sample.reward),
        float(sample.advantage),
        to_json(sample.scores),
        to_json(sample.reasons),
        to_json(sample.sub_scores),
        to_json(sample.errors),
        None if sample.policy_version is None else int(sample.policy_version),
        int(bool(sample.thinking_open)),
        *_episode_cells(sample),
    )


def _episode_cells(sample: SampleRecord) -> tuple:
    """turns, sampled_tokens, trained_spans, episode: NULL each for a single-turn sample (all four NULL then)."""
    return (
        None if sample.episode is None else sample.n_turns,
        None if sample.sampled_tokens is None else int(sample.sampled_tokens),
        None if sample.trained_spans is None else to_json([[int(a), int(b)] for a, b in sample.trained_spans]),
        None if sample.episode is None else to_json(sample.episode),
    )


def _connect(db_path: Path, read_only: bool = False) -> sqlite3.Connection:
    try:
        return connect(db_path, read_only=read_only)
    except sqlite3.Error as exc:
        raise sqlite_failure(exc, db_path) from exc


def available_runs(runs_dir: Path) -> list[str]:
    """Names of the folders under `runs_dir` that hold a run.db."""
    if not runs_dir.is_dir():
        return []
    return sorted(p.name for p in runs_dir.iterdir() if (p / DB_NAME).is_file())


def run_not_found(runs_dir: Path, name: str) -> KitaeError:
    if not runs_dir.is_dir():
        return KitaeError(f"no run '{name}': the runs folder '{runs_dir}' does not exist")
    names = available_runs(runs_dir)
    if not names:
        return KitaeError(f"no run '{name}' in '{runs_dir}': that folder holds no runs yet")
    return KitaeError(f"no run '{name}' in '{runs_dir}'" + _did_you_mean(name, names) + f" (runs: {', '.join(names)})")


def _did_you_mean(name: str, names: list[str]) -> str:
    hint = closest(name, names)
    return f"; did you mean '{hint}'?" if hint else ""
