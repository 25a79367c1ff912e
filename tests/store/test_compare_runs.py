"""scripts/compare_runs.py: two run stores are "the same" when every sample, group, non-timing metric and
evaluation is; a changed sample or metric is named, a timing is not."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from kitae.store import RunStore
from tests.store.hand_made import make_group

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "compare_runs.py"
spec = importlib.util.spec_from_file_location("compare_runs", SCRIPT)
compare_runs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compare_runs)


def a_run(folder: Path, reward: float = 1.0, secs: float = 1.0) -> Path:
    store = RunStore.create(folder, name="r", config={}, model="tiny")
    store.log_groups(1, [make_group(0, [reward, 0.0])])
    store.log_metrics(1, {"reward": reward, "secs_per_step": secs})
    store.log_eval(1, {"pass@1": 0.5}, [{"prompt_index": 0, "score": 1.0}])
    store.close()
    return folder / "run.db"


def test_runs_that_differ_only_in_their_timings_are_the_same(tmp_path):
    lines = compare_runs.compare(a_run(tmp_path / "a"), a_run(tmp_path / "b", secs=7.0))
    assert all(line.endswith("the same") for line in lines), lines


def test_a_changed_reward_is_named_where_it_changed(tmp_path):
    lines = compare_runs.compare(a_run(tmp_path / "a"), a_run(tmp_path / "b", reward=0.5))
    differ = [line.split(":")[0] for line in lines if not line.endswith("the same")]
    assert differ == ["samples", "groups", "metrics"]
