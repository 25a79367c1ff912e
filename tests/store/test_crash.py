"""A real trainer-like writer process: killed with SIGKILL mid-write, and read while it writes."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

from kitae.store import RunStore

GROUPS, SAMPLES = 4, 4
KEYS = ["reward", "reward/accuracy", "kl", "entropy", "secs_per_step"]

# Logs steps forever, each as the trainer does (groups, then metrics), printing a step once it is committed.
WRITER = f"""
import itertools, sys
from kitae.store import GroupRecord, RunStore, SampleRecord
store = RunStore.create(sys.argv[1], name="crashy", config={{"steps": 10**9}}, model="tiny")
for step in itertools.count(1):
    groups = [
        GroupRecord(f"q{{g}}", [{{"role": "user", "content": f"q{{g}}"}}], None, {{}},
                    [SampleRecord("t" * 4000, 1000, "stop", float(s % 2), 0.0) for s in range({SAMPLES})], g)
        for g in range({GROUPS})
    ]
    store.log_groups(step, groups)
    store.log_metrics(step, {{key: float(step) for key in {KEYS!r}}})
    store.heartbeat()
    print(step, flush=True)
"""


def start_writer(run_dir: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", WRITER, str(run_dir)], stdout=subprocess.PIPE, text=True)


def wait_for_step(proc: subprocess.Popen, step: int) -> int:
    """Read the writer's committed steps until `step`; returns the last one printed."""
    for line in proc.stdout:
        if int(line) >= step:
            return int(line)
    raise AssertionError(f"writer exited with {proc.wait()} before step {step}")


def assert_whole_steps(store: RunStore) -> int:
    """Every step that is in the store is whole: all metric keys, all groups, all samples of each group."""
    with store.snapshot():  # one view, even while the writer commits
        return _assert_whole_steps(store)


def _assert_whole_steps(store: RunStore) -> int:
    metrics = store.metrics()
    last = store.last_step() or 0
    for key in KEYS:
        assert metrics[key] == [(s, float(s)) for s in range(1, last + 1)], key
    group_steps = store.group_steps()
    assert group_steps in (list(range(1, last + 1)), list(range(1, last + 2)))  # groups go first
    for step in group_steps[-2:]:
        rows = store.groups(step=step, order="step", with_samples=True)
        assert [(r.group_index, len(r.samples)) for r in rows] == [(g, SAMPLES) for g in range(GROUPS)]
    return last


def test_sigkill_mid_write_leaves_a_readable_store(tmp_path):
    run_dir = tmp_path / "crashy"
    proc = start_writer(run_dir)
    printed = wait_for_step(proc, 15)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL

    conn = sqlite3.connect(run_dir / "run.db")
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    with RunStore.open(run_dir) as store:
        assert store.status == "crashed"  # the row still says "running"; its pid is gone
        last = assert_whole_steps(store)
        assert last >= printed  # nothing the writer saw committed is lost

        store.truncate_after(last - 1)  # resume from the checkpoint before the last step
        store.mark_running()
        assert store.status == "running"
        assert store.last_step() == last - 1 and store.group_steps()[-1] == last - 1


def test_reader_reads_while_the_writer_writes(tmp_path):
    run_dir = tmp_path / "crashy"
    proc = start_writer(run_dir)
    try:
        wait_for_step(proc, 1)
        seen = set()
        with RunStore.open(run_dir, read_only=True) as reader:  # a reader: the writer holds the run's lock
            while len(seen) < 5:  # five different snapshots, each taken while the writer commits
                assert proc.poll() is None
                assert reader.status == "running"
                seen.add(assert_whole_steps(reader))
        assert wait_for_step(proc, max(seen) + 1) > max(seen)  # and the writer was never blocked for good
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
