"""OpenAI's score_model and label_model on the chat client, against a scripted server."""

from __future__ import annotations

import json

import pytest

from kitae.errors import ConfigError
from kitae.graders import build_grader
from kitae.judge.model_graders import read_label, read_number
from kitae.judge.testing import Reply, ScriptedServer

ITEM = {"reference_answer": "47", "question": "12+35?"}
INPUT = [{"role": "system", "content": "Grade the answer."},
         {"role": "user", "content": "Q: {{item.question}} Ref: {{item.reference_answer}} A: {{sample.output_text}}"}]


def score_spec(server, **kw):
    return {"type": "score_model", "model": server.model, "base_url": server.base_url, "input": INPUT,
            "retries": 0, "backoff": 0.0, **kw}


def label_spec(server, **kw):
    return {"type": "label_model", "model": server.model, "base_url": server.base_url, "input": INPUT,
            "labels": ["correct", "partly_correct", "wrong"], "passing_labels": ["correct"], "retries": 0, **kw}


@pytest.mark.parametrize(
    "text, value",
    [
        ('{"result": 0.7}', 0.7),
        ('{"score": "4"}', 4.0),
        ("0.25", 0.25),
        (" 7.\n", 7.0),  # a bare number with a full stop
        ('"3"', 3.0),
        ("```json\n{\"result\": 1}\n```", 1.0),
        ("The score is 7", None),  # prose: not numeric (OpenAI scores it 0)
        ('{"result": "high"}', None),
        ('{"result": true}', None),
        ("", None),
    ],
)
def test_read_number(text, value):
    assert read_number(text) == value


@pytest.mark.parametrize(
    "text, label",
    [
        ('{"label": "correct"}', "correct"),
        ('{"label": "Wrong"}', "wrong"),
        ("partly_correct", "partly_correct"),
        ("'CORRECT'.", "correct"),
        ("The answer is wrong because 48 != 47.", "wrong"),  # names exactly one label
        ("correct or wrong, hard to say", None),  # two labels
        ('{"label": "maybe"}', None),
        ("no idea", None),
    ],
)
def test_read_label(text, label):
    assert read_label(text, ["correct", "partly_correct", "wrong"]) == label


@pytest.mark.parametrize(
    "reply, range_, score, reason",
    [
        ('{"result": 0.8}', [0, 1], 0.8, "model said 0.8"),
        ('{"result": 7}', [0, 5], 5.0, "model said 7, clipped to 5"),
        ('{"result": -2}', [0, 1], 0.0, "model said -2, clipped to 0"),
        ("I'd say quite good", [1, 10], 0.0, "non-numeric output scores 0: \"I'd say quite good\""),  # OpenAI: 0
    ],
)
def test_score_model(reply, range_, score, reason):
    with ScriptedServer(default=Reply(content=reply)) as server:
        grader = build_grader(score_spec(server, range=range_))
        grade = grader.grade_group(ITEM, [{"output_text": "47"}])[0]
        body = server.chat_requests[0]
    assert (grade.score, grade.reason) == (score, reason)
    assert body["messages"][1]["content"] == "Q: 12+35? Ref: 47 A: 47"
    assert body["response_format"]["json_schema"]["schema"]["required"] == ["result"]
    assert grader.stats()["unreadable"] == (1 if "non-numeric" in reason else 0)


@pytest.mark.parametrize("reply, said", [('{"result": NaN}', "nan"), ("1e999", "inf"), ('{"score": -Infinity}', "-inf")])
def test_score_model_reply_that_is_not_a_finite_number_abstains(reply, said):
    """Clipping would turn infinity into the top of the range (and NaN into its bottom): abstain instead."""
    with ScriptedServer(default=Reply(content=reply)) as server:
        grader = build_grader(score_spec(server, range=[0, 1], pass_threshold=0.5))
        grade = grader.grade_group(ITEM, [{"output_text": "47"}])[0]
    assert (grade.score, grade.sub_scores) == (None, {"passed": None})
    assert grade.error == f"model said {said}, not a finite number"
    stats = grader.stats()
    assert (stats["non_finite"], stats["unreadable"], grader.counters()["judge_non_finite"]) == (1, 0, 1)


def test_score_model_pass_threshold_and_sampling_params():
    with ScriptedServer(default=Reply(content="0.6")) as server:
        spec = score_spec(server, pass_threshold=0.5,
                          sampling_params={"temperature": 0, "seed": 3, "max_completions_tokens": 20, "top_p": 0.9})
        grade = build_grader(spec).grade_group(ITEM, [{"output_text": "47"}])[0]
        body = server.chat_requests[0]
    assert grade.sub_scores == {"passed": 1.0}
    assert (body["temperature"], body["seed"], body["max_tokens"], body["top_p"]) == (0, 3, 20, 0.9)


@pytest.mark.parametrize("threshold, passed", [(0.5, 0.0), (0.0, 1.0)])  # 0 >= 0 passes, as any score of 0
def test_score_model_non_numeric_output_is_a_0_for_pass_threshold_too(threshold, passed):
    with ScriptedServer(default=Reply(content="great answer")) as server:
        spec = score_spec(server, pass_threshold=threshold)
        grade = build_grader(spec).grade_group(ITEM, [{"output_text": "47"}])[0]
    assert grade.score == 0.0 and grade.sub_scores == {"passed": passed}


def test_label_model_scores_passing_labels_per_sample():
    def by_answer(request):
        answer = request["messages"][1]["content"].rsplit("A: ", 1)[1]
        label = {"47": "correct", "about 47": "partly_correct"}.get(answer, "banana")
        return Reply(content=json.dumps({"label": label}))

    with ScriptedServer(default=by_answer) as server:
        grader = build_grader(label_spec(server))
        grades = grader.grade_group(ITEM, [{"output_text": t} for t in ("47", "about 47", "48")])
        schema = server.chat_requests[0]["response_format"]["json_schema"]["schema"]
    assert [g.score for g in grades] == [1.0, 0.0, 0.0]
    assert [g.reason for g in grades][:2] == ["label: correct", "label: partly_correct"]
    assert grades[2].reason.startswith("not one of the labels")
    assert schema["properties"]["label"]["enum"] == ["correct", "partly_correct", "wrong"]
    assert grader.stats()["unreadable"] == 1 and grader.stats()["scored"] == 3
    assert grader.counters()["judge_calls"] == 3 and grader.counters()["judge_tokens"] > 0


def test_failed_calls_abstain():
    with ScriptedServer(default=Reply(status=503)) as server:
        grader = build_grader(score_spec(server))
        grades = grader.grade_group(ITEM, [{"output_text": "47"}, {"output_text": "48"}])
    assert [g.score for g in grades] == [None, None] and "model call failed" in grades[0].error
    assert grader.stats()["abstained"] == 2


def test_missing_template_field_abstains_without_a_call():
    with ScriptedServer() as server:
        grades = build_grader(score_spec(server)).grade_group({"question": "q"}, [{"output_text": "47"}])
        assert server.chat_requests == []
    assert grades[0].score is None and "reference_answer" in grades[0].error


@pytest.mark.parametrize(
    "content",
    [
        "A: {{sample.output_text}}",  # a plain template string
        {"type": "input_text", "text": "A: {{sample.output_text}}"},  # one part, as OpenAI's guide writes it
        [{"type": "input_text", "text": "A: "}, {"type": "input_text", "text": "{{sample.output_text}}"}],
        ["A: ", {"type": "input_text", "text": "{{sample.output_text}}"}],  # strings and parts mixed
        [{"type": "output_text", "text": "A: {{sample.output_text}}"}],  # an assistant-side text part
        {"text": "A: {{sample.output_text}}"},  # type defaults to input_text
    ],
)
@pytest.mark.parametrize("kind", ["score_model", "label_model"])
def test_openai_message_items_and_text_parts(kind, content):
    reply = "1" if kind == "score_model" else '{"label": "correct"}'
    with ScriptedServer(default=Reply(content=reply)) as server:
        make = score_spec if kind == "score_model" else label_spec
        spec = make(server, input=[{"type": "message", "role": "user", "content": content}])
        grade = build_grader(spec).grade_group(ITEM, [{"output_text": "47"}])[0]
        assert server.chat_requests[0]["messages"] == [{"role": "user", "content": "A: 47"}]
    assert grade.score == 1.0


@pytest.mark.parametrize(
    "kind, extra, path",
    [
        ("score_model", {"input": []}, "grader.input"),
        ("score_model", {"input": [{"role": "robot", "content": "x"}]}, "grader.input[0].role"),
        ("score_model", {"input": [{"role": "user", "content": "{{itme.x}}"}]}, "grader.input[0].content"),
        ("label_model", {"input": [{"role": "user", "content": {"type": "input_audio", "input_audio": "x"}}]},
         "grader.input[0].content.type"),  # the judge client sends text and images only
        ("label_model", {"input": [{"role": "user", "content": [{"type": "input_text", "txt": "x"}]}]},
         "grader.input[0].content[0].text"),  # misspelt key: text missing
        ("label_model", {"input": [{"role": "user", "content": [{"type": "input_text", "text": 5}]}]},
         "grader.input[0].content[0].text"),
        ("label_model", {"input": [{"role": "user", "content": []}]}, "grader.input[0].content"),
        ("label_model", {"input": [{"role": "user", "content": 7}]}, "grader.input[0].content"),
        ("score_model", {"range": [1, 1]}, "grader.range"),
        ("score_model", {"sampling_params": {"temprature": 0}}, "grader.sampling_params.temprature"),
        ("label_model", {"passing_labels": ["corect"]}, "grader.passing_labels[0]"),
        ("label_model", {"labels": ["a", "a"], "passing_labels": ["a"]}, "grader.labels"),
    ],
)
def test_spec_errors(kind, extra, path):
    base = {"type": kind, "model": "m", "base_url": "http://127.0.0.1:1/v1",
            "input": [{"role": "user", "content": "{{sample.output_text}}"}]}
    if kind == "label_model":
        base.update(labels=["correct", "wrong"], passing_labels=["correct"])
    with pytest.raises(ConfigError) as err:
        build_grader({**base, **extra})
    assert str(err.value).startswith(path + ":")
