"""Real runs on disk for the run page's tests (the server, the browser and screenshots: tests/plugins/run_page.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.web.runs import finished_run


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory) -> Path:
    """A finished run and a crashed one (modules that write labels copy them first)."""
    root = tmp_path_factory.mktemp("runs")
    finished_run(root, "finished-run")
    finished_run(root, "crashed-run", steps=12, status="crashed")
    return root


@pytest.fixture
def fresh_runs(runs_dir, tmp_path) -> Path:
    """A private copy of the runs, for tests that write (labels)."""
    copy = tmp_path / "runs"
    shutil.copytree(runs_dir, copy)
    return copy
