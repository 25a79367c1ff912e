"""The judge's response cache: a reply is stored under a hash of the request that produced it.

Re-grading the same group sends the same request (the judge derives its shuffles and delimiters from the
group's content, see kitae/judge/group.py), so it is answered from here and costs nothing. Two layers:

- in memory, per process, bounded (oldest entries dropped first);
- optionally on disk: one SQLite file ``DIR/chat_cache.sqlite`` (table ``replies(key, reply, created)``,
  WAL mode), shared by processes and kept across runs. Delete the file to start over.

The key covers the endpoint URL and the whole JSON body (model, messages, response_format, sampling
parameters), canonicalized, so any change in the request is a miss. Only successful replies are stored, and
a caller can drop one it found unusable (the judge drops replies that fail its checks).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

CACHE_FILE = "chat_cache.sqlite"


def request_key(url: str, body: dict[str, Any]) -> str:
    """sha256 of the endpoint and the canonical JSON body."""
    text = json.dumps({"url": url, "body": body}, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class ResponseCache:
    """``get(key)`` / ``put(key, reply)`` over memory and an optional SQLite file; thread-safe."""

    def __init__(self, directory: str | Path | None = None, max_memory: int = 10_000):
        self.max_memory = max_memory
        self._memory: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self.path = None if directory is None else Path(directory) / CACHE_FILE
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=30, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS replies (key TEXT PRIMARY KEY, reply TEXT, created REAL)")

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            if key in self._memory:
                self._memory.move_to_end(key)
                return self._memory[key]
            if self._db is None:
                return None
            row = self._db.execute("SELECT reply FROM replies WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        reply = json.loads(row[0])
        self._remember(key, reply)
        return reply

    def put(self, key: str, reply: dict[str, Any]) -> None:
        self._remember(key, reply)
        if self._db is not None:
            text = json.dumps(reply, ensure_ascii=False)
            with self._lock:
                self._db.execute("INSERT OR REPLACE INTO replies VALUES (?, ?, ?)", (key, text, time.time()))

    def delete(self, key: str) -> None:
        with self._lock:
            self._memory.pop(key, None)
            if self._db is not None:
                self._db.execute("DELETE FROM replies WHERE key = ?", (key,))

    def _remember(self, key: str, reply: dict[str, Any]) -> None:
        with self._lock:
            self._memory[key] = reply
            self._memory.move_to_end(key)
            while len(self._memory) > self.max_memory:
                self._memory.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            if self._db is not None:
                return self._db.execute("SELECT COUNT(*) FROM replies").fetchone()[0]
            return len(self._memory)

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
