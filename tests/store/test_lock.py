"""One run, one writer: a writing RunStore holds runs/NAME/run.lock with flock(2), in real processes.

- a second writer (another process opening the run to write, or creating it again) is refused, naming the pid;
- a writer killed with SIGKILL leaves the lock file but not the lock: the kernel released it;
- readers (`kitae runs show`, the run page's store reads) read on while a writer holds the lock.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from kitae.errors import KitaeError
from kitae.store import RunStore
from kitae.store.lock import LOCK_NAME, RunLock

REPO = Path(__file__).resolve().parents[2]
# Opens (or creates) the run to write, logs a step, says so, and holds the run until it is killed.
HOLDER = """
import sys, time
from kitae.store import RunStore
run, how = sys.argv[1], sys.argv[2]
store = RunStore.create(run, name="held", config={}, model="tiny") if how == "create" else RunStore.open(run)
store.log_metrics(1, {"reward": 0.5})
print("holding", flush=True)
time.sleep(600)
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def hold(run: Path, how: str = "create") -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(run), how], stdout=subprocess.PIPE, text=True,
                            env=_env())
    line = proc.stdout.readline()
    assert line.strip() == "holding", f"the holder exited with {proc.wait()}"
    return proc


@pytest.fixture
def held(tmp_path):
    """(run folder, the process that writes it)."""
    run = tmp_path / "runs" / "held"
    proc = hold(run)
    yield run, proc
    proc.kill()
    proc.wait()


def test_a_second_writer_is_refused_naming_the_pid_of_the_first(held):
    run, proc = held
    with pytest.raises(KitaeError) as refused:
        RunStore.open(run)
    said = str(refused.value)
    assert f"pid {proc.pid}" in said and str(run / LOCK_NAME) in said and "\n" not in said
    with pytest.raises(KitaeError, match=f"pid {proc.pid}"):  # the lock itself, as the trainer takes it first
        RunLock.acquire(run)
    with RunStore.open(run, read_only=True) as store:
        assert store.last_step() == 1 and store.status == "running"  # nothing written by the refused ones


def test_a_writer_killed_with_sigkill_leaves_no_lock_behind(held):
    run, proc = held
    proc.kill()
    proc.wait()
    assert (run / LOCK_NAME).is_file()  # the file stays; the kernel dropped the lock with the process
    with RunStore.open(run) as store:
        store.log_metrics(2, {"reward": 1.0})
    second = hold(run, "open")  # and another process takes it in turn
    try:
        with pytest.raises(KitaeError, match=f"pid {second.pid}"):
            RunStore.open(run)
    finally:
        second.kill()
        second.wait()


def test_closing_the_store_releases_the_lock(tmp_path):
    run = tmp_path / "runs" / "demo"
    store = RunStore.create(run, name="demo", config={}, model="tiny")
    with pytest.raises(KitaeError, match="this process"):  # the same process, twice: says so
        RunStore.open(run)
    store.close()
    with RunStore.open(run) as again:
        again.log_metrics(1, {"reward": 0.5})
    other = hold(run, "open")  # released on close: another process can write it now
    other.kill()
    other.wait()


def test_readers_read_while_a_writer_holds_the_lock(held, serve_ui):
    run, proc = held
    with RunStore.open(run, read_only=True) as store:
        assert store.summary()["pid"] == proc.pid and store.last_step() == 1
    shown = subprocess.run([sys.executable, "-m", "kitae.cli.main", "runs", "show", "held", "--runs", str(run.parent)],
                           capture_output=True, text=True, timeout=120, env=_env())
    assert shown.returncode == 0, shown.stderr
    assert "running" in shown.stdout and f"pid {proc.pid}" in shown.stdout
    url = serve_ui(run.parent)
    listed = json.load(urllib.request.urlopen(f"{url}api/runs", timeout=10))
    assert [r["name"] for r in listed["runs"]] == ["held"] and listed["runs"][0]["status"] == "running"
    series = json.load(urllib.request.urlopen(f"{url}api/runs/held/metrics?keys=reward", timeout=10))
    assert "reward" in json.dumps(series)


@pytest.fixture
def serve_ui():
    from kitae.web import make_server, serve_in_thread

    servers = []

    def start(runs: Path) -> str:
        server = make_server(runs, port=0)
        servers.append((server, serve_in_thread(server)))
        return server.url

    yield start
    for server, thread in servers:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
