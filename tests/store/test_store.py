"""RunStore writer calls round-trip through a real run.db; versioning and lifecycle rules."""

from __future__ import annotations

import os
import sqlite3

import pytest

from kitae.errors import KitaeError
from kitae.store import SCHEMA_VERSION, GroupRecord, RunStore, SampleRecord

from tests.store.hand_made import make_group


def reopen(store: RunStore) -> RunStore:
    store.close()
    return RunStore.open(store.run_dir)


def test_create_records_run_and_open_reads_it_back(store):
    store = reopen(store)
    s = store.summary()
    assert (s["name"], s["model"], s["status"], s["pid"]) == ("demo", "tiny", "running", os.getpid())
    assert s["config"] == {"lr": 1e-6, "group_size": 4}
    assert s["steps"] is None and s["metrics"] == {} and s["first_eval"] is None
    assert s["schema_version"] == SCHEMA_VERSION
    assert s["started_at"] <= s["updated_at"]
    store.close()


def test_database_is_in_wal_mode(store):
    conn = sqlite3.connect(store.run_dir / "run.db")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def test_log_metrics_round_trip(store):
    store.log_metrics(1, {"reward": 0.25, "reward/accuracy": 0.0, "kl": None})
    store.log_metrics(2, {"reward": 0.75, "reward/accuracy": 1.0, "kl": 0.002})
    store.log_metrics(2, {"kl": 0.003, "entropy": 1.5})  # same step again: kl replaced, entropy added
    store = reopen(store)
    assert store.metrics() == {
        "reward": [(1, 0.25), (2, 0.75)],
        "reward/accuracy": [(1, 0.0), (2, 1.0)],
        "kl": [(1, None), (2, 0.003)],
        "entropy": [(2, 1.5)],
    }
    assert store.metric_keys() == ["entropy", "kl", "reward", "reward/accuracy"]
    assert store.last_step() == 2
    latest = store.summary()["metrics"]
    assert latest["kl"] == {"step": 2, "value": 0.003} and latest["entropy"] == {"step": 2, "value": 1.5}
    store.close()


def test_metrics_step_range_and_keys(store):
    for step in range(5):
        store.log_metrics(step, {"reward": step / 10, "kl": step / 100})
    assert store.metrics(["reward"], since_step=3) == {"reward": [(3, 0.3), (4, 0.4)]}
    assert store.metrics(["kl"], since_step=1, until_step=2) == {"kl": [(1, 0.01), (2, 0.02)]}
    assert store.metrics(["missing"]) == {"missing": []}


def test_log_groups_round_trip_every_field(store):
    groups = [make_group(0, [1.0, 0.0, None, 1.0], truncated=1), make_group(1, [0.5, 0.5])]
    store.log_groups(3, groups)
    store = reopen(store)
    rows = store.groups(step=3, order="step", with_samples=True)
    assert [r.to_record() for r in rows] == groups  # every field, JSON and Japanese text included
    assert [(r.step, r.n_samples, r.n_scored, r.n_truncated) for r in rows] == [(3, 4, 3, 1), (3, 2, 2, 0)]
    assert store.samples(rows[0].id) == groups[0].samples
    assert store.group(rows[1].id).samples == groups[1].samples
    assert store.group(10_000) is None
    store.close()


def test_log_groups_again_replaces_the_group(store):
    store.log_groups(1, [make_group(0, [0.0, 0.0])])
    store.log_groups(1, [make_group(0, [1.0, 1.0, 1.0])])
    rows = store.groups(step=1, with_samples=True)
    assert len(rows) == 1 and [s.reward for s in rows[0].samples] == [1.0, 1.0, 1.0]


def test_log_eval_round_trip_and_replace(store):
    store.log_eval(0, {"score": 0.2, "accuracy": 0.2}, [{"prompt": "q", "output_text": "a", "score": 0.0}])
    store.log_eval(10, {"score": 0.5, "accuracy": 0.6})
    store.log_eval(20, {"score": 0.1})
    store.log_eval(20, {"score": 0.7}, [{"n": i} for i in range(3)])  # the eval at step 20 is re-run
    store = reopen(store)
    assert [(e.step, e.metrics, e.n_samples, e.score) for e in store.evals()] == [
        (0, {"score": 0.2, "accuracy": 0.2}, 1, 0.2),
        (10, {"score": 0.5, "accuracy": 0.6}, 0, 0.5),
        (20, {"score": 0.7}, 3, 0.7),
    ]
    assert store.eval_samples(0) == [{"prompt": "q", "output_text": "a", "score": 0.0}]
    assert store.eval_samples(20, limit=2, offset=1) == [{"n": 1}, {"n": 2}]
    assert [e.step for e in store.evals(limit=1, offset=1)] == [10]
    s = store.summary()
    assert (s["evals"], s["first_eval"]["score"], s["latest_eval"]["score"]) == (3, 0.2, 0.7)
    store.close()


def test_truncate_after_drops_later_steps_everywhere(store):
    for step in range(1, 6):
        store.log_metrics(step, {"reward": float(step)})
        store.log_groups(step, [make_group(0, [float(step)]), make_group(1, [0.0])])
        store.log_eval(step, {"score": float(step)}, [{"step": step}])
    store.truncate_after(3)
    store = reopen(store)
    assert store.metrics() == {"reward": [(1, 1.0), (2, 2.0), (3, 3.0)]}
    assert store.group_steps() == [1, 2, 3]
    assert store.count_groups() == 6
    assert [e.step for e in store.evals()] == [1, 2, 3]
    assert store.eval_samples(4) == []
    orphans = store._conn.execute("SELECT count(*) FROM samples WHERE step > 3").fetchone()[0]
    assert orphans == 0
    # resuming from step 3 logs step 4 again without duplicates
    store.log_metrics(4, {"reward": 40.0})
    store.log_groups(4, [make_group(0, [1.0])])
    assert store.metrics(["reward"], since_step=4) == {"reward": [(4, 40.0)]}
    assert store.count_groups(step=4) == 1
    store.close()


@pytest.mark.parametrize("status", ["finished", "crashed", "stopped"])
def test_finish_then_resume(store, status):
    store.finish(status, summary={"best_eval": 0.5})
    store = reopen(store)
    s = store.summary()
    assert (s["status"], s["final"]) == (status, {"best_eval": 0.5}) and s["finished_at"] is not None
    store.mark_running()
    s = store.summary()
    assert (s["status"], s["final"], s["finished_at"], s["pid"]) == ("running", None, None, os.getpid())
    store.close()


def test_finish_rejects_unknown_status(store):
    with pytest.raises(KitaeError, match="'done' is not one of finished, crashed, stopped"):
        store.finish("done")
    assert store.status == "running"


def test_heartbeat_moves_updated_at(store):
    store._conn.execute("UPDATE run SET heartbeat_at = 0")
    store.heartbeat()
    assert store.summary()["updated_at"] > 0


def test_failed_write_rolls_back_the_whole_call(store):
    bad = make_group(1, [1.0])
    bad.samples.append(SampleRecord("t", "not a number", "stop", 1.0, 0.0))  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        store.log_groups(1, [make_group(0, [1.0]), bad])
    assert store.count_groups() == 0  # group 0 was not half-written either
    store.log_metrics(1, {"reward": 1.0})  # and the store still works
    assert store.last_step() == 1


@pytest.mark.parametrize("log", ["log_metrics", "log_eval"])
def test_a_metric_that_is_not_a_number_is_named(store, log):
    with pytest.raises(KitaeError, match=r"metric 'reward/format' at step 7 is 'yes', not a number or None"):
        getattr(store, log)(7, {"reward": 1.0, "reward/format": "yes"})
    assert store.metrics() == {} and store.evals() == []


def test_create_refuses_an_existing_run(store):
    with pytest.raises(KitaeError, match="run 'demo' already exists"):
        RunStore.create(store.run_dir, name="demo", config={}, model="tiny")


def test_open_refuses_a_newer_schema(store):
    store._conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    store.close()
    with pytest.raises(KitaeError, match=f"schema version {SCHEMA_VERSION + 1} is newer .* upgrade kitae"):
        RunStore.open(store.run_dir)


def test_open_refuses_a_database_that_is_not_a_run_store(tmp_path):
    (tmp_path / "other").mkdir()
    sqlite3.connect(tmp_path / "other" / "run.db").execute("CREATE TABLE t (x)").connection.commit()
    with pytest.raises(KitaeError, match="not a kitae run store"):
        RunStore.open(tmp_path / "other")


def test_open_missing_run_names_the_runs_that_exist(store):
    runs_dir = store.run_dir.parent
    with pytest.raises(KitaeError, match=r"no run 'dmeo' .*did you mean 'demo'\? \(runs: demo\)"):
        RunStore.open(runs_dir / "dmeo")


# ---- events: what happened to the run itself (resumes, restarts, config changes) --------------------------
def test_events_round_trip_in_order_and_survive_truncate(store):
    store.log_metrics(4, {"reward": 1.0})
    store.log_event(2, "resumed", "resumed from checkpoints/step-000002", {"checkpoint": "step-000002"})
    store.change_config(2, {"lr": 5e-7, "group_size": 4}, "optim.lr: 1e-06 → 5e-07",
                        [{"field": "lr", "old": 1e-6, "new": 5e-7}])
    store.truncate_after(2)  # the steps after the checkpoint are redone; what happened to the run is kept
    store = reopen(store)
    events = store.events()
    assert [(e["step"], e["kind"]) for e in events] == [(2, "resumed"), (2, "config_changed")]
    assert events[0]["data"] == {"checkpoint": "step-000002"} and events[0]["logged_at"] > 0
    assert events[1]["data"] == {"changes": [{"field": "lr", "old": 1e-6, "new": 5e-7}]}
    assert store.config == {"lr": 5e-7, "group_size": 4}  # the saved config is the one training goes on with
    assert store.summary()["events"] == events
    store.close()


def test_log_event_refuses_an_unknown_kind(store):
    with pytest.raises(KitaeError, match="unknown event kind 'resumd'; did you mean 'resumed'"):
        store.log_event(1, "resumd", "x")


def _as_version(store: RunStore, version: int) -> None:
    """Turn a fresh run.db back into an older schema version, as an older kitae wrote it: 4 has no episode columns
    (samples.turns, sampled_tokens, trained_spans, episode), 3 no samples.thinking_open either, 2 no
    samples.policy_version either, 1 no events table either."""
    for column in ("turns", "sampled_tokens", "trained_spans", "episode"):
        store._conn.execute(f"ALTER TABLE samples DROP COLUMN {column}")
    if version <= 3:
        store._conn.execute("ALTER TABLE samples DROP COLUMN thinking_open")
    if version <= 2:
        store._conn.execute("ALTER TABLE samples DROP COLUMN policy_version")
    if version == 1:
        store._conn.execute("DROP TABLE events")
    store._conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(version),))
    store.close()


def test_a_version_1_database_is_upgraded_when_opened_for_writing(store):
    store.log_metrics(1, {"reward": 0.5})
    _as_version(store, 1)
    with RunStore.open(store.run_dir) as s:
        assert s.summary()["schema_version"] == SCHEMA_VERSION == 5
        s.log_event(1, "resumed", "resumed from checkpoints/step-000001")
        assert [e["kind"] for e in s.events()] == ["resumed"] and s.metrics() == {"reward": [(1, 0.5)]}


def test_a_version_1_database_is_read_as_it_is_by_a_reader(store):
    store.log_metrics(1, {"reward": 0.5})
    _as_version(store, 1)
    with RunStore.open(store.run_dir, read_only=True) as s:
        assert s.summary()["schema_version"] == 1 and s.events() == [] and s.summary()["events"] == []
    conn = sqlite3.connect(store.run_dir / "run.db")  # and reading did not upgrade it
    assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == "1"
    conn.close()


def _group(step: int, version: int | None) -> GroupRecord:
    return GroupRecord("p", [{"role": "user", "content": "p"}], None, {},
                       [SampleRecord("a", 1, "stop", 1.0, 0.0, policy_version=version)], 0)


def test_a_version_2_database_gains_policy_versions_and_its_old_samples_read_as_none(store):
    store.log_groups(1, [_group(1, None)])
    _as_version(store, 2)
    with RunStore.open(store.run_dir, read_only=True) as s:  # a reader: as it is, without the column
        assert s.summary()["schema_version"] == 2
        assert [x.policy_version for x in s.groups(with_samples=True)[0].samples] == [None]
    with RunStore.open(store.run_dir) as s:
        assert s.summary()["schema_version"] == SCHEMA_VERSION
        s.log_groups(2, [_group(2, 0)])  # async: sampled by version 0, trained at step 2
        assert {g.step: g.samples[0].policy_version for g in s.groups(with_samples=True)} == {1: None, 2: 0}


def test_a_version_3_database_gains_thinking_open_and_its_old_samples_read_as_false(store):
    opened = GroupRecord("p", [{"role": "user", "content": "p"}], None, {},
                         [SampleRecord("thought</think>4", 3, "stop", 1.0, 0.0, thinking_open=True),
                          SampleRecord("4", 1, "stop", 1.0, 0.0)], 0)
    store.log_groups(1, [_group(1, None)])
    _as_version(store, 3)
    with RunStore.open(store.run_dir, read_only=True) as s:  # a reader: as it is, without the column
        assert s.summary()["schema_version"] == 3
        assert [x.thinking_open for x in s.groups(with_samples=True)[0].samples] == [False]
    with RunStore.open(store.run_dir) as s:
        assert s.summary()["schema_version"] == SCHEMA_VERSION == 5
        s.log_groups(2, [opened])
        by_step = {g.step: [x.thinking_open for x in g.samples] for g in s.groups(with_samples=True)}
        assert by_step == {1: [False], 2: [True, False]}


def test_backup_copies_the_whole_history(store, tmp_path):
    store.log_metrics(1, {"reward": 0.5})
    store.log_groups(1, [make_group(0, [1.0, 0.0])])
    store.backup(tmp_path / "old" / "run.db")
    store.truncate_after(0)
    with RunStore.open(tmp_path / "old", read_only=True) as old:
        assert old.metrics() == {"reward": [(1, 0.5)]} and old.count_groups() == 1
    assert store.metrics() == {}
