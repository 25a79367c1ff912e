"""The run.db schema (version 5), the connection settings and the version check.

The schema is the contract between training and the web page, documented in docs/run_store.md. Any change
to a table bumps SCHEMA_VERSION, updates that document and adds a migration to MIGRATIONS; a kitae that
meets a newer database refuses to open it instead of misreading it.

Connections use WAL journaling, so readers (the web page, `kitae runs`) read while the trainer writes, and
`synchronous=FULL`, so a committed step survives a killed process and a lost machine alike; one fsync per
step is noise next to a training step.

Readers open run.db read-only (``mode=ro``), so a run on read-only storage can be shown. Where SQLite cannot
keep its shared-memory file (run.db-shm) beside a read-only run.db, the database is opened ``immutable``: it
cannot change under the reader, because nothing can write there.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Callable
from urllib.parse import quote

from kitae.errors import KitaeError
from kitae.store.failures import damaged, sqlite_failure

SCHEMA_VERSION = 5
BUSY_TIMEOUT_MS = 10_000

SCHEMA = """
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE run (
    id           INTEGER PRIMARY KEY CHECK (id = 1),
    name         TEXT NOT NULL,
    model        TEXT NOT NULL,
    config       TEXT NOT NULL,
    status       TEXT NOT NULL,
    pid          INTEGER,
    host         TEXT,
    started_at   REAL NOT NULL,
    heartbeat_at REAL NOT NULL,
    finished_at  REAL,
    summary      TEXT
);
CREATE TABLE metrics (
    key   TEXT NOT NULL,
    step  INTEGER NOT NULL,
    value REAL,
    PRIMARY KEY (key, step)
) WITHOUT ROWID;
CREATE INDEX metrics_by_step ON metrics (step);
CREATE TABLE groups (
    id          INTEGER PRIMARY KEY,
    step        INTEGER NOT NULL,
    group_index INTEGER NOT NULL,
    prompt      TEXT NOT NULL,
    prompt_key  TEXT NOT NULL,
    messages    TEXT NOT NULL,
    reference   TEXT,
    item        TEXT NOT NULL,
    n_samples   INTEGER NOT NULL,
    n_scored    INTEGER NOT NULL,
    n_truncated INTEGER NOT NULL,
    reward_mean REAL,
    reward_std  REAL,
    UNIQUE (step, group_index)
);
CREATE INDEX groups_by_prompt ON groups (prompt_key, step);
CREATE INDEX groups_by_reward ON groups (reward_mean);
CREATE INDEX groups_by_spread ON groups (reward_std);
CREATE TABLE samples (
    group_id          INTEGER NOT NULL REFERENCES groups (id),
    sample_index      INTEGER NOT NULL,
    step              INTEGER NOT NULL,
    text              TEXT NOT NULL,
    completion_tokens INTEGER NOT NULL,
    finish_reason     TEXT NOT NULL,
    reward            REAL,
    advantage         REAL NOT NULL,
    scores            TEXT NOT NULL,
    reasons           TEXT NOT NULL,
    sub_scores        TEXT NOT NULL,
    errors            TEXT NOT NULL,
    policy_version    INTEGER,
    thinking_open     INTEGER NOT NULL DEFAULT 0,
    turns             INTEGER,
    sampled_tokens    INTEGER,
    trained_spans     TEXT,
    episode           TEXT,
    PRIMARY KEY (group_id, sample_index)
) WITHOUT ROWID;
CREATE INDEX samples_by_step ON samples (step);
CREATE TABLE evals (
    step      INTEGER PRIMARY KEY,
    metrics   TEXT NOT NULL,
    n_samples INTEGER NOT NULL,
    logged_at REAL NOT NULL
);
CREATE TABLE eval_samples (
    step         INTEGER NOT NULL,
    sample_index INTEGER NOT NULL,
    data         TEXT NOT NULL,
    PRIMARY KEY (step, sample_index)
) WITHOUT ROWID;
CREATE TABLE events (
    id        INTEGER PRIMARY KEY,
    step      INTEGER NOT NULL,
    kind      TEXT NOT NULL,
    message   TEXT NOT NULL,
    data      TEXT NOT NULL,
    logged_at REAL NOT NULL
);
"""
EVENTS_TABLE = SCHEMA[SCHEMA.index("CREATE TABLE events") :]


def _add_events(conn: sqlite3.Connection) -> None:
    """Version 2: the events table (resumes, restarts, skipped checkpoints, config changes)."""
    conn.execute(EVENTS_TABLE.strip().rstrip(";"))


def _add_policy_version(conn: sqlite3.Connection) -> None:
    """Version 3: ``samples.policy_version``, the policy version that sampled each one (async rollouts; NULL for
    samples of the policy being trained, and for every sample logged before version 3)."""
    conn.execute("ALTER TABLE samples ADD COLUMN policy_version INTEGER")


def _add_thinking_open(conn: sqlite3.Connection) -> None:
    """Version 4: ``samples.thinking_open``, 1 when the sample's prompt opened a ``<think>`` block its text starts
    inside (kitae.chat.opens_thinking; 0 for every sample logged before version 4)."""
    conn.execute("ALTER TABLE samples ADD COLUMN thinking_open INTEGER NOT NULL DEFAULT 0")


EPISODE_COLUMNS = {"turns": "INTEGER", "sampled_tokens": "INTEGER", "trained_spans": "TEXT", "episode": "TEXT"}


def _add_episodes(conn: sqlite3.Connection) -> None:
    """Version 5: an agent's trajectory (kitae.rollout.trajectory): ``samples.turns``, ``sampled_tokens``,
    ``trained_spans`` and ``episode``, all NULL for a single-turn sample (and for every sample logged before
    version 5, which were all single-turn)."""
    for column, kind in EPISODE_COLUMNS.items():
        conn.execute(f"ALTER TABLE samples ADD COLUMN {column} {kind}")


# version v -> function that upgrades a database at version v to v + 1, inside one transaction.
MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {1: _add_events, 2: _add_policy_version,
                                                               3: _add_thinking_open, 4: _add_episodes}


def connect(db_path: Path, read_only: bool = False) -> sqlite3.Connection:
    """A connection in autocommit mode; callers group writes with explicit BEGIN IMMEDIATE ... COMMIT.

    ``read_only``: for readers; works on read-only storage too (see the module docstring)."""
    if read_only:
        return _connect_read_only(db_path)
    conn = _sqlite(str(db_path))
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    return conn


def _sqlite(target: str, uri: bool = False) -> sqlite3.Connection:
    conn = sqlite3.connect(target, uri=uri, isolation_level=None, check_same_thread=False,
                           timeout=BUSY_TIMEOUT_MS / 1000)
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    return conn


def _connect_read_only(db_path: Path) -> sqlite3.Connection:
    url = "file:" + quote(str(Path(db_path).resolve()))
    conn = _sqlite(url + "?mode=ro", uri=True)
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # SQLite opens lazily: fail here, not later
        return conn
    except sqlite3.OperationalError:  # a WAL database whose -shm file cannot be created here
        conn.close()
        if os.access(Path(db_path).parent, os.W_OK):
            raise
    except sqlite3.DatabaseError:  # not a database at all: read_version says so
        return conn
    wal = db_path.with_name(db_path.name + "-wal")
    if wal.exists() and wal.stat().st_size > 0:
        raise KitaeError(
            f"{db_path}: the last steps of this run are in {wal.name}, which SQLite can read only with "
            f"{db_path.name}-shm beside it, and this folder is read-only; copy the run folder to writable "
            "storage to read it"
        )
    return _sqlite(url + "?immutable=1", uri=True)


def create_schema(conn: sqlite3.Connection) -> None:
    """Create every table; call inside the transaction that also writes the run row, so that a run.db
    exists either complete or empty (executescript would commit on its own, so statements go one by one)."""
    for statement in SCHEMA.split(";"):
        if statement.strip():
            conn.execute(statement)
    conn.execute("INSERT INTO meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))


def read_version(conn: sqlite3.Connection, db_path: Path) -> int:
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except sqlite3.DatabaseError as exc:
        if damaged(exc):
            raise sqlite_failure(exc, db_path) from exc
        raise KitaeError(f"{db_path}: not a kitae run store ({exc})") from exc
    if row is None:
        raise KitaeError(f"{db_path}: not a kitae run store (meta table has no schema_version)")
    return int(row["value"])


def check_version(conn: sqlite3.Connection, db_path: Path, upgrade: bool = True) -> int:
    """Upgrade an older database in place (unless ``upgrade`` is False: a reader reads it as it is); refuse a
    newer one with a message that says what to do. Returns the version the database is at now."""
    version = read_version(conn, db_path)
    if version > SCHEMA_VERSION:
        raise KitaeError(
            f"{db_path}: run store schema version {version} is newer than this kitae reads "
            f"(up to {SCHEMA_VERSION}); upgrade kitae (pip install -U kitae) to open this run"
        )
    while upgrade and version < SCHEMA_VERSION:
        if version not in MIGRATIONS:
            raise KitaeError(f"{db_path}: run store schema version {version} is unknown; cannot upgrade it")
        conn.execute("BEGIN IMMEDIATE")
        MIGRATIONS[version](conn)
        version += 1
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(version),))
        conn.execute("COMMIT")
    return version
