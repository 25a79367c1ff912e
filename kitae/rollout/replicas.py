"""Start ``kitae serve model`` replicas as local processes, for tests, benchmarks and quick experiments.

    with Replicas("runs/base-model", 2, threads=1) as replicas:   # two processes, one torch thread each
        ...                                                       # sampling.servers: replicas.urls

Each replica binds 127.0.0.1 on a free port; the URL is read from the first line the server prints. Every process
still running when the block ends is killed. ``Replicas.kill(i)`` ends one early (a replica dying mid-run).
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from kitae.errors import KitaeError

PREFIX = "kitae serve model: serving "


class Replicas:
    """Running ``kitae serve model`` processes; a context manager."""

    def __init__(self, model: str, count: int, threads: int | None = 1, log_dir: str | Path | None = None,
                 extra: list[str] | None = None, start_timeout: float = 300.0):
        self.procs: list[subprocess.Popen] = []
        self.urls: list[str] = []
        env = os.environ | {"PYTHONUNBUFFERED": "1"}
        if threads:
            env |= {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
        try:
            for i in range(count):
                log = open(Path(log_dir) / f"replica-{i}.log", "w") if log_dir else subprocess.DEVNULL
                cmd = [sys.executable, "-m", "kitae.cli.main", "serve", "model", "--model", str(model), "--port", "0",
                       *(extra or [])]
                self.procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=env))
            self.urls = [self._url(p, start_timeout) for p in self.procs]
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _url(proc: subprocess.Popen, timeout: float) -> str:
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: lines.put(proc.stdout.readline()), daemon=True).start()
        try:
            first = lines.get(timeout=timeout)
        except queue.Empty:
            raise KitaeError(f"kitae serve model did not start within {timeout:g}s") from None
        if not first.startswith(PREFIX):
            raise KitaeError(f"kitae serve model did not start (exit code {proc.poll()}): {first.strip()!r}")
        return first.strip().rsplit(" on ", 1)[1]

    def kill(self, i: int) -> None:
        self.procs[i].kill()
        self.procs[i].wait(timeout=60)

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=60)

    def __enter__(self) -> "Replicas":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
