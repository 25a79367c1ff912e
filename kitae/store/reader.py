"""The reading half of RunStore, for `kitae runs` and the web page.

Every method that can return many rows pages with ``limit``/``offset`` (or a step range for metric series)
and is served by an index, so a run with 10,000 steps and 100,000 samples reads as fast as a small one.
Each call reads one snapshot: a step that the trainer is committing is seen whole or not at all; several
calls share one inside ``with store.snapshot():``.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

from kitae.errors import ConfigError
from kitae.registry import unknown_name_message
from kitae.sandbox import unsandboxed
from kitae.store.failures import StoreDamaged, damaged_cell, missing_run_row, sqlite_failure
from kitae.store.records import (
    EvalRow,
    GroupRow,
    RunSummary,
    SampleRecord,
    eval_score,
    from_json,
    prompt_key,
)
from kitae.store.schema import EPISODE_COLUMNS
from kitae.store.status import effective_status

# order name -> ORDER BY; ties go to the newest step, so the worst groups of a long run are recent ones.
GROUP_ORDERS = {
    "worst": "reward_mean IS NULL, reward_mean ASC, step DESC, group_index ASC",  # lowest mean reward first
    "step": "step DESC, group_index ASC",  # newest step first
    "variance": "reward_std IS NULL, reward_std DESC, step DESC, group_index ASC",  # widest spread first
}
# filter name -> WHERE clause
GROUP_FILTERS = {
    "all": "1",
    "zero_variance": "reward_std = 0",  # every scored sample got the same reward: no learning signal
    "truncated": "n_truncated > 0",  # at least one sample hit the length limit
}
GROUP_COLUMNS = (
    "id, step, group_index, prompt, messages, reference, item, n_samples, n_scored, n_truncated, reward_mean, "
    "reward_std"
)

# table -> (its key columns, {JSON column: the JSON type kitae writes there}): what check_cells looks through
JSON_CELLS = {
    "run": (("id",), {"config": "object", "summary": "object"}),
    "groups": (("id",), {"messages": "array", "item": "object"}),
    "samples": (("group_id", "sample_index"), {**{c: "object" for c in ("scores", "reasons", "sub_scores", "errors")},
                                               "trained_spans": "array", "episode": "object"}),
    "evals": (("step",), {"metrics": "object"}),
    "eval_samples": (("step", "sample_index"), {"data": "object"}),
    "events": (("id",), {"data": "object"}),
}


class RunReader:
    """Read queries on an open run.db. Mixed into RunStore; expects ``_conn``, ``_lock``, ``run_dir``."""

    _conn: sqlite3.Connection
    _lock: threading.RLock
    run_dir: Path
    db_path: Path
    stale_after: float
    version: int

    _snapshot_depth = 0

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Make every read inside the block see the same state, e.g. to render one consistent page.

        The trainer's commits are not blocked (WAL); they become visible after the block."""
        with self._lock:
            with self._read():
                self._snapshot_depth += 1
                try:
                    yield
                finally:
                    self._snapshot_depth -= 1

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._snapshot_depth:
                yield self._conn
                return
            try:
                self._conn.execute("BEGIN")
                try:
                    yield self._conn
                finally:
                    if self._conn.in_transaction:
                        self._conn.execute("COMMIT")
            except sqlite3.Error as exc:  # a damaged run.db: one line that names it, not SQLite's traceback
                raise sqlite_failure(exc, self.db_path) from exc

    # ---- the run ------------------------------------------------------------------------------
    def _run_row(self, db: sqlite3.Connection) -> sqlite3.Row:
        row = db.execute("SELECT * FROM run WHERE id = 1").fetchone()
        if row is None:
            raise missing_run_row(self.db_path)
        return row

    def _json(self, row: sqlite3.Row, table: str, column: str, key: dict[str, Any], kind: type = dict,
              fix_value: str | None = None) -> Any:
        """The JSON in `row[column]`, which kitae wrote as a `kind` (dict or list). Anything else there (a
        hand-edited ``{not json``) is StoreDamaged naming the file, table, row (`key`), column and a repair
        (`fix_value`, default an empty object or array)."""
        text = row[column]
        try:
            value = from_json(text) if isinstance(text, str) else text
        except json.JSONDecodeError as exc:
            problem = f"not JSON ({exc.msg} at character {exc.pos}: {text[:40]!r})"
        else:
            if isinstance(value, kind):
                return value
            problem = f"expected a JSON {'object' if kind is dict else 'array'}, got {text!r:.40}"
        fix = fix_value or ("'{}'" if kind is dict else "'[]'")
        raise damaged_cell(self.db_path, table, key, column, problem, fix)

    def _number(self, value: Any, key: dict[str, Any], table: str = "metrics", column: str = "value") -> Any:
        """A stored metric value: a number or NULL; text there (hand-edited) is StoreDamaged naming the cell."""
        if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
            return value
        raise damaged_cell(self.db_path, table, key, column, f"expected a number or NULL, got {value!r:.40}", "NULL")

    def _status(self, row: sqlite3.Row) -> str:
        return effective_status(row["status"], row["pid"], row["host"], row["heartbeat_at"], self.stale_after)

    @property
    def status(self) -> str:
        """"running", "finished", "crashed" or "stopped"; a running run whose trainer died reads "crashed"."""
        with self._read() as db:
            return self._status(self._run_row(db))

    @property
    def config(self) -> dict:
        with self._read() as db:
            return self._json(self._run_row(db), "run", "config", {"id": 1})

    def last_step(self) -> int | None:
        """The highest step with logged metrics; None before the first."""
        with self._read() as db:
            return db.execute("SELECT max(step) FROM metrics").fetchone()[0]

    def last_logged_step(self) -> int | None:
        """The highest step with anything logged for it (metrics, groups or an eval); None when nothing is."""
        with self._read() as db:
            return db.execute(
                "SELECT max(s) FROM (SELECT max(step) AS s FROM metrics UNION ALL SELECT max(step) FROM groups "
                "UNION ALL SELECT max(step) FROM evals)"
            ).fetchone()[0]

    def brief(self) -> RunSummary:
        """The one-line summary that `kitae runs list` shows."""
        with self._read() as db:
            row = self._run_row(db)
            reward = db.execute(
                "SELECT step, value FROM metrics WHERE key = 'reward' ORDER BY step DESC LIMIT 1").fetchone()
            last_eval = db.execute("SELECT step, metrics FROM evals ORDER BY step DESC LIMIT 1").fetchone()
            return RunSummary(
                name=row["name"],
                path=str(self.run_dir),
                status=self._status(row),
                model=row["model"],
                steps=db.execute("SELECT max(step) FROM metrics").fetchone()[0],
                reward=self._number(reward["value"], {"key": "reward", "step": reward["step"]}) if reward else None,
                eval_score=eval_score(self._eval_metrics(last_eval)) if last_eval else None,
                started_at=row["started_at"],
                updated_at=row["heartbeat_at"],
            )

    def summary(self) -> dict[str, Any]:
        """Everything `kitae runs show` prints, as plain JSON-ready data."""
        with self._read() as db:
            row = self._run_row(db)
            evals = db.execute("SELECT count(*) FROM evals").fetchone()[0]
            config = self._json(row, "run", "config", {"id": 1})
            return {
                "schema_version": self.version,
                "name": row["name"],
                "path": str(self.run_dir),
                "status": self._status(row),
                "model": row["model"],
                "pid": row["pid"],
                "host": row["host"],
                "started_at": row["started_at"],
                "updated_at": row["heartbeat_at"],
                "finished_at": row["finished_at"],
                "steps": db.execute("SELECT max(step) FROM metrics").fetchone()[0],
                "metrics": self._latest_metrics(db),
                "evals": evals,
                "first_eval": self._eval_dict(db, "ASC"),
                "latest_eval": self._eval_dict(db, "DESC"),
                "final": None if row["summary"] is None else self._json(row, "run", "summary", {"id": 1}),
                "config": config,
                # where the config ran code without isolation (`sandbox: none`): shown wherever the run is
                "unsandboxed": unsandboxed(config),
                "events": self._events(db),
                "alarms": alarm_list(self._events(db)),
            }

    def _latest_metrics(self, db: sqlite3.Connection) -> dict[str, dict[str, Any]]:
        # SQLite takes the bare columns of an aggregate query from the row that holds the max()
        rows = db.execute("SELECT key, max(step) AS step, value FROM metrics GROUP BY key ORDER BY key")
        return {r["key"]: {"step": r["step"], "value": self._number(r["value"], {"key": r["key"], "step": r["step"]})}
                for r in rows}

    def _eval_dict(self, db: sqlite3.Connection, direction: str) -> dict[str, Any] | None:
        row = db.execute(f"SELECT * FROM evals ORDER BY step {direction} LIMIT 1").fetchone()
        if row is None:
            return None
        metrics = self._eval_metrics(row)
        return {"step": row["step"], "score": eval_score(metrics), "metrics": metrics, "n_samples": row["n_samples"]}

    def check_cells(self) -> None:
        """Raise StoreDamaged naming the first cell kitae cannot read back (the run row gone, a JSON column that is
        not JSON of its type, text among the metrics), before a resume builds on the run's history. One pass with
        SQLite's own JSON functions, so it costs a scan, not a parse of every row in Python."""
        with self._read() as db:
            self._run_row(db)
            for table, (keys, columns) in JSON_CELLS.items():
                if table == "events" and self.version < 2:
                    continue
                for column, kind in columns.items():
                    if table == "samples" and column in EPISODE_COLUMNS and self.version < 5:
                        continue
                    self._check_column(db, table, keys, column, kind)
            bad = db.execute("SELECT key, step, value FROM metrics "
                             "WHERE typeof(value) NOT IN ('real', 'integer', 'null') LIMIT 1").fetchone()
            if bad is not None:
                self._number(bad["value"], {"key": bad["key"], "step": bad["step"]})

    def damage(self) -> str | None:
        """What :meth:`check_cells` would raise, as text (None for a sound run.db): `kitae runs show` prints it
        beside what it can show."""
        try:
            self.check_cells()
        except StoreDamaged as exc:
            return str(exc)
        return None

    def _check_column(self, db: sqlite3.Connection, table: str, keys: tuple[str, ...], column: str, kind: str) -> None:
        bad = db.execute(
            f"SELECT {', '.join(keys)}, {column} FROM {table} WHERE {column} IS NOT NULL "
            f"AND (CASE WHEN json_valid({column}) THEN json_type({column}) END) IS NOT ? LIMIT 1", (kind,)
        ).fetchone()
        if bad is not None:  # _json says what is wrong with it (and lets pass what Python reads as kitae wrote it)
            fix = "NULL" if column in EPISODE_COLUMNS else None  # (NULL: the sample reads as a single-turn one)
            self._json(bad, table, column, {k: bad[k] for k in keys}, dict if kind == "object" else list, fix)

    # ---- metrics ------------------------------------------------------------------------------
    def metric_keys(self) -> list[str]:
        with self._read() as db:
            return [r[0] for r in db.execute("SELECT DISTINCT key FROM metrics ORDER BY key")]

    def metrics(
        self, keys: list[str] | None = None, since_step: int = 0, until_step: int | None = None
    ) -> dict[str, list[tuple[int, float | None]]]:
        """key -> [(step, value), ...] for since_step <= step <= until_step, in step order.

        A page of a long series is a step range; the web page polls with since_step = last seen + 1.
        """
        until = until_step if until_step is not None else 2**62
        with self._read() as db:
            keys = keys if keys is not None else [r[0] for r in db.execute("SELECT DISTINCT key FROM metrics")]
            out: dict[str, list[tuple[int, float | None]]] = {}
            for key in keys:
                rows = db.execute(
                    "SELECT step, value FROM metrics WHERE key = ? AND step BETWEEN ? AND ? ORDER BY step",
                    (key, since_step, until),
                )
                out[key] = [(r[0], self._number(r[1], {"key": key, "step": r[0]})) for r in rows]
            return out

    # ---- groups and samples -------------------------------------------------------------------
    def groups(
        self,
        step: int | None = None,
        prompt: str | None = None,
        order: str = "worst",
        filter: str = "all",
        limit: int | None = 50,
        offset: int = 0,
        with_samples: bool = False,
    ) -> list[GroupRow]:
        """A page of groups, of one step and/or one prompt, ordered and filtered by name (see GROUP_ORDERS)."""
        where, params = _group_where(step, prompt, filter)
        if order not in GROUP_ORDERS:
            raise ConfigError("order", unknown_name_message("group order", order, list(GROUP_ORDERS)))
        sql = f"SELECT {GROUP_COLUMNS} FROM groups WHERE {where} ORDER BY {GROUP_ORDERS[order]} LIMIT ? OFFSET ?"
        with self._read() as db:
            rows = db.execute(sql, (*params, -1 if limit is None else limit, offset)).fetchall()
            return [self._group(db, r, with_samples) for r in rows]

    def count_groups(self, step: int | None = None, prompt: str | None = None, filter: str = "all") -> int:
        """How many groups :meth:`groups` pages through with the same arguments."""
        where, params = _group_where(step, prompt, filter)
        with self._read() as db:
            return db.execute(f"SELECT count(*) FROM groups WHERE {where}", params).fetchone()[0]

    def group(self, group_id: int, with_samples: bool = True) -> GroupRow | None:
        with self._read() as db:
            row = db.execute(f"SELECT {GROUP_COLUMNS} FROM groups WHERE id = ?", (group_id,)).fetchone()
            return None if row is None else self._group(db, row, with_samples)

    def group_steps(self) -> list[int]:
        """The steps that have logged groups, in order."""
        with self._read() as db:
            return [r[0] for r in db.execute("SELECT DISTINCT step FROM groups ORDER BY step")]

    def samples(self, group_id: int) -> list[SampleRecord]:
        """The samples of one group, in the order they were logged."""
        with self._read() as db:
            return self._samples(db, group_id)

    def prompt_history(
        self, prompt: str, limit: int | None = 100, offset: int = 0, with_samples: bool = True
    ) -> list[GroupRow]:
        """The same prompt across steps, oldest first: how its samples and rewards changed during training."""
        sql = f"SELECT {GROUP_COLUMNS} FROM groups WHERE prompt_key = ? AND prompt = ? ORDER BY step, group_index"
        with self._read() as db:
            page = (prompt_key(prompt), prompt, -1 if limit is None else limit, offset)
            rows = db.execute(sql + " LIMIT ? OFFSET ?", page)
            return [self._group(db, r, with_samples) for r in rows.fetchall()]

    def _group(self, db: sqlite3.Connection, row: sqlite3.Row, with_samples: bool) -> GroupRow:
        key = {"id": row["id"]}
        return GroupRow(
            id=row["id"],
            step=row["step"],
            group_index=row["group_index"],
            prompt=row["prompt"],
            messages=self._json(row, "groups", "messages", key, list),
            reference=row["reference"],
            item=self._json(row, "groups", "item", key),
            n_samples=row["n_samples"],
            n_scored=row["n_scored"],
            n_truncated=row["n_truncated"],
            reward_mean=row["reward_mean"],
            reward_std=row["reward_std"],
            samples=self._samples(db, row["id"]) if with_samples else [],
        )

    def _samples(self, db: sqlite3.Connection, group_id: int) -> list[SampleRecord]:
        rows = db.execute("SELECT * FROM samples WHERE group_id = ? ORDER BY sample_index", (group_id,))
        return [self._sample(r) for r in rows]

    def _sample(self, r: sqlite3.Row) -> SampleRecord:
        key = {"group_id": r["group_id"], "sample_index": r["sample_index"]}
        return SampleRecord(
            text=r["text"],
            completion_tokens=r["completion_tokens"],
            finish_reason=r["finish_reason"],
            reward=self._number(r["reward"], key, "samples", "reward"),
            advantage=r["advantage"],
            scores=self._json(r, "samples", "scores", key),
            reasons=self._json(r, "samples", "reasons", key),
            sub_scores=self._json(r, "samples", "sub_scores", key),
            errors=self._json(r, "samples", "errors", key),
            policy_version=r["policy_version"] if "policy_version" in r.keys() else None,  # (before version 3)
            thinking_open=bool(r["thinking_open"]) if "thinking_open" in r.keys() else False,  # (before 4)
            **(self._episode_fields(r, key) if "episode" in r.keys() else {}),  # (before 5: single-turn, None)
        )

    def _episode_fields(self, r: sqlite3.Row, key: dict[str, Any]) -> dict[str, Any]:
        """A damaged cell is repaired with NULL: the sample then reads as a single-turn one."""
        def cell(column: str, kind: type) -> Any:
            return None if r[column] is None else self._json(r, "samples", column, key, kind, fix_value="NULL")

        return {"episode": cell("episode", dict), "trained_spans": cell("trained_spans", list),
                "sampled_tokens": self._number(r["sampled_tokens"], key, "samples", "sampled_tokens")}

    # ---- events --------------------------------------------------------------------------------
    def meta_value(self, key: str) -> str | None:
        """A value of the meta table (``schema_version``, marks a kitae sets on a run), None when unset."""
        with self._read() as db:
            row = db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def events(self) -> list[dict[str, Any]]:
        """What happened to the run itself (resumes, restarts, skipped checkpoints, config changes), oldest
        first: ``{step, kind, message, data, logged_at}`` each."""
        with self._read() as db:
            return self._events(db)

    def _events(self, db: sqlite3.Connection) -> list[dict[str, Any]]:
        if self.version < 2:  # written by an older kitae, read as it is: no events table
            return []
        rows = db.execute("SELECT id, step, kind, message, data, logged_at FROM events ORDER BY id")
        return [{"step": r["step"], "kind": r["kind"], "message": r["message"],
                 "data": self._json(r, "events", "data", {"id": r["id"]}), "logged_at": r["logged_at"]} for r in rows]

    # ---- evals --------------------------------------------------------------------------------
    def evals(self, limit: int | None = None, offset: int = 0) -> list[EvalRow]:
        """Every evaluation, oldest first."""
        sql = "SELECT * FROM evals ORDER BY step LIMIT ? OFFSET ?"
        with self._read() as db:
            rows = db.execute(sql, (-1 if limit is None else limit, offset))
            return [EvalRow(r["step"], self._eval_metrics(r), r["n_samples"], r["logged_at"]) for r in rows]

    def _eval_metrics(self, row: sqlite3.Row) -> dict[str, float | None]:
        return self._json(row, "evals", "metrics", {"step": row["step"]})

    def eval_samples(self, step: int, limit: int | None = None, offset: int = 0) -> list[dict]:
        """The samples logged with the evaluation at `step`, in order."""
        sql = "SELECT sample_index, data FROM eval_samples WHERE step = ? ORDER BY sample_index LIMIT ? OFFSET ?"
        with self._read() as db:
            rows = db.execute(sql, (step, -1 if limit is None else limit, offset))
            return [self._json(r, "eval_samples", "data", {"step": step, "sample_index": r["sample_index"]})
                    for r in rows]


def _group_where(step: int | None, prompt: str | None, filter: str) -> tuple[str, tuple]:
    if filter not in GROUP_FILTERS:
        raise ConfigError("filter", unknown_name_message("group filter", filter, list(GROUP_FILTERS)))
    clauses, params = [GROUP_FILTERS[filter]], []
    if step is not None:
        clauses.append("step = ?")
        params.append(step)
    if prompt is not None:
        clauses.append("prompt_key = ? AND prompt = ?")
        params += [prompt_key(prompt), prompt]
    return " AND ".join(clauses), tuple(params)


def alarm_list(events: Iterable[dict]) -> list[dict[str, Any]]:
    """The ``alarm`` events as `kitae runs show --json` lists them: kind, step, message, evidence, groups."""
    return [{"kind": e["data"].get("kind"), "subject": e["data"].get("subject"), "step": e["step"],
             "message": e["message"], "evidence": e["data"].get("evidence", {}), "groups": e["data"].get("groups", []),
             "logged_at": e["logged_at"]} for e in events if e["kind"] == "alarm"]
