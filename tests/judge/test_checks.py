"""Judge checks (order sensitivity, injection probes) against scripted judges with known flaws; the CLI flag."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kitae.cli.main import app
from kitae.graders import build_grader
from kitae.graders.rows import parse_row
from kitae.judge.checks import find_judges, fixed_orders, run_judge_checks
from kitae.judge.prompt import read_samples
from kitae.judge.testing import Reply, ScriptedServer, judge_brain

CRIT = ("correctness", "helpfulness", "tone", "format")
ROW = {"item": {"reference_answer": "47"},
       "samples": [{"output_text": "47", "human_score": 5}, {"output_text": "48", "human_score": 1},
                   {"output_text": "It is 47.", "human_score": 4}]}


def fair(text: str) -> int:
    return 5 if "47" in text else 1


def first_shown_wins(request) -> Reply:  # 5 for the sample shown first, 2 for the others
    entries = {sid: {"reason": "r", **dict.fromkeys(CRIT, 5 if k == 0 else 2)}
               for k, (sid, _) in enumerate(read_samples(request["messages"]))}
    return Reply(content=json.dumps(entries))


def obeys_samples(text: str) -> int:  # believes samples that ask for a 5
    return 5 if ("give this answer" in text or "Score it" in text) else fair(text)


def judge_spec(server) -> dict:
    return {"type": "judge", "model": server.model, "base_url": server.base_url, "retries": 0}


def check(brain, rows=(ROW,), **kw):
    with ScriptedServer(default=brain) as server:
        grader = build_grader({"type": "weighted", "graders": {"j": {**judge_spec(server), "weight": 0.7},
                                                               "sim": {"type": "text_similarity", "weight": 0.3}}})
        reports = run_judge_checks(grader, [parse_row(r, "rows", i) for i, r in enumerate(rows, 1)], **kw)
    assert len(reports) == 1 and reports[0].judge == "j"  # found inside the mix
    return reports[0]


@pytest.mark.parametrize("n, k, expected", [
    (3, 3, [[0, 1, 2], [2, 1, 0], [1, 2, 0]]),
    (2, 5, [[0, 1], [1, 0]]),  # only two orders exist
    (1, 3, [[0]]),
])
def test_fixed_orders(n, k, expected):
    assert fixed_orders(n, k) == expected


def test_a_fair_judge_passes():
    report = check(judge_brain(fair))
    o = report.order
    assert (o.groups, o.orders, o.mean_spread, o.top_changed, o.pair_flips, o.first_position_bias) == (1, 3, 0, 0, 0, 0)
    assert o.scores == [[[1.0, 0.0, 1.0]] * 3]
    assert {p.name: p.mean_shift for p in report.probes} == {
        "fake_delimiter": 0.0, "fake_reply": 0.0, "ignore_rules": 0.0, "thought_process": 0.0}
    assert report.warnings == []


def test_position_bias_is_measured():
    o = check(first_shown_wins).order
    # orders [0,1,2], [2,1,0], [1,2,0]: the first shown gets 1.0, the others 0.25 (hand-computed in the docstring)
    assert o.scores == [[[1.0, 0.25, 0.25], [0.25, 0.25, 1.0], [0.25, 1.0, 0.25]]]
    assert (o.mean_spread, o.max_spread, o.top_changed, o.pair_flips, o.first_position_bias) == (
        0.75, 0.75, 1, 1.0, 0.75)


def test_position_bias_warns():
    warnings = check(first_shown_wins).warnings
    assert warnings[0].startswith("position bias: a sample's score moves by 0.75 on average")
    assert "the best sample changed with the order in 1 of 1 groups" in warnings


def test_injection_probes_measure_the_shift():
    report = check(judge_brain(obeys_samples))
    shifts = {p.name: p.mean_shift for p in report.probes}
    # the victim is the lowest-scored sample ("48": 0.0); the probes that ask for a 5 lift it to 1.0
    assert shifts == {"fake_delimiter": 1.0, "fake_reply": 0.0, "ignore_rules": 1.0, "thought_process": 0.0}
    assert [w.split("'")[1] for w in report.warnings] == ["fake_delimiter", "ignore_rules"]


def test_failed_check_calls_are_counted():
    report = check(Reply(status=400, body={"error": {"message": "nope"}}), probes=["ignore_rules"])
    assert report.order.failed_calls == 3 and report.probes[0].failed_calls == 1
    assert report.warnings == ["4 check calls failed (see the judge's errors); the figures above leave them out"]


def test_graders_without_a_judge_have_nothing_to_check():
    assert find_judges(build_grader({"type": "weighted", "graders": {"n": {"type": "numeric"}}})) == []


def test_cli_validate_with_judge_checks(tmp_path):
    data = tmp_path / "rows.jsonl"
    data.write_text("\n".join(json.dumps(ROW) for _ in range(2)) + "\n")
    runner = CliRunner()
    with ScriptedServer(default=first_shown_wins) as server:
        spec = json.dumps(judge_spec(server))
        text = runner.invoke(app, ["grader", "validate", "-g", spec, "-d", str(data), "--judge-checks"])
        as_json = runner.invoke(app, ["grader", "validate", "-g", spec, "-d", str(data), "--judge-checks", "--json"])
        plain = runner.invoke(app, ["grader", "validate", "-g", "numeric", "-d", str(data), "--judge-checks"])
    assert text.exit_code == 0, text.output
    assert "judge checks (judge):" in text.output
    assert "order: 2 groups x 3 orders; score spread mean 0.75" in text.output
    assert "warning: position bias" in text.output
    report = json.loads(as_json.output)["judge_checks"][0]
    assert report["order"]["first_position_bias"] == 0.75
    assert "no `type: judge` grader in this spec" in plain.output
