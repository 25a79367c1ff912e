"""`kitae runs list` and `kitae runs show` on real run stores."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from kitae.cli.runs import fmt_number
from kitae.errors import KitaeError
from kitae.store import RunStore

from tests.store.hand_made import make_group, runs_app


@pytest.fixture
def app():
    return runs_app()


@pytest.fixture
def runs_dir(tmp_path):
    """Three runs: a finished one with evals, a crashed one (its trainer is gone), a broken run.db."""
    runs = tmp_path / "runs"
    with RunStore.create(runs / "gsm8k-a", name="gsm8k-a", config={"lr": 1e-6}, model="Qwen/Qwen3-0.6B") as s:
        s.log_eval(0, {"score": 0.125, "accuracy": 0.125})
        for step in (1, 2, 3):
            s.log_metrics(step, {"reward": step / 4, "kl": 0.001 * step})
            s.log_groups(step, [make_group(0, [1.0, 0.0])])
        s.log_metrics(3, {"entropy": None})
        s.log_eval(3, {"score": 0.375, "accuracy": 0.4})
        s.finish("finished", {"best_eval": 0.375})
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with RunStore.create(runs / "gsm8k-b", name="gsm8k-b", config={}, model="tiny") as s:
        s.log_metrics(1, {"reward": 0.5})
        s._conn.execute("UPDATE run SET pid = ?", (dead.pid,))
    (runs / "broken").mkdir()
    (runs / "broken" / "run.db").write_bytes(b"this is not a database" * 100)
    (runs / "not-a-run").mkdir()  # no run.db: not listed
    return runs


def test_list_prints_one_line_per_run(app, runs_dir):
    result = CliRunner().invoke(app, ["runs", "list", "--runs", str(runs_dir)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == ["NAME", "STATUS", "MODEL", "STEPS", "REWARD", "EVAL", "UPDATED"]
    assert [line.split()[0] for line in lines[1:4]] == ["gsm8k-b", "gsm8k-a", "broken"]  # newest first
    rows = {line.split()[0]: line.split()[1:6] for line in lines[1:4]}
    assert rows["gsm8k-a"] == ["finished", "Qwen/Qwen3-0.6B", "3", "0.75", "0.375"]
    assert rows["gsm8k-b"] == ["crashed", "tiny", "1", "0.5", "-"]
    assert rows["broken"] == ["unreadable", "-", "-", "-", "-"]
    assert "broken: " in lines[4] and "not-a-run" not in result.output


def test_list_of_an_empty_folder(app, tmp_path):
    result = CliRunner().invoke(app, ["runs", "list", "--runs", str(tmp_path)])
    assert result.exit_code == 0 and result.output.startswith("no runs in")


def test_show_for_people(app, runs_dir):
    result = CliRunner().invoke(app, ["runs", "show", "gsm8k-a", "--runs", str(runs_dir)])
    assert result.exit_code == 0, result.output
    out = result.output
    for expected in [
        "run       gsm8k-a",
        "status    finished",
        "model     Qwen/Qwen3-0.6B",
        "steps     3",
        "  reward   0.75",
        "  entropy  -",
        "evals (2)",
        "  step  score  accuracy",
        "     0  0.125     0.125",
        "     3  0.375       0.4",
        "final summary",
        "  best_eval: 0.375",
    ]:
        assert expected in out, expected
    assert "config" not in out and "lr:" not in out  # the config only on request


def test_show_prints_the_config_on_request(app, runs_dir):
    result = CliRunner().invoke(app, ["runs", "show", "gsm8k-a", "--runs", str(runs_dir), "--config"])
    assert result.exit_code == 0, result.output
    assert result.output.rstrip().endswith("config\n  lr: 1.0e-06")


def test_show_lists_every_eval_once_and_no_summary_twice(app, tmp_path):
    """A trainer-like run: five evals with slices; its final summary repeats the summary (not printed again)."""
    runs = tmp_path / "runs"
    with RunStore.create(runs / "zero", name="zero", config={"lr": 3e-4}, model="bundled") as s:
        for step in range(0, 401, 100):
            s.log_metrics(max(step, 1), {"reward": step / 400})
            s.log_eval(step, {"pass@1": 0.1 + step / 2000, "compliance": 0.5, "pass@1/easy": 0.4, "pass@1/ja": 0.2})
        s.finish("finished", {"status": "finished", "name": "zero", "steps": 400, "first_eval": {"step": 0}})
    out = CliRunner().invoke(app, ["runs", "show", "zero", "--runs", str(runs)]).output
    lines = out.splitlines()
    header = lines.index("evals (5)")
    assert lines[header + 1].split() == ["step", "score", "pass@1", "compliance"]
    assert [line.split()[:3] for line in lines[header + 2 : header + 7]] == [
        ["0", "0.1", "0.1"], ["100", "0.15", "0.15"], ["200", "0.2", "0.2"], ["300", "0.25", "0.25"],
        ["400", "0.3", "0.3"]]
    assert "also per slice: pass@1/easy, pass@1/ja" in lines[header + 7]
    assert "final summary" not in out and out.count("status") == 1

    data = json.loads(CliRunner().invoke(app, ["runs", "show", "zero", "--runs", str(runs), "--json"]).output)
    assert [e["step"] for e in data["all_evals"]] == [0, 100, 200, 300, 400]
    assert data["all_evals"][2]["metrics"] == {"pass@1": 0.2, "compliance": 0.5, "pass@1/easy": 0.4,
                                               "pass@1/ja": 0.2}


def test_show_says_when_code_ran_without_a_sandbox(app, tmp_path):
    config = {"rewards": [{"name": "tests", "grader": {"type": "code", "sandbox": "none"}},
                          {"name": "style", "grader": {"type": "python", "source": "..."}}]}
    RunStore.create(tmp_path / "unboxed", name="unboxed", config=config, model="tiny").close()
    out = CliRunner().invoke(app, ["runs", "show", "unboxed", "--runs", str(tmp_path)]).output
    assert "sandbox   none at rewards[0].grader: this run ran untrusted code WITHOUT isolation" in out
    as_json = CliRunner().invoke(app, ["runs", "show", "unboxed", "--runs", str(tmp_path), "--json"]).output
    assert json.loads(as_json)["unsandboxed"] == ["rewards[0].grader"]


def test_show_json_for_scripts(app, runs_dir):
    result = CliRunner().invoke(app, ["runs", "show", "gsm8k-a", "--runs", str(runs_dir), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert (summary["status"], summary["steps"], summary["evals"]) == ("finished", 3, 2)
    assert summary["metrics"]["reward"] == {"step": 3, "value": 0.75}
    assert summary["metrics"]["kl"] == {"step": 3, "value": 0.003}
    assert summary["first_eval"]["score"] == 0.125 and summary["latest_eval"]["metrics"]["accuracy"] == 0.4
    assert summary["config"] == {"lr": 1e-6} and summary["final"] == {"best_eval": 0.375}
    assert summary["unsandboxed"] == []


def test_show_accepts_a_run_folder_path(app, runs_dir):
    result = CliRunner().invoke(app, ["runs", "show", str(runs_dir / "gsm8k-b"), "--json"])
    assert result.exit_code == 0 and json.loads(result.output)["status"] == "crashed"


def test_show_unknown_run_raises_with_did_you_mean(app, runs_dir):
    result = CliRunner().invoke(app, ["runs", "show", "gsm8k_a", "--runs", str(runs_dir)])
    assert isinstance(result.exception, KitaeError)  # kitae.cli.main prints it and exits 2
    assert str(result.exception) == (
        f"no run 'gsm8k_a' in '{runs_dir}'; did you mean 'gsm8k-a'? (runs: broken, gsm8k-a, gsm8k-b)"
    )


@pytest.mark.parametrize("value, text", [(None, "-"), (0.75, "0.75"), (0.0021, "0.0021"), (123456.0, "1.235e+05")])
def test_fmt_number(value, text):
    assert fmt_number(value) == text


def test_show_lists_what_happened_to_the_run(app, tmp_path):
    with RunStore.create(tmp_path / "r", name="r", config={"optim": {"lr": 1e-3}}, model="tiny") as s:
        s.log_metrics(4, {"reward": 0.5})
        s.log_event(2, "checkpoint_skipped", "checkpoints/step-000004: state.pt is missing")
        s.change_config(2, {"optim": {"lr": 5e-4}}, "optim.lr: 0.001 → 0.0005",
                        [{"field": "optim.lr", "old": 1e-3, "new": 5e-4}])
    result = CliRunner().invoke(app, ["runs", "show", str(tmp_path / "r"), "--config"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    at = lines.index("events (2)")
    assert lines[at + 1].split()[2:] == ["step", "2", "checkpoint_skipped", "checkpoints/step-000004:", "state.pt",
                                         "is", "missing"]
    assert lines[at + 2].split()[2:] == ["step", "2", "config_changed", "optim.lr:", "0.001", "→", "0.0005"]
    assert "lr: 0.0005" in result.output  # the config shown is the one training went on with
