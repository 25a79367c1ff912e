"""The run store keeps every trajectory (schema version 5): group_records builds an episode's fields from the
Completion's loss mask and Episode, they round-trip through a real run.db, a single-turn sample stores NULL in
every new column and reads as before, and a version-4 database opens (read as it is, or upgraded)."""

from __future__ import annotations

import sqlite3
from dataclasses import asdict

import pytest
import torch

from kitae.rollout.base import Completion
from kitae.store import SCHEMA_VERSION, RunStore
from kitae.store.failures import StoreDamaged
from kitae.store.images import RunImages
from kitae.trainer.metrics import group_records
from tests.agents._store_fixtures import (
    CALL_0,
    PROMPT,
    XSS_ARG,
    XSS_RESULT,
    grades_of,
    step_1_completions,
    write_agent_run,
)
from tests.store.hand_made import make_group

NEW_COLUMNS = ("turns", "sampled_tokens", "trained_spans", "episode")


def test_schema_version_is_5():
    assert SCHEMA_VERSION == 5


def test_group_records_keeps_the_episode_spans_and_sampled_tokens(tmp_path):
    completions = step_1_completions()
    [group] = group_records([{"messages": [{"role": "user", "content": PROMPT}]}], [completions],
                            [grades_of([1.0, None, 1.0], ["ok", None, "ok"])], torch.tensor([[0.5, -1.0, 0.5]]),
                            RunImages(tmp_path))
    right, hostile, single = group.samples
    assert right.trained_spans == [[0, 12], [30, 36]] and right.sampled_tokens == 18 == completions[0].sampled_tokens
    assert right.completion_tokens == 36  # every token after the prompt, tool results included
    assert right.n_turns == 2 and right.episode_end == "answer" and right.environment_reward == 1.0
    assert right.episode == asdict(completions[0].episode)
    assert right.episode["turns"][0]["text"] == CALL_0
    assert right.tool_calls == [{"name": "calculator", "arguments": {"expression": "37 * 41"}, "id": None,
                                 "result": "1517", "error": None, "seconds": 0.01, "turn": 0,
                                 "error_kind": None}]
    assert hostile.trained_spans == [[0, 14], [34, 44]] and hostile.sampled_tokens == 24
    assert hostile.episode_end == "max_turns" and hostile.environment_reward == 0.0
    assert [c["error"] for c in hostile.tool_calls] == [None, "unknown tool 'search'"]
    # a single-turn completion: nothing new, so its record is the one an older kitae made
    assert (single.episode, single.trained_spans, single.sampled_tokens) == (None, None, None)
    assert single.n_turns == 1 and single.episode_end is None and single.tool_calls == []
    assert single.spans() == [[0, 7]]


def test_episodes_round_trip_through_run_db(tmp_path):
    run_dir = write_agent_run(tmp_path)
    expected = step_1_completions()
    with RunStore.open(run_dir, read_only=True) as store:
        [group] = store.groups(step=1, with_samples=True)
        right, hostile, single = group.samples
        assert right.episode == asdict(expected[0].episode)
        assert hostile.episode == asdict(expected[1].episode)
        assert hostile.tool_calls[0]["arguments"] == {"expression": XSS_ARG}
        assert hostile.tool_calls[0]["result"] == XSS_RESULT  # untrusted text kept as it was, every character
        assert (right.trained_spans, right.sampled_tokens) == ([[0, 12], [30, 36]], 18)
        assert (single.episode, single.trained_spans, single.sampled_tokens) == (None, None, None)
        store.check_cells()  # the new JSON columns are valid JSON of their type
    con = sqlite3.connect(run_dir / "run.db")
    rows = con.execute("SELECT turns, sampled_tokens, json_extract(episode, '$.end'), "
                       "json_extract(episode, '$.environment_reward') FROM samples WHERE step = 1 "
                       "ORDER BY sample_index").fetchall()
    con.close()
    assert rows == [(2, 18, "answer", 1.0), (2, 24, "max_turns", 0.0), (None, None, None, None)]


def _single_turn_run(tmp_path, name: str) -> RunStore:
    store = RunStore.create(tmp_path / name, name=name, config={}, model="tiny")
    store.log_groups(1, [make_group(0, [1.0, 0.0, None]), make_group(1, [0.5, 0.5], truncated=1)])
    store.log_metrics(1, {"reward": 0.5})
    return store


def _as_version_4(store: RunStore) -> None:
    """The run.db as kitae with schema version 4 wrote it: no episode columns."""
    for column in NEW_COLUMNS:
        store._conn.execute(f"ALTER TABLE samples DROP COLUMN {column}")
    store._conn.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")
    store.close()


def _read_all(run_dir) -> list[dict]:
    with RunStore.open(run_dir, read_only=True) as s:
        return [asdict(g) for g in s.groups(order="step", with_samples=True)]


def test_a_single_turn_run_stores_null_episode_columns_and_reads_as_a_version_4_one(tmp_path):
    _single_turn_run(tmp_path, "v5").close()
    _as_version_4(_single_turn_run(tmp_path, "v4"))
    con = sqlite3.connect(tmp_path / "v5" / "run.db")
    cells = con.execute(f"SELECT {', '.join(NEW_COLUMNS)} FROM samples").fetchall()
    con.close()
    assert len(cells) == 5 and set(cells) == {(None,) * 4}  # nothing stored for single-turn samples
    v4, v5 = _read_all(tmp_path / "v4"), _read_all(tmp_path / "v5")
    for groups in (v4, v5):
        for g in groups:
            g.pop("id")
    assert v4 == v5 and v5[0]["samples"][0]["text"] == "answer 0"


def test_a_version_4_database_is_read_as_it_is_then_upgraded_to_keep_episodes(tmp_path):
    _as_version_4(_single_turn_run(tmp_path, "old"))
    with RunStore.open(tmp_path / "old", read_only=True) as s:  # a reader: as it is, without the columns
        assert s.summary()["schema_version"] == 4
        samples = s.groups(step=1, order="step", with_samples=True)[0].samples
        assert [x.episode for x in samples] == [None] * 3 and [x.spans() for x in samples] == [[[0, 8]]] * 3
        s.check_cells()
    with RunStore.open(tmp_path / "old") as s:  # a writer upgrades it in place, keeping every sample
        assert s.summary()["schema_version"] == SCHEMA_VERSION == 5
        row = {"messages": [{"role": "user", "content": PROMPT}]}
        s.log_groups(2, group_records([row], [step_1_completions()], [grades_of([1.0, 0.0, 1.0], [None] * 3)],
                                      torch.tensor([[0.0, 0.0, 0.0]]), RunImages(s.run_dir)))
        by_step = {g.step: [x.n_turns for x in g.samples] for g in s.groups(order="step", with_samples=True)
                   if g.group_index == 0}
        assert by_step == {1: [1, 1, 1], 2: [2, 2, 1]}


@pytest.mark.parametrize("column, bad, problem", [
    ("episode", "{not json", "not JSON"),  # hand-edited
    ("trained_spans", '{"a": 1}', "expected a JSON array"),
])
def test_a_damaged_episode_cell_is_named(tmp_path, column, bad, problem):
    run_dir = write_agent_run(tmp_path)
    con = sqlite3.connect(run_dir / "run.db")
    con.execute(f"UPDATE samples SET {column} = ? WHERE step = 1 AND sample_index = 0", (bad,))
    con.commit()
    con.close()
    with RunStore.open(run_dir, read_only=True) as s:
        with pytest.raises(StoreDamaged, match=f"samples.*{column}.*{problem}.*SET {column} = NULL WHERE"):
            s.check_cells()
        with pytest.raises(StoreDamaged, match=f"column {column}: {problem}"):  # reading the sample says so too
            s.groups(step=1, with_samples=True)
    con = sqlite3.connect(run_dir / "run.db")  # the repair the message offers: the sample reads as single-turn
    con.execute(f"UPDATE samples SET {column} = NULL WHERE step = 1 AND sample_index = 0")
    con.commit()
    con.close()
    with RunStore.open(run_dir, read_only=True) as s:
        s.check_cells()
        assert s.groups(step=1, with_samples=True)[0].samples[0].text


def test_text_in_sampled_tokens_is_named(tmp_path):
    run_dir = write_agent_run(tmp_path)
    con = sqlite3.connect(run_dir / "run.db")
    con.execute("UPDATE samples SET sampled_tokens = 'many' WHERE step = 1 AND sample_index = 0")
    con.commit()
    con.close()
    with RunStore.open(run_dir, read_only=True) as s:
        with pytest.raises(StoreDamaged, match="column sampled_tokens: expected a number or NULL, got 'many'"):
            s.groups(step=1, with_samples=True)


def test_a_partial_mask_without_an_episode_keeps_only_its_spans(tmp_path):
    """A completion with a loss mask and no Episode (an engine that masks a forced prefix) keeps its spans."""
    c = Completion("x", [1], [5, 6, 7, 8], [0.0, 0.0, -1.0, -1.0], "stop", loss_mask=[0, 0, 1, 1])
    [group] = group_records([{"messages": [{"role": "user", "content": "q"}]}], [[c]], [grades_of([1.0], [None])],
                            torch.tensor([[0.0]]), RunImages(tmp_path))
    s = group.samples[0]
    assert (s.trained_spans, s.sampled_tokens, s.episode, s.n_turns) == ([[2, 4]], 2, None, 1)
