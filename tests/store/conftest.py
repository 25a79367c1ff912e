"""A fresh run store for each test (hand-made groups to log in it: tests/store/hand_made.py)."""

from __future__ import annotations

import pytest

from kitae.store import RunStore


@pytest.fixture
def store(tmp_path):
    s = RunStore.create(tmp_path / "runs" / "demo", name="demo", config={"lr": 1e-6, "group_size": 4}, model="tiny")
    yield s
    s.close()
