"""`kitae train` when something outside it goes wrong: a second trainer of the same run, a trainer killed with
SIGKILL, SIGTERM to the whole process group (systemd, Slurm, `timeout`), a damaged run.db, a full disk, a read-only
output folder.

Each is real: two `kitae train` processes, a real SIGKILL, a run.db overwritten with garbage or with damaged
pages, and a full disk as a small tmpfs (when this process may mount one) or a real file-size limit
(RLIMIT_FSIZE: the kernel refuses the write with EFBIG, which Python gets as an error, not a signal). Every
failure must end as one line for people (what, which file, the fix) and exit code 2, never a traceback.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kitae.errors import KitaeError
from kitae.store import RunStore
from kitae.store.status import pid_alive

from tests.plugins.tiny_run import write_config
from tests.trainer.test_resume import FAST, _cli, _resume, _steps, four_steps, run  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def _one_line_error(done: subprocess.CompletedProcess) -> str:
    """The error `kitae` printed: exit code 2, no traceback, one line."""
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, done.stderr
    return errors[0]


def _wait_for_step(run: Path, step: int, proc: subprocess.Popen, timeout: float = 180) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        assert proc.poll() is None, f"the trainer exited with {proc.returncode}: {proc.stderr.read()}"
        try:
            with RunStore.open(run, read_only=True) as store:
                if (store.last_step() or 0) >= step and store.summary()["pid"] == proc.pid:
                    return
        except KitaeError:  # the trainer is opening the database
            pass
        time.sleep(0.2)
    raise AssertionError(f"the trainer did not reach step {step}")


# ---- one run, one writer -------------------------------------------------------------------------------
def test_a_second_trainer_of_a_running_run_is_refused_and_a_killed_ones_lock_does_not_block(run):
    first = subprocess.Popen([sys.executable, "-m", "kitae.cli.main", "train", "-q", "--resume", str(run),
                              "--set", "optim.steps=100000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    try:
        _wait_for_step(run, 5, first)
        second = _cli("--resume", str(run))
        said = _one_line_error(second)
        assert f"pid {first.pid}" in said and "run.lock" in said
        shown = subprocess.run([sys.executable, "-m", "kitae.cli.main", "runs", "show", str(run)],
                               capture_output=True, text=True, timeout=120)
        assert shown.returncode == 0 and "running" in shown.stdout, shown.stderr  # readers read on
        assert first.poll() is None  # the first one trains on
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    trainer = _resume(run)  # the dead trainer's lock is gone with it
    trainer.store.close()
    assert trainer.start_step >= 4
    events = RunStore.open(run, read_only=True).events()
    assert [e["kind"] for e in events].count("resumed") == 2  # the first's and this one; the refused one wrote none


# ---- sampling.async: the rollout worker and the signals ------------------------------------------------------
ASYNC_RUN = {**FAST, "sampling.async": True, "optim.steps": 100000, "logging.save_every": 0}


def _start(config: Path) -> subprocess.Popen:
    """`kitae train CONFIG` in a process group of its own, as systemd, Slurm and a shell's job start it."""
    return subprocess.Popen([sys.executable, "-m", "kitae.cli.main", "train", "-q", str(config)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _children(pid: int, marker: str) -> list[int]:
    """The pids of ``pid``'s child processes whose command line holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            ppid = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid and marker in cmdline:
            found.append(int(entry.name))
    return found


def _gone_within(pids: list[int], timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not any(pid_alive(p) for p in pids):
            return True
        time.sleep(0.5)
    return False


def test_sigterm_to_an_async_runs_process_group_saves_stops_and_resumes(tiny_assets, tmp_path, rewards_on_path):
    config = write_config(tiny_assets, tmp_path, **ASYNC_RUN)
    run = tmp_path / "t"
    proc = _start(config)
    try:
        _wait_for_step(run, 2, proc)
        os.killpg(proc.pid, signal.SIGTERM)  # the trainer and its rollout worker alike
        _, err = proc.communicate(timeout=300)
    finally:
        with contextlib.suppress(ProcessLookupError):  # anything of the group still there
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + signal.SIGTERM, err  # a clean stop, not a crash of the worker
    with RunStore.open(run, read_only=True) as store:
        assert store.status == "stopped"
        last = store.last_step()
    assert (run / "checkpoints" / f"step-{last:06d}" / "state.pt").is_file()
    resumed = _cli("--resume", str(run), "--set", f"optim.steps={last + 1}")
    assert resumed.returncode == 0, resumed.stderr
    assert _steps(run) == list(range(1, last + 2))  # the history kept, the next step trained


def test_a_trainer_killed_with_sigkill_leaves_no_rollout_worker_behind(tiny_assets, tmp_path, rewards_on_path):
    config = write_config(tiny_assets, tmp_path, **ASYNC_RUN)
    proc = _start(config)
    try:
        _wait_for_step(tmp_path / "t", 1, proc)
        workers = _children(proc.pid, "spawn_main")  # multiprocessing's spawned child: the rollout worker
        assert len(workers) == 1
        proc.send_signal(signal.SIGKILL)  # the trainer alone
        proc.wait()
        assert _gone_within(workers, timeout=60)  # not adopted by PID 1, sampling on
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


# ---- a damaged run.db ------------------------------------------------------------------------------------
def _garbage(db: Path) -> None:
    db.write_bytes(b"this is not a database" * 300)


def _damaged_pages(db: Path) -> None:
    data = bytearray(db.read_bytes())
    data[4096 * 2: 4096 * 4] = b"\xab" * 8192  # valid header, broken tables
    db.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", [_garbage, _damaged_pages])
def test_resuming_a_run_with_a_damaged_run_db_is_one_line(run, damage):
    damage(run / "run.db")
    said = _one_line_error(_cli("--resume", str(run)))
    assert str(run / "run.db") in said and "damaged" in said


# ---- a full disk, a read-only folder ---------------------------------------------------------------------
def _tmpfs(folder: Path, size: str, read_only: bool = False) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    folder.mkdir(parents=True, exist_ok=True)
    options = f"size={size}" + (",ro" if read_only else "")
    return subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)],
                          capture_output=True).returncode == 0


@pytest.fixture(params=["tmpfs", "file-size limit"])
def full_disk(request, tmp_path):
    """(the folder to train in, the limit the child process runs under or None): the disk fills up during the
    first checkpoint (state.pt is about 260 KB). A 500 KB tmpfs (root only) or a 200 KB RLIMIT_FSIZE on a real
    disk."""
    folder = tmp_path / "disk"
    if request.param == "tmpfs":
        if not _tmpfs(folder, "500k"):
            pytest.skip("cannot mount a tmpfs here (needs root)")
        yield folder, None
        subprocess.run(["umount", str(folder)], check=True)
    else:
        folder.mkdir()
        yield folder, 200 * 1024


def test_a_full_disk_ends_training_with_one_line(tiny_assets, tmp_path, full_disk, rewards_on_path):
    folder, fsize = full_disk
    config = write_config(tiny_assets, tmp_path / "cfg", **{**FAST, "output_dir": str(folder / "runs")})

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    done = subprocess.run([sys.executable, "-m", "kitae.cli.main", "train", "-q", str(config)], capture_output=True,
                          text=True, timeout=300, preexec_fn=limit if fsize else None)
    said = _one_line_error(done)
    run = folder / "runs" / "t"
    assert str(run) in said and f"kitae train --resume {run}" in said
    assert "space" in said or "too large" in said, said


def test_a_new_run_in_a_read_only_folder_is_one_line(tiny_assets, tmp_path, read_only_view,  # noqa: F811
                                                     rewards_on_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    config = write_config(tiny_assets, tmp_path / "cfg", **{**FAST, "output_dir": str(folder / "runs")})
    code = ("import sys; from kitae.cli.main import main; "
            f"sys.argv = ['kitae', 'train', '-q', {str(config)!r}]; main()")
    done = read_only_view(folder, code)
    said = _one_line_error(done)
    assert f"{folder} is read-only" in said and "output_dir" in said
