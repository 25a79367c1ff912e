"""`kitae runs samples NAME [--step N] [--json]` on a real run store holding two agent episodes and single-turn
samples: what people read, what scripts parse, and the errors for a run or step that is not there."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from kitae.errors import KitaeError
from kitae.store import GroupRecord, RunStore, SampleRecord
from tests.agents._store_fixtures import ANSWER, PROMPT, UNSENT, XSS_ARG, XSS_RESULT, write_agent_run, write_odd_run
from tests.store.hand_made import runs_app


@pytest.fixture
def app():
    return runs_app()


@pytest.fixture
def runs_dir(tmp_path):
    write_agent_run(tmp_path)
    return tmp_path


def samples(app, runs_dir, *args):
    return CliRunner().invoke(app, ["runs", "samples", "agent-run", "--runs", str(runs_dir), *args])


def test_json_has_each_sample_with_its_turns_tool_calls_components_and_spans(app, runs_dir):
    result = samples(app, runs_dir, "--step", "1", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert (out["run"], out["step"], len(out["groups"])) == ("agent-run", 1, 1)
    group = out["groups"][0]
    assert group["messages"] == [{"role": "user", "content": PROMPT}] and group["reference"] == "1517"
    right, hostile, single = group["samples"]
    assert right["trained_spans"] == [[0, 12], [30, 36]] and right["untrained_spans"] == [[12, 30]]
    assert (right["turns"], right["episode_end"], right["sampled_tokens"], right["completion_tokens"]) == \
        (2, "answer", 18, 36)
    assert right["text"] == ANSWER and right["environment_reward"] == 1.0
    assert right["components"] == {"accuracy": {"score": 1.0, "reason": "1517 matches the reference", "error": None,
                                                "sub_scores": {}}}
    assert [m["role"] for m in right["messages"]] == ["assistant", "tool", "assistant"]
    assert right["messages"][0]["tool_calls"][0]["function"]["name"] == "calculator"
    assert right["tool_calls"] == [{"name": "calculator", "arguments": {"expression": "37 * 41"}, "id": None,
                                    "result": "1517", "error": None, "seconds": 0.01, "turn": 0,
                                    "error_kind": None}]
    assert [t["end"] for t in right["episode"]["turns"]] == [12, 36]
    assert hostile["untrained_spans"] == [[14, 34], [44, 53]] and hostile["episode_end"] == "max_turns"
    assert [(c["name"], c["error"]) for c in hostile["tool_calls"]] == [("calculator", None),
                                                                       ("search", "unknown tool 'search'")]
    assert hostile["tool_calls"][0]["result"] == XSS_RESULT
    assert hostile["components"]["accuracy"]["error"] == "no answer to grade" and hostile["reward"] is None
    # a single-turn sample has the same keys: one assistant message, every token trained, no episode
    assert set(single) == set(right)
    assert single["messages"] == [{"role": "assistant", "content": "The answer is 1517<|im_end|>"}]
    assert (single["trained_spans"], single["untrained_spans"], single["turns"], single["episode"]) == \
        ([[0, 7]], [], 1, None)
    assert (single["episode_end"], single["tool_calls"], single["sampled_tokens"]) == (None, [], 7)


def test_text_for_people_shows_turns_tool_calls_errors_and_spans(app, runs_dir):
    result = samples(app, runs_dir, "--step", "1")
    assert result.exit_code == 0, result.output
    out = result.output
    for expected in [
        "run agent-run · step 1 · 1 group",
        f"  user: {PROMPT}",
        "-- sample #0 · reward 1 · advantage +0.5 · finish stop · episode end answer · 2 turns · 36 tokens, "
        "18 sampled",
        "  trained tokens: [0, 12) [30, 36)   not trained: [12, 30)",
        '    tool call calculator({"expression": "37 * 41"}) · 0.01 s\n      -> 1517\n',
        "  [12, 30) not trained: the tool results and the template's tokens",
        "  reward accuracy: 1 · 1517 matches the reference",
        "episode end max_turns",
        "      ERROR unknown tool 'search'",
        "  [44, 53) not trained",  # the tool results after the last turn of an episode cut by max_turns
        "    error no answer to grade",
        "-- sample #2 · reward 1 · advantage +0.5 · finish stop · 1 turn · 7 tokens\n  trained tokens: [0, 7)\n"
        "  assistant: The answer is 1517<|im_end|>",
    ]:
        assert expected in out, expected
    assert XSS_ARG in out  # printed as the text it is


def test_the_last_step_by_default_and_one_group(app, runs_dir):
    result = samples(app, runs_dir, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["step"] == 2
    one = samples(app, runs_dir, "--step", "1", "--group", "0", "--json")
    assert [g["group_index"] for g in json.loads(one.output)["groups"]] == [0]


@pytest.mark.parametrize("args, message", [
    (["--step", "9"], "run 'agent-run' has no samples at step 9; steps with samples: 1-2"),
    (["--step", "1", "--group", "3"], "run 'agent-run' has no group 3 at step 1; its groups are 0 to 0"),
])
def test_an_unknown_step_or_group_is_an_error_naming_what_there_is(app, runs_dir, args, message):
    result = samples(app, runs_dir, *args)
    assert isinstance(result.exception, KitaeError)  # kitae.cli.main prints it and exits 2
    assert str(result.exception) == message


def test_unknown_run_and_a_run_without_samples_in_the_real_command(runs_dir):
    with RunStore.create(runs_dir / "empty-run", name="empty-run", config={}, model="tiny"):
        pass
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for name, message in [("agent-rn", f"no run 'agent-rn' in '{runs_dir}'; did you mean 'agent-run'?"),
                          ("empty-run", "run 'empty-run' has no samples logged yet")]:
        proc = subprocess.run([sys.executable, "-m", "kitae.cli.main", "runs", "samples", name, "--runs",
                               str(runs_dir)], capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 2 and proc.stderr.startswith(f"error: {message}"), proc.stderr
        assert "Traceback" not in proc.stderr


def test_control_characters_in_model_text_are_shown_escaped(app, tmp_path):
    """A completion that would clear the terminal and retitle the window prints as visible escapes."""
    hostile = "4\x1b[2J\x1b]0;pwned\x07 done\tok"
    with RunStore.create(tmp_path / "ctl", name="ctl", config={}, model="tiny") as store:
        store.log_groups(1, [GroupRecord("q", [{"role": "user", "content": "q"}], None, {},
                                         [SampleRecord(hostile, 3, "stop", 1.0, 0.0)], 0)])
    result = CliRunner().invoke(app, ["runs", "samples", "ctl", "--runs", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output and "\x07" not in result.output
    assert "4\\x1b[2J\\x1b]0;pwned\\x07 done\tok" in result.output
    as_json = CliRunner().invoke(app, ["runs", "samples", "ctl", "--runs", str(tmp_path), "--json"])
    assert json.loads(as_json.output)["groups"][0]["samples"][0]["text"] == hostile and "\x1b" not in as_json.output


def test_results_the_model_never_read_and_a_hand_edited_episode(app, tmp_path):
    write_odd_run(tmp_path)
    result = CliRunner().invoke(app, ["runs", "samples", "odd-run", "--runs", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert f"      -> {UNSENT}" in result.output and "episode end max_tool_calls" in result.output
    assert "-- sample #1 · reward 1 · advantage +1 · finish stop · episode end answer · 0 turns" in result.output
    as_json = json.loads(CliRunner().invoke(app, ["runs", "samples", "odd-run", "--runs", str(tmp_path),
                                                  "--json"]).output)
    odd = as_json["groups"][0]["samples"][1]
    assert (odd["turns"], odd["tool_calls"], odd["messages"]) == (0, [], 7)


def test_episodes_stored_before_error_kind_still_read(app, runs_dir):
    """A run.db written before tool calls carried error_kind (the episode JSON lacks the key): the store, --json
    and the text read it as they did, the error shown by its words."""
    import sqlite3

    db = runs_dir / "agent-run" / "run.db"
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT group_id, sample_index, episode FROM samples WHERE episode IS NOT NULL").fetchall()
        assert rows and all('"error_kind"' in episode for *_, episode in rows)  # what is stripped below
        for group_id, index, episode in rows:
            old = json.loads(episode)
            for turn in old["turns"]:
                for c in turn["tool_calls"]:
                    del c["error_kind"]
            conn.execute("UPDATE samples SET episode = ? WHERE group_id = ? AND sample_index = ?",
                         (json.dumps(old), group_id, index))
    conn.close()
    result = samples(app, runs_dir, "--step", "1", "--json")
    assert result.exit_code == 0, result.output
    hostile = json.loads(result.output)["groups"][0]["samples"][1]
    assert [(c["name"], c["error"], "error_kind" in c) for c in hostile["tool_calls"]] == [
        ("calculator", None, False), ("search", "unknown tool 'search'", False)]
    text = samples(app, runs_dir, "--step", "1")
    assert text.exit_code == 0 and "      ERROR unknown tool 'search'" in text.output
