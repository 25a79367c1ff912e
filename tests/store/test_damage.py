"""A damaged run.db and a full disk reach people as one line (what, which file, the fix), never SQLite's traceback.

The full disk is real: the writer runs in a child process under a 256 KB RLIMIT_FSIZE, so the kernel refuses the
write that would grow run.db-wal past it (EFBIG; Python ignores SIGXFSZ, so the process lives to say so).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from kitae.errors import KitaeError
from kitae.store import RunStore
from kitae.store.lock import RunLock

from tests.store.hand_made import make_group

REPO = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


@pytest.fixture
def run(tmp_path) -> Path:
    run = tmp_path / "runs" / "demo"
    with RunStore.create(run, name="demo", config={}, model="tiny") as store:
        for step in range(1, 40):
            store.log_groups(step, [make_group(i, [1.0, 0.0, 0.5]) for i in range(4)])
            store.log_metrics(step, {"reward": step / 40})
        store.finish("finished")
    return run


def _garbage(db: Path) -> None:
    db.write_bytes(b"this is not a database" * 300)


def _damaged_pages(db: Path) -> None:
    data = bytearray(db.read_bytes())
    data[4096 * 2: len(data) - 4096] = b"\xab" * (len(data) - 4096 * 3)  # the header holds; the tables do not
    db.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", [_garbage, _damaged_pages])
def test_a_damaged_run_db_is_one_line_naming_it(run, damage):
    damage(run / "run.db")
    with pytest.raises(KitaeError, match="is damaged") as refused:
        with RunStore.open(run) as store:  # to write: as `kitae train --resume` does
            store.summary()
    assert str(run / "run.db") in str(refused.value) and "restore" in str(refused.value)
    RunLock.acquire(run).release()  # the refused writer let the lock go
    shown = subprocess.run([sys.executable, "-m", "kitae.cli.main", "runs", "show", str(run)], capture_output=True,
                           text=True, timeout=120, env=_env())
    assert shown.returncode == 2 and "Traceback" not in shown.stderr, shown.stderr
    assert shown.stderr.startswith("error: ") and len(shown.stderr.strip().splitlines()) == 1, shown.stderr
    assert str(run / "run.db") in shown.stderr and "damaged" in shown.stderr


WRITER = """
import sys
from kitae.errors import KitaeError
from kitae.store import GroupRecord, RunStore, SampleRecord
store = RunStore.create(sys.argv[1], name="full", config={}, model="tiny")
try:
    for step in range(1, 10**6):
        sample = SampleRecord("t" * 2000, 500, "stop", 1.0, 0.0)
        store.log_groups(step, [GroupRecord(f"q{g}", [], None, {}, [sample] * 4, g) for g in range(4)])
except KitaeError as exc:
    print(step, exc, sep="\\n")
    sys.exit(3)
"""


def test_a_full_disk_under_the_run_store_is_one_line(tmp_path):
    limit = 256 * 1024

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    run = tmp_path / "runs" / "full"
    done = subprocess.run([sys.executable, "-c", WRITER, str(run)], capture_output=True, text=True, timeout=120,
                          env=_env(), preexec_fn=small_files)
    assert done.returncode == 3, done.stdout + done.stderr
    step, message = done.stdout.strip().split("\n")
    assert int(step) > 1  # it wrote until the file could grow no more
    assert str(run / "run.db") in message and f"kitae train --resume {run}" in message and "\n" not in message
    with RunStore.open(run, read_only=True) as store:  # every step committed before it is whole
        assert store.group_steps() == list(range(1, int(step)))
