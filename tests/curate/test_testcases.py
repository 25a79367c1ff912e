"""`kitae curate testcases` on the bundled code set keeps and drops exactly what a hand count says.

The hand count, from the solutions as written in scripts/build_code_set.py (6 generated cases, all 10 solutions,
agree 7, min_pass 9; indices are into each row's `solutions`):

- kept, every solution right: the other 16 problems;
- kept, one deliberately wrong solution caught: max-of-list 9 (second largest), prime-check 9 (crashes on
  n = 1, case 0), fibonacci 9 (never ends for n = 0, case 0), prefix-sums 9 (C++ int overflow),
  distinct-count 9 (does not compile), leap-year 9 (1900, case 0), caesar 9 (no wrap past z);
- kept, cases filtered: balanced-brackets keeps the 3 odd case numbers (on the even ones 4 solutions that
  only count brackets say YES: 6 against 4, no 7 agree) and then all 10 pass; rock-paper-scissors has 3
  distinct inputs;
- dropped, too few pass: fizzbuzz (8 and 9 wrong: 8 pass), palindrome (7, 8, 9 swap YES/NO: 7 pass),
  word-count (7 solutions share a bug and outvote the 3 right ones, 0, 1 and 2, which then fail: 7 pass);
- dropped otherwise: digit-sum (5 against 5 on every case: no case reaches 7), longest-word (the generator
  calls a function CYaRon lacks), triangle-type (6 solutions, 10 needed).
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from kitae.curate import parse_step, run_step
from kitae.data.loader import load_prompts
from kitae.errors import ConfigError
from kitae.graders import build_grader
from tests.built_once import built_once

PROBLEMS = Path(__file__).resolve().parents[2] / "kitae" / "assets" / "data" / "code" / "problems.jsonl"

FAILING = {"max-of-list": [9], "prime-check": [9], "fibonacci": [9], "prefix-sums": [9], "distinct-count": [9],
           "leap-year": [9], "caesar": [9]}
FILTERED = {"balanced-brackets": 3, "rock-paper-scissors": 3}  # valid cases
DROPPED = {"fizzbuzz": ("too few solutions pass", [8, 9]), "palindrome": ("too few solutions pass", [7, 8, 9]),
           "word-count": ("too few solutions pass", [0, 1, 2]), "digit-sum": ("no case reached agreement", None),
           "longest-word": ("generator failed", None), "triangle-type": ("too few solutions", None)}


@pytest.fixture(scope="module")
def curated(tmp_path_factory):
    def curate(folder: Path) -> None:
        step = parse_step("testcases", {"cases": 6, "time_limit": 1}, "")
        result = run_step(step, load_prompts(PROBLEMS), folder / "code.jsonl", str(PROBLEMS))
        (folder / "result.pickle").write_bytes(pickle.dumps(result))

    folder = built_once(tmp_path_factory, "curated-testcases", curate)
    return pickle.loads((folder / "result.pickle").read_bytes()), folder / "code.jsonl"


def test_the_bundled_set_is_as_designed():
    rows = load_prompts(PROBLEMS)
    assert len(rows) == 30
    assert all(len(r["solutions"]) == 10 for r in rows if r["id"] != "triangle-type")


def test_kept_and_dropped_match_the_hand_count(curated):
    result, _ = curated
    kept = {r["id"]: r["testcase_stats"] for r in result.rows}
    dropped = {d.row["id"]: (d.reason, d.detail.get("failing_solutions")) for d in result.dropped}
    assert dropped == DROPPED
    assert len(kept) == 24 and not set(kept) & set(dropped)
    for name, stats in kept.items():
        assert stats["failing_solutions"] == FAILING.get(name, []), name
        assert stats["solutions_passing"] == 10 - len(FAILING.get(name, [])), name
        assert stats["valid"] == FILTERED.get(name, stats["distinct"]), name  # every distinct input agreed on
    assert kept["rock-paper-scissors"]["distinct"] == 3 and kept["balanced-brackets"]["distinct"] == 6
    assert result.report.dropped == {"too few solutions pass": 3, "no case reached agreement": 1,
                                     "generator failed": 1, "too few solutions": 1}


def test_kept_cases_are_the_odd_ones_where_a_bug_splits_the_vote(curated):
    result, _ = curated
    brackets = next(r for r in result.rows if r["id"] == "balanced-brackets")
    assert [t["input"].startswith("(") for t in brackets["tests"]] == [True, True, True]  # odd case numbers
    assert all(t["output"] == "YES\n" for t in brackets["tests"])


def test_the_code_grader_scores_the_curated_rows(curated):
    result, _ = curated
    row = next(r for r in result.rows if r["id"] == "max-of-list")
    grader = build_grader({"type": "code", "time_limit": 1})
    try:
        right, wrong = (grader.grade_group(row, [{"output_text": f"```python\n{row['solutions'][k]}```"}])[0]
                        for k in (0, 9))
    finally:
        grader.close()
    assert right.score == 1.0 and wrong.score == 0.0
    assert "case 1: wrong answer" in wrong.reason


def test_files_written_beside_the_output(curated):
    _, out = curated
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    dropped = [json.loads(line) for line in out.with_name("code.dropped.jsonl").read_text().splitlines()]
    report = json.loads(out.with_name("code.report.json").read_text())
    assert len(rows) == 24 and len(dropped) == 6 and report["rows_out"] == 24
    assert dropped[0]["step"] == "testcases" and dropped[0]["item"]["id"] == "fizzbuzz"
    assert {"input", "output"} == set(rows[0]["tests"][0])


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"agree": 11}, "testcases.agree: must be between 1 and solutions (10), got 11"),
        ({"solutions": 5}, "testcases.agree: must be between 1 and solutions (5), got 7"),
        ({"cases": 0}, "testcases.cases: must be >= 1, got 0"),
        ({"sandbox": "docker"}, "testcases.sandbox: got 'docker'; expected one of bwrap, none"),
    ],
)
def test_config_errors(settings, message):
    with pytest.raises(ConfigError) as err:
        parse_step("testcases", settings, "")
    assert message in str(err.value)


def test_cli_writes_the_rows_and_prints_the_report(tmp_path):
    from typer.testing import CliRunner

    from kitae.cli.main import app

    rows = [r for r in load_prompts(PROBLEMS) if r["id"] in ("sum-two", "triangle-type")]
    data = tmp_path / "two.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "curated" / "two.jsonl"
    result = CliRunner().invoke(app, ["curate", "testcases", "--data", str(data), "--out", str(out), "--cases", "3",
                                      "--agree", "6", "--min-pass", "8", "--time-limit", "1", "-q"])
    assert result.exit_code == 0, result.output
    assert "[testcases] 2 rows in, 1 out (1 dropped)" in result.output
    assert "dropped       1  too few solutions" in result.output
    kept = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in kept] == ["sum-two"] and len(kept[0]["tests"]) == 3
