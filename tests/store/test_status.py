"""Readers report a running run whose trainer is gone as "crashed"."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from kitae.store.status import boot_time, effective_status, pid_alive, this_host


@pytest.fixture(scope="module")
def dead_pid():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


NOW = 1_000_000.0
OTHER = "another-machine"


def test_effective_status_table(dead_pid):
    me, here = os.getpid(), this_host()
    booted = boot_time() or 0.0
    cases = [
        # stored status, pid, host, heartbeat -> what readers see
        ("finished", dead_pid, here, booted + 1, "finished"),  # a final status is kept as it is
        ("stopped", None, OTHER, 0.0, "stopped"),
        ("running", me, here, time.time(), "running"),  # this very process
        ("running", dead_pid, here, time.time(), "crashed"),  # the trainer is gone
        ("running", me, OTHER, NOW - 60, "running"),  # another machine, heartbeat a minute ago
        ("running", me, OTHER, NOW - 1801, "crashed"),  # another machine, silent past stale_after (1800 s)
        ("running", None, here, NOW - 10, "running"),  # no pid recorded: the heartbeat decides
    ]
    for status, pid, host, heartbeat, expected in cases:
        assert effective_status(status, pid, host, heartbeat, now=NOW) == expected, (status, pid, host, heartbeat)


@pytest.mark.skipif(boot_time() is None, reason="needs /proc/stat")
def test_heartbeat_from_before_a_reboot_is_crashed_even_if_the_pid_exists():
    assert effective_status("running", os.getpid(), this_host(), boot_time() - 1) == "crashed"


def test_stale_after_is_a_parameter():
    assert effective_status("running", 1, OTHER, NOW - 100, stale_after=60, now=NOW) == "crashed"
    assert effective_status("running", 1, OTHER, NOW - 100, stale_after=600, now=NOW) == "running"


def test_pid_alive(dead_pid):
    assert pid_alive(os.getpid())
    assert not pid_alive(dead_pid)
    assert not pid_alive(0)


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc")
def test_zombie_is_not_alive():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    while open(f"/proc/{proc.pid}/stat").read().rpartition(")")[2].split()[0] != "Z":
        time.sleep(0.01)  # exited but not yet waited for: a zombie
    try:
        assert not pid_alive(proc.pid)
    finally:
        proc.wait()


def test_store_reports_crashed_for_a_dead_trainer(store, dead_pid):
    store._conn.execute("UPDATE run SET pid = ?", (dead_pid,))
    assert store.status == "crashed"
    assert store.brief().status == "crashed"
    store.mark_running()  # resumed by this process
    assert store.status == "running"
