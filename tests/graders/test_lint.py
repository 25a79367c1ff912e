"""`kitae grader lint`: each of the hosted RFT grader guide's common mistakes warned about, and not warned about
where the spec or data is fine; --strict and --json."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kitae.cli.main import app
from kitae.graders.agreement import agreement_interval
from kitae.graders.lint import lint, same_model
from kitae.graders.rows import Row, parse_row

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "graders"
runner = CliRunner()
JUDGE = {"type": "judge", "model": "Qwen/Qwen2.5-0.5B-Instruct", "base_url": "http://127.0.0.1:9/v1"}


def prompts(*references: str | None) -> list[Row]:
    items = [{"prompt": "q"} if r is None else {"prompt": "q", "reference_answer": r} for r in references]
    return [Row(data=i, item=i, samples=[], is_group=True, number=n) for n, i in enumerate(items, 1)]


def kinds(spec, rows=None, policy=None) -> list[str]:
    return [w.kind for w in lint(spec, rows, policy).warnings]


@pytest.mark.parametrize("judge_model, policy, warned", [
    ("Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct", True),  # the same Hub id
    ("qwen/qwen2.5-0.5b-instruct", "/models/Qwen2.5-0.5B-Instruct/", True),  # a local copy of it
    ("kitae-tiny-base", "bundled", True),  # what `model: {path: bundled}` loads
    ("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct", False),
])
def test_judge_is_policy(judge_model, policy, warned):
    spec = {"type": "weighted", "graders": {"j": {**JUDGE, "model": judge_model, "weight": 0.7},
                                             "n": {"type": "numeric", "weight": 0.3}}}
    assert ("judge_is_policy" in kinds(spec, policy=policy)) is warned
    assert "judge_is_policy" not in kinds(spec)  # no policy model given: nothing to compare


def test_same_model_of_one_folder(tmp_path):
    (tmp_path / "m").mkdir()
    assert same_model(str(tmp_path / "m"), str(tmp_path / "." / "m"))


def test_numeric_without_numbers_says_how_many_rows_it_skips():
    rows = prompts("47", "Paris", "the finance director", None)  # 3 of 4 without a number (one without a reference)
    (warning,) = lint({"type": "numeric"}, rows).warnings
    assert warning.kind == "numeric_without_numbers"
    assert "skips 3 of 4 rows" in warning.message
    assert kinds({"type": "numeric"}, prompts("47", "12%", "Paris")) == []  # most hold a number
    assert kinds({"type": "numeric"}) == []  # no data, nothing to count


def test_numeric_inside_a_mix_with_its_own_reference_field():
    rows = [Row(data={}, item={"answer": "Paris", "reference_answer": "47"}, samples=[], is_group=True, number=1)]
    spec = {"type": "weighted", "graders": {"n": {"type": "numeric", "reference": "{{item.answer}}"}}}
    assert kinds(spec, rows) == ["numeric_without_numbers"]  # the template the grader reads, not reference_answer


SIM = {"type": "text_similarity", "evaluation_metric": "bleu"}


@pytest.mark.parametrize("spec, rows, warned", [
    (SIM, prompts("The finance director approves the report.", "It is shared with the client."), True),
    (SIM, prompts("レポートを開き、共有をクリックしてクライアントを選択します。"), True),  # 29 characters, no spaces
    (SIM, prompts("47", "Paris"), False),  # short answers: similarity is close to a match
    (SIM, None, True),  # no data: warned, and told to pass -d
    ({"type": "weighted", "graders": {"s": {**SIM, "weight": 0.3}, "j": {**JUDGE, "weight": 0.7}}},
     prompts("The finance director approves the report."), False),
    ({"type": "weighted", "graders": {"s": SIM, "j": {**JUDGE, "weight": 0}}},  # a judge logged only
     prompts("The finance director approves the report."), True),
])
def test_similarity_alone(spec, rows, warned):
    assert ("similarity_alone" in kinds(spec, rows)) is warned


def labelled(n: int) -> list[Row]:
    record = {"item": {"reference_answer": "47"}, "samples": [{"output_text": "47", "human_score": 5},
                                                               {"output_text": "48", "human_score": 1}]}
    return [parse_row(record, "rows", i) for i in range(1, n + 1)]


def test_small_validation_set():
    (warning,) = lint({"type": "answer"}, labelled(6)).warnings  # 12 labelled samples
    assert warning.kind == "small_validation_set"
    # the words of kitae grader validate's verdict; Wilson's interval of 0.8 on 12: (0.8 + z²/24 ± z·sqrt(0.16/12 +
    # z²/576)) / (1 + z²/12) with z = 1.96: 0.52 to 0.94
    assert warning.message.startswith("too few labels to trust: 12, need 30: an agreement of 0.8 on 12 labels has a "
                                      "95% interval of 0.52 to 0.94"), warning.message
    assert kinds({"type": "answer"}, labelled(15)) == []  # 30
    assert kinds({"type": "answer"}, prompts("47")) == []  # not labelled data
    assert [round(x, 2) for x in agreement_interval(0.8, 30)] == [0.63, 0.90]  # about ±0.14: the GOOD-WEAK gap


def test_cli_warns_exits_0_and_strict_exits_1():
    args = ["grader", "lint", "-g", str(EXAMPLES / "numeric.yaml"), "-d", str(EXAMPLES / "finance_labeled.jsonl")]
    plain = runner.invoke(app, args)
    strict = runner.invoke(app, args + ["--strict"])
    as_json = runner.invoke(app, args + ["--json"])
    assert plain.exit_code == 0, plain.output
    assert strict.exit_code == 1
    assert "warning (small_validation_set): too few labels to trust: 12, need 30" in plain.output
    report = json.loads(as_json.output)
    assert [w["kind"] for w in report["warnings"]] == ["small_validation_set"]
    assert "judge_is_policy" in report["checks"]


def test_cli_clean_spec_strict_exits_0(tmp_path):
    data = tmp_path / "sums.jsonl"
    data.write_text(json.dumps({"prompt": "12+35=?", "reference_answer": "47"}) + "\n")
    result = runner.invoke(app, ["grader", "lint", "-g", "numeric", "-d", str(data), "--strict",
                                 "--policy-model", "bundled"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("0 warning(s) from 4 checks")


def test_cli_judge_is_policy_from_a_file(tmp_path):
    spec = tmp_path / "judge.yaml"
    spec.write_text(f"type: judge\nmodel: {JUDGE['model']}\nbase_url: {JUDGE['base_url']}\n")
    result = runner.invoke(app, ["grader", "lint", "-g", str(spec), "--policy-model", JUDGE["model"], "--strict"])
    assert result.exit_code == 1
    assert "warning (judge_is_policy): the judge grader's model 'Qwen/Qwen2.5-0.5B-Instruct' is the policy" in result.output


KITAE = [sys.executable, "-m", "kitae.cli.main"]


@pytest.mark.slow  # a CLI subprocess per case: the full suite runs it, the fast subset leaves it
@pytest.mark.parametrize("weights", [
    ("nan", "1"),  # NaN: the mix would score NaN
    ("-1e400", "1"),  # beyond the largest float: reads as -infinity
    ("0", "0"),  # every part logged only: nothing counts toward the reward
])
def test_lint_refuses_what_every_other_command_refuses_in_the_same_words(tmp_path, weights):
    spec = tmp_path / "mix.yaml"
    spec.write_text(f"type: weighted\ngraders:\n  a: {{type: numeric, weight: {weights[0]}}}\n"
                    f"  b: {{type: string_check, operation: eq, weight: {weights[1]}}}\n")
    data = str(EXAMPLES / "finance_labeled.jsonl")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    run = lambda *args: subprocess.run([*KITAE, *args], capture_output=True, text=True, timeout=120, env=env)  # noqa: E731
    linted = run("grader", "lint", "-g", str(spec), "-d", data)
    validated = run("grader", "validate", "-g", str(spec), "-d", data)
    graded = run("grade", "-g", str(spec), "-d", data)
    refusal = validated.stderr.strip()
    assert validated.returncode == 2 and refusal.startswith("error: --grader.graders"), validated.stderr
    assert graded.returncode == 2 and graded.stderr.strip() == refusal
    assert linted.returncode == 2 and "Traceback" not in linted.stderr, linted.stdout + linted.stderr
    assert linted.stderr.splitlines()[0] == refusal  # one validator, one wording
    as_json = json.loads(run("grader", "lint", "-g", str(spec), "--json").stdout)
    assert as_json["errors"] == [refusal.removeprefix("error: ")] and as_json["warnings"] == []
