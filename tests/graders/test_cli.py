"""`kitae grade`, `kitae grader validate` and `kitae grader list` on the example specs and data."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kitae.cli.grade import distribution, summarize
from kitae.cli.main import app
from kitae.graders import Grade

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "graders"
runner = CliRunner()


def kitae(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kitae.cli.main", *args], capture_output=True, text=True, timeout=120)


def test_grade_writes_rows_with_grades_and_prints_a_summary(tmp_path):
    out = tmp_path / "graded.jsonl"
    result = runner.invoke(app, ["grade", "--grader", str(EXAMPLES / "numeric.yaml"),
                                 "--data", str(EXAMPLES / "finance.jsonl"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [round(g["score"], 4) for g in rows[0]["grades"]] == [0.875, 0.0, 1.0]  # the seed's examples
    assert rows[0]["samples"][0]["output_text"].startswith("WACC")  # input row kept
    assert rows[2]["grade"] == {"score": None, "sub_scores": {}, "reason": "reference has no number: skipped", "error": None}
    assert "samples: 6  scored: 5  abstained: 1  errors: 0" in result.output
    assert "wrote 3 rows" in result.output


def test_grade_to_stdout_with_an_inline_spec_and_summary_on_stderr(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"item": {"reference_answer": "Paris"}, "sample": {"output_text": "Paris"}}) + "\n")
    result = kitae("grade", "-g", "{type: string_check, operation: eq}", "-d", str(data))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["grade"]["score"] == 1.0
    assert "mean: 1.0000" in result.stderr


def test_grade_with_a_long_inline_spec(tmp_path):
    # over 255 bytes on one line: once stat-ed as a file name ("File name too long")
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"item": {"reference_answer": "Paris"}, "sample": {"output_text": "Paris"}}) + "\n")
    spec = ('{type: python, source: "def grade(sample, item):\\n    return float(sample[\'output_text\'] == '
            'item[\'reference_answer\'])\\n' + "#" * 300 + '\\n"}')
    assert len(spec.encode()) > 255 and "\n" not in spec
    result = kitae("grade", "-g", spec, "-d", str(data))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["grade"]["score"] == 1.0


@pytest.mark.parametrize(
    "spec, data_rows, message",
    [
        ("{type: numeric, tolerance: one}", [], "error: --grader.tolerance: expected a number, got 'one'"),
        ("numerik", [], "error: --grader.type: unknown grader 'numerik'; did you mean 'numeric'?"),
        ("numeric", ['{"item": {}, "sample": {"output_text": 5}}'], "d.jsonl, row 1, field 'sample': expected an object with a string 'output_text'"),
        ("numeric", ['{"item": {}}'], "row 1: give exactly one of 'sample' (one) or 'samples' (a group)"),
        ("numeric", ["", "{oops"], "d.jsonl, row 2: not valid JSON"),
        ("numeric", ['{"sample": {"output_text": "x"}}'], "row 1, field 'item': missing or not an object"),
        ("{type: numeric, tolerance: 0.01, reference: '" + "x" * 300 + "', tolerence: 1}", [],
         "error: --grader.tolerence: unknown key; did you mean 'tolerance'?"),  # long inline: its own error, not ENAMETOOLONG
        ("x" * 300 + ".yaml", [], "error: --grader: grader spec file 'xxx"),  # a long missing file name says so
    ],
)
def test_grade_errors_are_printed_for_people(tmp_path, spec, data_rows, message):
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join(data_rows or ['{"item": {}, "sample": {"output_text": "x"}}']) + "\n")
    result = kitae("grade", "-g", spec, "-d", str(data))
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr


def test_python_grader_example(tmp_path):
    out = tmp_path / "o.jsonl"
    result = runner.invoke(app, ["grade", "-g", str(EXAMPLES / "python.yaml"), "-d", str(EXAMPLES / "labels.jsonl"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert [g["score"] for g in json.loads(out.read_text())["grades"]] == [1.0, 0.2, 0.0]


def test_openai_multi_example(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"item": {"label": "spam", "explanation": "sells pills"},
                                "samples": [{"output_text": '{"label": "spam", "explanation": "sells pills"}'},
                                            {"output_text": '{"label": "ham", "explanation": "sells pills"}'},
                                            {"output_text": "spam"}]}) + "\n")
    out = tmp_path / "o.jsonl"
    result = runner.invoke(app, ["grade", "-g", str(EXAMPLES / "openai_multi.json"), "-d", str(data), "-o", str(out)])
    assert result.exit_code == 0, result.output
    grades = json.loads(out.read_text())["grades"]
    assert [g["score"] for g in grades[:2]] == [1.0, pytest.approx(0.2)]
    assert grades[2]["score"] is None and "sample output is not JSON" in grades[2]["error"]


def test_grade_fails_when_the_grader_failed_on_every_sample(tmp_path):
    """Every sample abstained with an error (no sample output is JSON): exit 1, saying so; the rows are written."""
    data, out = tmp_path / "d.jsonl", tmp_path / "o.jsonl"
    data.write_text("".join(json.dumps({"item": {"label": "spam"}, "sample": {"output_text": text}}) + "\n"
                            for text in ("spam", "not json")))
    result = kitae("grade", "-g", str(EXAMPLES / "openai_multi.json"), "-d", str(data), "-o", str(out))
    assert result.returncode == 1, result.stderr
    assert "error: the grader failed on every sample (2 of 2 with an error, none scored)" in result.stderr
    assert "Traceback" not in result.stderr and len(out.read_text().splitlines()) == 2


def test_grade_succeeds_when_some_samples_were_graded(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"item": {"label": "spam", "explanation": "x"}, "sample": {"output_text": t}})
                            + "\n" for t in ('{"label": "spam", "explanation": "x"}', "not json")))
    result = kitae("grade", "-g", str(EXAMPLES / "openai_multi.json"), "-d", str(data), "-o", str(tmp_path / "o"))
    assert result.returncode == 0, result.stderr
    assert "scored: 1  abstained: 1  errors: 1" in result.stdout


@pytest.mark.parametrize("spec", ["mix.yaml", "json_gate.yaml", "similarity_ja.yaml"])
def test_every_example_spec_grades_the_example_data(spec):
    result = runner.invoke(app, ["grade", "-g", str(EXAMPLES / spec), "-d", str(EXAMPLES / "finance.jsonl"), "-o", "/dev/null"])
    assert result.exit_code == 0, result.output
    assert "samples: 6" in result.output


def test_validate_report_and_verdict():
    result = runner.invoke(app, ["grader", "validate", "-g", str(EXAMPLES / "numeric.yaml"),
                                 "-d", str(EXAMPLES / "finance_labeled.jsonl")])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[0].startswith("samples with both scores: 12")
    assert "Spearman rho: " in lines[1] and "Kendall tau-b: " in lines[1]
    assert "within-group pairwise agreement: 0.958  over 12 pairs (1 tied by the grader)" in lines[2]
    # 12 labels: the same verdict as kitae grader lint's, with the interval (Wilson, 0.958 on 12: 0.70 to 1.00)
    assert lines[-1] == ("INCONCLUSIVE: too few labels to trust: 12, need 30 (pairwise agreement 0.96, 95% interval "
                         "0.70 to 1.00 from 12 labels; Spearman 0.94); label more before a long run")


def test_validate_shows_the_worst_disagreements_with_both_scores():
    result = runner.invoke(app, ["grader", "validate", "-g", str(EXAMPLES / "similarity_ja.yaml"),
                                 "-d", str(EXAMPLES / "support_ja.jsonl")])
    assert result.exit_code == 0, result.output
    assert "row 1: sample 1 you 4 / grader 0.5  vs  sample 2 you 1 / grader 0.815" in result.output
    assert "warning: similarity alone" in result.output


def test_validate_json_output():
    result = runner.invoke(app, ["grader", "validate", "-g", "numeric", "-d", str(EXAMPLES / "finance_labeled.jsonl"), "--json"])
    report = json.loads(result.output)
    assert report["agreement"]["pairs"] == 12
    assert report["verdict"].startswith("INCONCLUSIVE: too few labels to trust: 12, need 30")


def test_list_names_every_type_on_one_plain_line():
    from kitae.graders import GRADERS

    result = runner.invoke(app, ["grader", "list"])
    lines = result.output.splitlines()
    names = [line.split()[0] for line in lines]
    for name in ["string_check", "text_similarity", "python", "multi", "numeric", "format", "math", "answer", "weighted", "gate",
                 "template", "repetition", "overlong", "diversity", "soft_overlong", "reward_model", "length"]:
        assert name in names
    assert names == GRADERS.names()  # one line per type, nothing else
    assert not [line for line in lines if "`" in line]  # no RST markup
    descriptions = [line.split(None, 1)[1] for line in lines]
    assert len(set(descriptions)) == len(descriptions)  # each type says what it is (no shared module docstring)
    assert "label_model        OpenAI's label_model: the model picks one of labels;" in result.output


def test_summary_and_distribution_by_hand():
    grades = [Grade(1.0), Grade(0.0), Grade(1.0), Grade(None, error="boom"), Grade(None)]
    text = summarize(grades)
    assert text.splitlines()[0] == "samples: 5  scored: 3  abstained: 2  errors: 1"
    assert "mean: 0.6667" in text and "error x1: boom" in text
    assert distribution([0.0, 1.0, 1.0], width=10) == [("0", 1, "#####"), ("1", 2, "##########")]
    bins = distribution([0.05, 0.15, 0.25, 0.35, 0.45, 0.55, 0.65, 0.95], bins=2, width=4)
    assert [(label, n) for label, n, _ in bins] == [("[0.05,0.50)", 5), ("[0.50,0.95]", 3)]


@pytest.mark.slow  # a CLI subprocess per case: the full suite runs it, the fast subset leaves it
def test_validate_and_lint_give_one_verdict_on_few_and_on_enough_labels(tmp_path):
    """The example's 12 labels, then the same rows three times (36): validate's verdict and lint's warning agree."""
    import os

    few = EXAMPLES / "finance_labeled.jsonl"
    enough = tmp_path / "labeled36.jsonl"
    enough.write_text(few.read_text() * 3)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}

    def kitae(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "kitae.cli.main", *args], capture_output=True, text=True,
                              timeout=120, env=env)

    spec = str(EXAMPLES / "numeric.yaml")
    on_few, lint_few = kitae("grader", "validate", "-g", spec, "-d", str(few)), kitae("grader", "lint", "-g", spec,
                                                                                       "-d", str(few))
    assert on_few.returncode == 0 and lint_few.returncode == 0, on_few.stderr + lint_few.stderr
    assert on_few.stdout.splitlines()[-1].startswith("INCONCLUSIVE: too few labels to trust: 12, need 30 (")
    assert "95% interval 0.70 to 1.00 from 12 labels" in on_few.stdout and "fine for a long run" not in on_few.stdout
    assert "too few labels to trust: 12, need 30" in lint_few.stdout
    on_enough = kitae("grader", "validate", "-g", spec, "-d", str(enough))
    lint_enough = kitae("grader", "lint", "-g", spec, "-d", str(enough), "--strict")
    assert on_enough.returncode == 0, on_enough.stderr
    # Wilson's interval of 23/24 on 36 labels: 0.84 to 0.99
    assert on_enough.stdout.splitlines()[-1].startswith(
        "GOOD: the grader ranks answers like you (pairwise agreement 0.96, 95% interval 0.84 to 0.99 from 36 labels")
    assert lint_enough.returncode == 0 and "too few labels" not in lint_enough.stdout, lint_enough.stdout
