"""The example judge specs (examples/graders/judge_*.yaml) and seed 002's mixes, with their fallbacks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kitae.graders import build_grader, load_spec
from kitae.judge.testing import Reply, ScriptedServer, judge_brain

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "graders"
JUDGE_TYPES = ("judge", "score_model", "label_model")


def pointed(name: str, server: ScriptedServer, tmp_path: Path) -> dict:
    """The example spec with every model grader pointed at the scripted server (and a private cache)."""

    def visit(spec: dict) -> dict:
        if spec.get("type") in JUDGE_TYPES:
            spec = {**spec, "base_url": server.base_url, "model": server.model, "backoff": 0.0, "retries": 0}
            if "cache_dir" in spec:
                spec["cache_dir"] = str(tmp_path / "cache")
        if isinstance(spec.get("graders"), dict):
            spec = {**spec, "graders": {k: visit(v) for k, v in spec["graders"].items()}}
        return spec

    return visit(load_spec(EXAMPLES / name))


@pytest.mark.parametrize(
    "name, kind",
    [("judge_group.yaml", "judge"), ("judge_mix_similarity.yaml", "weighted"), ("judge_mix_numeric.yaml", "weighted"),
     ("judge_score_model.yaml", "score_model"), ("judge_label_model.yaml", "label_model")],
)
def test_examples_build_without_a_server(name, kind, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # judge_group.yaml's cache_dir (runs/judge-cache) is relative: not in the checkout
    grader = build_grader(EXAMPLES / name)  # building makes no call
    assert grader.type_name == kind
    grader.close()


def test_every_judge_example_is_listed_above():
    assert sorted(p.name for p in EXAMPLES.glob("judge_*.yaml")) == sorted(
        ["judge_group.yaml", "judge_mix_similarity.yaml", "judge_mix_numeric.yaml", "judge_score_model.yaml",
         "judge_label_model.yaml"])


# The judge gives 3 to the reference's own words and 5 to the paraphrase; ROUGE-L gives them 1 and 0.
REF = "open the report click share and choose the client"
COPY, PARAPHRASE = REF, "send it over using its sharing menu"


@pytest.mark.parametrize(
    "text, judge_value, expected",
    [
        (COPY, 3, 0.7 * 0.5 + 0.3 * 1.0),  # judge (3-1)/4 = 0.5, ROUGE-L 1.0 -> 0.65
        (PARAPHRASE, 5, 0.7 * 1.0 + 0.3 * 0.0),  # judge 1.0, no shared word -> 0.70: meaning wins
    ],
)
def test_judge_70_similarity_30(tmp_path, text, judge_value, expected):
    with ScriptedServer(default=judge_brain(lambda t: judge_value)) as server:
        grader = build_grader(pointed("judge_mix_similarity.yaml", server, tmp_path))
        grade = grader.grade_group({"reference_answer": REF}, [{"output_text": text}])[0]
    assert grade.score == pytest.approx(expected)
    assert grade.sub_scores["judge.correctness"] == (judge_value - 1) / 4  # every component is logged


@pytest.mark.parametrize(
    "reference, sample, expected, numeric",
    [
        ("Revenue grew 12.5% to $3.2M.", "Revenue grew 12.5% to $3.2M.", 0.5 * 0.75 + 0.5 * 1.0, 1.0),
        ("Revenue grew 12.5% to $3.2M.", "Revenue grew 12.9% to $3.2M.", 0.5 * 0.75 + 0.5 * 0.75, 0.75),  # 3% off
        ("Open the report and click Share.", "Click Share in the report.", 0.75, None),  # no number: judge alone
    ],
)
def test_judge_50_numeric_50_falls_back_to_the_judge(tmp_path, reference, sample, expected, numeric):
    with ScriptedServer(default=judge_brain(lambda t: 4)) as server:
        grader = build_grader(pointed("judge_mix_numeric.yaml", server, tmp_path))
        grade = grader.grade_group({"reference_answer": reference}, [{"output_text": sample}])[0]
    assert grade.score == pytest.approx(expected)
    assert grade.sub_scores["numbers"] == (pytest.approx(numeric) if numeric is not None else None)
    assert grade.sub_scores["judge"] == 0.75 and grade.error is None


def test_judge_50_numeric_50_when_the_judge_fails(tmp_path):
    with ScriptedServer(default=Reply(status=500)) as server:
        grader = build_grader(pointed("judge_mix_numeric.yaml", server, tmp_path))
        grades = grader.grade_group({"reference_answer": "12.5%"}, [{"output_text": "12.5%"}, {"output_text": "x"}])
        none = grader.grade_group({"reference_answer": "no numbers"}, [{"output_text": "x"}])
    assert [g.score for g in grades] == [1.0, 0.0]  # the numeric part alone
    assert grades[0].sub_scores["judge"] is None
    assert none[0].score is None and "judge call failed" in none[0].error  # nothing scored: abstain, say why


def test_group_judge_example_end_to_end(tmp_path):
    with ScriptedServer(default=judge_brain(lambda t: 5 if "47" in t else 2)) as server:
        grader = build_grader(pointed("judge_group.yaml", server, tmp_path))
        grades = grader.grade_group({"prompt": "12+35?", "reference_answer": "47"},
                                    [{"output_text": "47"}, {"output_text": "46"}])
        assert len(server.chat_requests) == 2  # calls: 2
    assert [g.score for g in grades] == [1.0, 0.25]
    assert "rubric" in json.dumps(server.chat_requests[0]["messages"][0]).lower()
    assert (tmp_path / "cache" / "chat_cache.sqlite").exists()


def test_model_grader_examples_end_to_end(tmp_path):
    with ScriptedServer(default=Reply(content='{"result": 0.5}')) as server:
        grade = build_grader(pointed("judge_score_model.yaml", server, tmp_path)).grade_group(
            {"reference_answer": "47"}, [{"output_text": "47"}])[0]
        assert server.chat_requests[0]["max_tokens"] == 32
    assert grade.score == 0.5
    with ScriptedServer(default=Reply(content='{"label": "correct"}')) as server:
        grade = build_grader(pointed("judge_label_model.yaml", server, tmp_path)).grade_group(
            {"reference_answer": "47"}, [{"output_text": "47"}])[0]
    assert grade.score == 1.0
