"""Why a run's files could not be written or read, said in one line for people: what, which file, the fix.

A full disk, a read-only folder and a damaged run.db reach kitae as an OSError, a SQLite error or a library's
own error (torch and safetensors wrap the OSError of a failed write in theirs); these turn each into a
KitaeError, which the CLI prints as one line.
"""

from __future__ import annotations

import errno
import os
import resource
import sqlite3
from pathlib import Path

from kitae.errors import KitaeError

NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)  # full disk, quota, file-size limit
READ_ONLY = (errno.EROFS, errno.EACCES, errno.EPERM)
# the words a library's error uses for those when it does not hand the OSError on
_NO_SPACE_WORDS = ("no space left", "disk quota", "file too large", "disk is full", "storagefull")


def resume_hint(run_dir: Path) -> str:
    return f"kitae train --resume {run_dir}"


def no_space(where: Path | str, reason: str, run_dir: Path) -> KitaeError:
    return KitaeError(f"cannot write {where}: {reason} (the disk is full, or a quota or file-size limit was hit); "
                      f"free space there, then go on from the last checkpoint with `{resume_hint(run_dir)}`")


def read_only(where: Path | str, reason: str) -> KitaeError:
    return KitaeError(f"{where} is read-only ({reason}): a run writes its lock, run store and checkpoints in its "
                      "folder; choose a writable output_dir (`--set output_dir=DIR`), or copy the run folder to "
                      "writable storage and resume the copy")


def write_failure(exc: BaseException, where: Path | str, run_dir: Path) -> KitaeError:
    """`exc` (an OSError, or a library's error that wraps one) raised while writing `where` in run `run_dir`."""
    if isinstance(exc, OSError) and exc.errno is not None:
        where = exc.filename or where
        reason = exc.strerror or str(exc)
        if exc.errno in NO_SPACE:
            return no_space(where, reason, run_dir)
        if exc.errno in READ_ONLY:
            return read_only(where, reason)
    reason = first_line(exc)
    words = reason.lower()
    if any(word in words or word in words.replace(" ", "") for word in _NO_SPACE_WORDS):
        return no_space(where, reason, run_dir)
    short = space_problem(Path(where))
    if short:
        return no_space(where, f"{reason}; {short}", run_dir)
    return KitaeError(f"cannot write {where}: {reason}; free space on the disk that holds {run_dir} or check it, "
                      f"then go on from the last checkpoint with `{resume_hint(run_dir)}`")


def damaged(exc: sqlite3.Error) -> bool:
    """The error says the database file itself is broken (bad pages, or not a SQLite file at all)."""
    name, text = getattr(exc, "sqlite_errorname", "") or "", str(exc)
    return name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or "malformed" in text or "not a database" in text


def space_problem(path: Path) -> str | None:
    """What would make a write under `path` fail for room, when it does: the disk has (almost) no space left, or
    this process may only write files up to a size (``ulimit -f``). For errors that do not say why (torch's)."""
    folder = path
    while not folder.is_dir() and folder != folder.parent:
        folder = folder.parent
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    free = st.f_bavail * st.f_frsize
    if free < 1 << 20:
        return f"{free} bytes are left on the disk that holds {folder}"
    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if soft != resource.RLIM_INFINITY:
        return f"this process may write files of at most {soft} bytes (ulimit -f): file too large"
    return None


def is_write_error(exc: BaseException) -> bool:
    """An OSError, or a library's error for a failed write (torch: "file write failed", safetensors: "IoError")."""
    if isinstance(exc, OSError):
        return True
    words = str(exc).lower()
    return any(w in words or w in words.replace(" ", "") for w in (*_NO_SPACE_WORDS, "write failed", "ioerror"))


def sqlite_failure(exc: sqlite3.Error, db_path: Path) -> KitaeError:
    """A SQLite error on run.db, by what the person can do about it."""
    name, text = getattr(exc, "sqlite_errorname", "") or "", str(exc)
    run_dir = db_path.parent
    if damaged(exc):
        return KitaeError(f"{db_path} is damaged (SQLite: {text}); kitae cannot read this run store: restore "
                          f"{db_path.name} from a copy (a restart keeps one under {run_dir / 'restarts'}/), or move "
                          "the run folder aside and start the run again")
    if name.startswith("SQLITE_FULL") or "disk is full" in text:
        return no_space(db_path, f"SQLite: {text}", run_dir)
    if name.startswith("SQLITE_IOERR") or "disk I/O error" in text:
        return KitaeError(f"cannot write {db_path}: SQLite: {text} (a full disk, a file-size limit or a failing "
                          f"disk); free space or check the disk, then go on with `{resume_hint(run_dir)}`")
    if name.startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN")) or "readonly" in text or "unable to open" in text:
        return read_only(db_path, f"SQLite: {text}")
    if name.startswith("SQLITE_BUSY") or "locked" in text:
        return KitaeError(f"{db_path} stayed locked by another process for over 10 s (SQLite: {text}); close "
                          "whatever holds a write transaction on it (a sqlite3 shell?) and try again")
    return KitaeError(f"{db_path}: SQLite: {text}")


class StoreDamaged(KitaeError):
    """A run.db that SQLite reads but kitae cannot: a row it needs is gone, or a cell is not what kitae wrote
    (hand-edited JSON, text where a number goes). The message names the file, table, row, column and the fix."""


def missing_run_row(db_path: Path) -> StoreDamaged:
    return StoreDamaged(f"{db_path}: table run has no row (id 1): the run's own record (its name, config and "
                        f"status) was deleted outside kitae; restore {db_path.name} from a copy (a restart keeps one "
                        f"under {db_path.parent / 'restarts'}/), or move the run folder aside and start the run again")


def damaged_cell(db_path: Path, table: str, key: dict[str, object], column: str, problem: str,
                 fix_value: str) -> StoreDamaged:
    """Cell `column` of the `table` row whose key columns are `key` holds `problem`; `fix_value` is an SQL
    literal kitae would accept there (e.g. ``'{}'``), for the one-line repair the message offers."""
    where = " AND ".join(f"{k} = {v!r}" for k, v in key.items())
    row = ", ".join(f"{k} {v}" for k, v in key.items())
    repair = f'sqlite3 {db_path} "UPDATE {table} SET {column} = {fix_value} WHERE {where}"'
    return StoreDamaged(f"{db_path}: table {table}, row {row}, column {column}: {problem}; the run store was edited "
                        f"or damaged outside kitae: restore {db_path.name} from a copy, or repair that cell "
                        f"({repair})")


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__
