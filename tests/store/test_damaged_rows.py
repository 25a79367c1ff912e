"""A run.db a person edited by hand (a row deleted, ``{not json`` in a JSON column, text among the metrics) reaches
`kitae runs show`, `kitae runs list` and `kitae train --resume` as one line naming the file, table, row and column
and the repair, never a traceback. Real run stores (tests/web/runs.py), real commands in subprocesses."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kitae.store import RunStore
from tests.store.damaged import DAMAGES, damage, unloadable_model_config
from tests.web.runs import finished_run, log_step

REPO = Path(__file__).resolve().parents[2]


def kitae(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kitae.cli.main", *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.fixture(scope="module")
def clean_runs(tmp_path_factory) -> Path:
    runs = tmp_path_factory.mktemp("runs")
    finished_run(runs, "demo")
    return runs


@pytest.mark.parametrize("case", DAMAGES, ids=lambda c: c.id)
def test_runs_show_and_list_name_the_damaged_cell(clean_runs, tmp_path, case):
    runs = tmp_path / "runs"
    shutil.copytree(clean_runs, runs)
    where = damage(runs / "demo", case)
    db = runs / "demo" / "run.db"
    shown, listed = kitae("runs", "show", "demo", "--runs", str(runs)), kitae("runs", "list", "--runs", str(runs))
    for done in (shown, listed):
        assert "Traceback" not in done.stdout + done.stderr, done.stderr
    if "show" in case.shown_by:
        assert shown.returncode == 2 and len(shown.stderr.strip().splitlines()) == 1, shown.stderr
        assert shown.stderr.startswith(f"error: {db}: {where}"), shown.stderr
        assert "restore run.db from a copy" in shown.stderr
    else:  # the damaged cell is not part of the summary: the run is shown, and the damage named beside it
        assert shown.returncode == 0 and "steps     30" in shown.stdout, shown.stderr
        assert f"damaged   {db}: {where}" in shown.stdout, shown.stdout
    assert listed.returncode == 0, listed.stderr
    row = listed.stdout.splitlines()[1].split()
    if "list" in case.shown_by:
        assert row[:2] == ["demo", "unreadable"] and f"demo: {db}: {where}" in listed.stdout, listed.stdout
    else:
        assert row[:2] == ["demo", "finished"], listed.stdout


@pytest.mark.slow  # a CLI subprocess per case: the full suite runs it, the fast subset leaves it
@pytest.mark.parametrize("case", DAMAGES, ids=lambda c: c.id)
def test_a_resume_of_a_damaged_run_is_refused_before_the_model_loads(tmp_path, case):
    cfg = unloadable_model_config(tmp_path)  # loading it would fail: an error about anything else came first
    with RunStore.create(cfg.run_dir, name="demo", config=cfg.to_dict(), model=cfg.model.path) as store:
        for step in range(1, 31):
            log_step(store, step)
        store.finish("crashed")
    (cfg.run_dir / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict()))
    where = damage(cfg.run_dir, case)
    done = kitae("train", "--resume", str(cfg.run_dir), "-q")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(f"error: {cfg.run_dir / 'run.db'}: {where}"), done.stderr
    assert "safetensors" not in done.stderr
