"""The endpoint grader against a real HTTP server on 127.0.0.1: the body it posts, the grade it reads back, retries
of 5xx, timeouts, replies that are not a grade; every failure an abstention with its error, counted."""

from __future__ import annotations

import socket

import pytest

from kitae.errors import ConfigError
from kitae.graders import build_grader
from tests.scripted_http import ScriptedServer

ITEM = {"messages": [{"role": "user", "content": "What is 12*34?"}], "reference_answer": "408", "id": 7}
SINGLE = {"output_text": "408<|im_end|>", "finish_reason": "stop", "completion_tokens": 4,
          "max_completion_length": 64, "completion_ids": [1, 2, 3, 4]}
EPISODE = {**SINGLE, "messages": [
    {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "calculator", "arguments": {"expression": "12*34"}}}]},
    {"role": "tool", "name": "calculator", "content": "408"},
    {"role": "assistant", "content": "408"}],
    "tool_calls": [{"name": "calculator", "arguments": {"expression": "12*34"}, "result": "408", "error": None,
                    "seconds": 0.01, "turn": 0}],
    "turns": 2, "episode_end": "answered", "environment_reward": None}


@pytest.fixture
def endpoint(request):
    """A scripted grading endpoint (tests.scripted_http): ``endpoint(script, default=...)``; by default every
    request gets ``{"score": 1.0}``."""
    made = []

    def make(script=(), default=(200, {"score": 1.0}, 0.0)):
        made.append(ScriptedServer(script, default, path="/grade"))
        return made[-1]

    yield make
    for e in made:
        e.close()


def grader_for(url, **spec):
    return build_grader({"type": "endpoint", "url": url, "backoff": 0.01, **spec})


def test_posts_item_and_trajectory_and_reads_score_reason_sub_scores(endpoint, monkeypatch):
    server = endpoint([(200, {"score": 0.75, "reason": "used the calculator", "sub_scores": {"tool_use": 1.0}}, 0)])
    monkeypatch.setenv("MY_GRADER_TOKEN", "s3cret")
    grader = grader_for(server.url, api_key_env="MY_GRADER_TOKEN", pass_threshold=0.5)
    [grade] = grader.grade_group(ITEM, [EPISODE])
    assert (grade.score, grade.reason, grade.error) == (0.75, "used the calculator", None)
    assert grade.sub_scores == {"tool_use": 1.0, "passed": 1.0}
    [body] = server.bodies
    assert body["item"] == ITEM
    sample = body["sample"]
    assert sample["output_text"] == "408"  # the final answer, without the end marker
    assert sample["messages"] == EPISODE["messages"] and sample["tool_calls"] == EPISODE["tool_calls"]
    assert (sample["turns"], sample["episode_end"], sample["environment_reward"]) == (2, "answered", None)
    assert "completion_ids" not in sample
    assert sample["output_json"] == 408  # the answer parses as JSON
    assert server.headers[0]["Authorization"] == "Bearer s3cret"
    assert grader.counters()["graded"] == 1.0 and grader.counters()["failed_calls"] == 0.0


def test_single_turn_sample_sends_what_there_is(endpoint):
    server = endpoint()
    [grade] = grader_for(server.url).grade_group(ITEM, [{**SINGLE, "output_text": "not json"}])
    assert grade.score == 1.0
    sample = server.bodies[0]["sample"]
    assert "messages" not in sample and "tool_calls" not in sample
    assert sample["output_json"] is None and sample["finish_reason"] == "stop"
    assert "Authorization" not in server.headers[0]


def test_values_json_has_no_word_for_are_sent_as_null_or_text(endpoint):
    server = endpoint()
    sample = {**EPISODE, "environment_reward": float("nan")}
    [grade] = grader_for(server.url).grade_group({**ITEM, "when": object}, [sample])
    assert grade.score == 1.0
    assert server.bodies[0]["sample"]["environment_reward"] is None
    assert server.bodies[0]["item"]["when"] == "<class 'object'>"


def test_each_sample_is_one_request(endpoint):
    server = endpoint()
    grades = grader_for(server.url).grade_group(ITEM, [SINGLE, EPISODE, SINGLE])
    assert [g.score for g in grades] == [1.0, 1.0, 1.0] and len(server.bodies) == 3


def test_5xx_is_retried(endpoint):
    server = endpoint([(503, {"error": "busy"}, 0), (500, b"oops", 0), (200, {"score": 0.5}, 0)])
    grader = grader_for(server.url, retries=2)
    [grade] = grader.grade_group(ITEM, [SINGLE])
    assert grade.score == 0.5 and grade.error is None
    assert grader.counters()["retries"] == 2.0 and grader.counters()["http_errors"] == 2.0


def test_5xx_past_the_retries_abstains_with_the_error(endpoint):
    server = endpoint(default=(503, {"error": "down"}, 0))
    grader = grader_for(server.url, retries=1)
    [grade] = grader.grade_group(ITEM, [SINGLE])
    assert grade.score is None and "HTTP 503" in grade.error and "after 2 attempts" in grade.error
    assert grader.counters()["failed_calls"] == 1.0 and len(server.bodies) == 2


def test_timeout_abstains(endpoint):
    server = endpoint(default=(200, {"score": 1.0}, 30.0))  # answers far past the timeout
    grader = grader_for(server.url, timeout=0.5, retries=0)
    [grade] = grader.grade_group(ITEM, [SINGLE])
    assert grade.score is None and "timed out after 0.5s" in grade.error
    assert grader.counters()["timeouts"] == 1.0 and grader.counters()["failed_calls"] == 1.0


@pytest.mark.parametrize(
    "reply,error",
    [
        (b"<html>502 Bad Gateway</html>", "reply is not JSON"),  # bad JSON: not retried
        ({"reason": "forgot it"}, "the reply has no 'score'"),
        ({"score": None}, "'score' must be a finite number, got None"),  # how NaN arrives as strict JSON
        ({"score": "0.9"}, "'score' must be a finite number, got '0.9'"),
        ({"score": True}, "'score' must be a finite number, got True"),
        ({"score": 1.0, "reason": ["a"]}, "'reason' must be a string"),
        ({"score": 1.0, "sub_scores": {"x": "high"}}, "'sub_scores' must map names to numbers"),
        ([0.9], "expected a JSON object with a 'score'"),
    ],
)
def test_a_reply_that_is_not_a_grade_abstains(endpoint, reply, error):
    server = endpoint([(200, reply, 0)])
    grader = grader_for(server.url)
    [grade] = grader.grade_group(ITEM, [SINGLE])
    assert grade.score is None and error in grade.error
    assert grader.counters()["bad_replies"] == 1.0 and grader.counters()["failed_calls"] == 1.0
    assert len(server.bodies) == 1  # not retried


def test_401_names_the_token_variable(endpoint, monkeypatch):
    server = endpoint(default=(401, {"error": "no token"}, 0))
    monkeypatch.delenv("MY_GRADER_TOKEN", raising=False)
    [grade] = grader_for(server.url, api_key_env="MY_GRADER_TOKEN").grade_group(ITEM, [SINGLE])
    assert grade.score is None and "HTTP 401" in grade.error and "$MY_GRADER_TOKEN, which is not set" in grade.error
    [grade] = grader_for(server.url).grade_group(ITEM, [SINGLE])
    assert "name its environment variable in the spec's api_key_env" in grade.error


def test_nobody_listening_abstains_and_never_raises():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    grader = grader_for(f"http://127.0.0.1:{port}/grade", retries=1)
    grades = grader.grade_group(ITEM, [SINGLE, EPISODE])
    assert [g.score for g in grades] == [None, None]
    assert all("after 2 attempts" in g.error for g in grades)
    assert grader.counters()["connection_errors"] == 4.0 and grader.counters()["failed_calls"] == 2.0


@pytest.mark.parametrize(
    "spec,message",
    [
        ({}, r"grader\.url: missing \(required\)"),
        ({"url": "127.0.0.1:9000/grade"}, r"grader\.url: expected an http:// or https:// URL"),
        ({"url": "http://127.0.0.1:9000/grade", "timeout": 0}, r"grader\.timeout: must be > 0"),
        ({"url": "http://127.0.0.1:9000/grade", "retry": 3}, r"grader\.retry: unknown key; did you mean 'retries'"),
    ],
)
def test_bad_specs_name_the_field(spec, message):
    with pytest.raises(ConfigError, match=message):
        build_grader({"type": "endpoint", **spec})
