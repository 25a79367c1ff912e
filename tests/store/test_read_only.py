"""A run folder on read-only storage (a read-only mount, an archive, a colleague's folder) is still readable:
`kitae runs show`, `kitae runs list` and the run page open run.db read-only and write nothing next to it.

The storage is made truly read-only: a read-only bind mount in a private mount namespace (``unshare -rm``,
which works as root, where ``chmod`` would not stop a write), or, for a user who is not root, ``chmod a-w``.
Each check runs in a real subprocess that sees the folder read-only.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path


from kitae.store import RunStore
from tests.plugins.read_only import repo_env
from tests.store.hand_made import make_group

CHECKS = textwrap.dedent(
    """
    import json, os, sys, urllib.request
    from typer.testing import CliRunner
    from kitae.cli.main import app
    from kitae.web import make_server, serve_in_thread
    runs = RUNS
    assert not os.access(runs, os.W_OK), "the folder is writable: the test would prove nothing"
    out = {}
    for args in (["runs", "show", "demo", "--runs", runs, "--json"], ["runs", "list", "--runs", runs]):
        r = CliRunner().invoke(app, args)
        out[args[1]] = {"code": r.exit_code, "output": r.output, "error": repr(r.exception)}
    server = make_server(runs, port=0)
    serve_in_thread(server)
    try:
        with urllib.request.urlopen(server.url + "api/runs/demo") as resp:
            out["page"] = {"code": resp.status, "body": json.loads(resp.read())}
    except urllib.error.HTTPError as exc:
        out["page"] = {"code": exc.code, "body": json.loads(exc.read())}
    finally:
        server.shutdown()
    print(json.dumps(out))
    """
)


def _check(read_only_view, runs: Path) -> dict:
    code = f"RUNS = {str(runs)!r}\n" + CHECKS
    done = read_only_view(runs, code)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _finished_run(runs: Path) -> Path:
    with RunStore.create(runs / "demo", name="demo", config={"lr": 1e-6}, model="tiny") as s:
        for step in (1, 2, 3):
            s.log_metrics(step, {"reward": step / 4})
            s.log_groups(step, [make_group(0, [1.0, 0.0])])
        s.finish("finished")
    return runs / "demo"


def test_a_finished_run_on_read_only_storage_is_shown(tmp_path, read_only_view):
    run = _finished_run(tmp_path / "runs")
    assert sorted(p.name for p in run.iterdir()) == ["run.db", "run.lock"]  # closed cleanly: no -wal or -shm
    out = _check(read_only_view, tmp_path / "runs")
    assert out["show"]["code"] == 0, out["show"]
    summary = json.loads(out["show"]["output"])
    assert (summary["status"], summary["steps"]) == ("finished", 3)
    assert out["list"]["code"] == 0 and out["list"]["output"].splitlines()[1].split()[:4] == [
        "demo", "finished", "tiny", "3"]
    assert out["page"]["code"] == 200 and out["page"]["body"]["steps"] == 3
    assert sorted(p.name for p in run.iterdir()) == ["run.db", "run.lock"]


def test_a_crashed_run_on_read_only_storage_shows_its_last_steps(tmp_path, read_only_view):
    """A trainer killed mid-run leaves its last steps in run.db-wal; a read-only reader still sees them."""
    run = tmp_path / "runs" / "demo"
    writer = textwrap.dedent(
        f"""
        import os
        from kitae.store import RunStore
        s = RunStore.create({str(run)!r}, name="demo", config={{}}, model="tiny")
        for step in (1, 2, 3):
            s.log_metrics(step, {{"reward": step / 4}})
        os._exit(0)  # killed: nothing is checkpointed into run.db, the steps are in run.db-wal only
        """
    )
    subprocess.run([sys.executable, "-c", writer], check=True, env=repo_env())
    assert (run / "run.db-wal").stat().st_size > 0 and (run / "run.db-shm").exists()
    out = _check(read_only_view, tmp_path / "runs")
    summary = json.loads(out["show"]["output"])
    assert (summary["status"], summary["steps"]) == ("crashed", 3)
    assert out["page"]["code"] == 200 and out["page"]["body"]["steps"] == 3


def test_unreadable_steps_in_a_lone_wal_file_are_an_error_not_a_shorter_history(tmp_path, read_only_view):
    """Without run.db-shm, SQLite cannot read run.db-wal from read-only storage; showing the run without those
    steps would be a misleading history, so the reader says what to do instead."""
    run = tmp_path / "runs" / "demo"
    writer = textwrap.dedent(
        f"""
        import os
        from kitae.store import RunStore
        s = RunStore.create({str(run)!r}, name="demo", config={{}}, model="tiny")
        s.log_metrics(1, {{"reward": 0.5}})
        os._exit(0)
        """
    )
    subprocess.run([sys.executable, "-c", writer], check=True, env=repo_env())
    (run / "run.db-shm").unlink()
    out = _check(read_only_view, tmp_path / "runs")
    assert out["show"]["code"] != 0
    assert "run.db-wal" in out["show"]["error"] and "copy the run folder" in out["show"]["error"]
    assert out["page"]["code"] == 400 and "run.db-wal" in out["page"]["body"]["error"]
    assert "unreadable" in out["list"]["output"] and "run.db-wal" in out["list"]["output"]


def test_resuming_a_run_on_read_only_storage_is_refused_before_the_model_loads(tmp_path, read_only_view):
    import yaml

    from tests.store.damaged import unloadable_model_config

    cfg = unloadable_model_config(tmp_path)  # loading it would fail: an error about anything else came first
    with RunStore.create(cfg.run_dir, name="demo", config=cfg.to_dict(), model=cfg.model.path) as s:
        s.log_metrics(1, {"reward": 0.5})
        s.finish("crashed")
    (cfg.run_dir / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict()))
    code = ("import sys; from kitae.cli.main import main; "
            f"sys.argv = ['kitae', 'train', '--resume', {str(cfg.run_dir)!r}, '-q']; main()")
    done = read_only_view(tmp_path / "runs", code)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{cfg.run_dir} is read-only" in done.stderr and "copy the run folder" in done.stderr
    assert "safetensors" not in done.stderr
