"""`kitae serve rm` as a real process: grade through it, kill it mid-run, the grader abstains, counts, goes on."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading

import httpx
import pytest

from kitae.graders import build_grader
from kitae.rewards.reward_model import LocalRewardModel
from kitae.serving.reward_server import make_server

PREFIX = "kitae serve rm: serving "
ITEM = {"messages": [{"role": "system", "content": "計算して"}, {"role": "user", "content": "12+35は?"}],
        "reference_answer": "47"}
SAMPLES = [
    {"output_text": "47<|im_end|>"},
    {"output_text": "12+35=47です。<|im_end|>"},
    {"output_text": "48"},  # no end marker: gated, never sent
]


def start_server(model: str, port: int, log) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "kitae.cli.main", "serve", "rm", "--model", model, "--port", str(port)]
    env = os.environ | {"PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: lines.put(proc.stdout.readline()), daemon=True).start()
    try:
        first = lines.get(timeout=120)
    except queue.Empty:
        proc.kill()
        raise AssertionError("kitae serve rm printed nothing in 120 s")
    assert first.startswith(PREFIX), f"unexpected first line {first!r} (rc={proc.poll()})"
    return proc, first.strip().rsplit(" on ", 1)[1]


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=30)


@pytest.mark.slow
def test_serve_rm_grade_kill_abstain_restart(tiny_rm, tmp_path):
    scorer = LocalRewardModel(tiny_rm)
    expected = scorer.score(  # what the server must answer: user + assistant turns only
        [[ITEM["messages"][1], {"role": "assistant", "content": c}] for c in ("47", "12+35=47です。")]
    )
    log = open(tmp_path / "server.log", "w")
    proc, url = start_server(tiny_rm, 0, log)
    back = None
    try:
        grader = build_grader({"type": "reward_model", "url": url, "full_chars": 0, "timeout": 5.0,
                               "retries": 1, "backoff": 0.01})
        port = int(url.rsplit(":", 1)[1])
        results = []
        for step in range(6):  # a run's grading loop: the server dies at step 2, is back at step 4
            if step == 2:
                stop(proc)
            if step == 4:  # back on the same port: the server kitae serve rm runs, here in this process
                back = make_server(scorer, port=port)
                threading.Thread(target=back.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
            results.append(grader.grade_group(ITEM, SAMPLES))
    finally:
        stop(proc)
        log.close()
        if back is not None:
            back.shutdown()
            back.server_close()

    for step in (0, 1, 4, 5):  # served: the RM's raw logits (clip ±10, no length factor), gated sample 0.0
        assert [g.score for g in results[step]] == pytest.approx(expected + [0.0], abs=1e-5)
    for step in (2, 3):  # down: the two ungated samples abstain with the reason, the gated one is still 0.0
        scores = [g.score for g in results[step]]
        assert scores == [None, None, 0.0]
        assert "reward model failed" in results[step][0].error
    stats = grader.stats()
    assert (stats["samples"], stats["scored"], stats["gated"]) == (18, 8, 6)
    assert (stats["failed_calls"], stats["abstained"]) == (2, 4)
    assert stats["client_connection_errors"] == 4  # 2 calls × (1 try + 1 retry)
    assert stats["client_failed_calls"] == 2


# ---- bad requests: 400 naming the field, before the model sees them ---------------------------------------
@pytest.fixture(scope="module")
def limited(random_rm):
    """An in-process server taking at most 4 items of at most 50 characters per request."""
    server = make_server(LocalRewardModel(random_rm), port=0, max_items=4, max_chars=50)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


USER = {"role": "user", "content": "hi"}


@pytest.mark.parametrize("path, body, param, said", [
    ("/v1/score", {"conversations": [[{"role": "user", "content": 5}]]}, "conversations[0][0].content",
     "must be a string or a list of text parts, got int"),
    ("/v1/score", {"conversations": [[{"role": {"a": 1}, "content": "x"}]]}, "conversations[0][0].role",
     "must be a non-empty string"),
    ("/v1/score", {"conversations": [[]]}, "conversations[0]", "must be a non-empty list"),
    ("/v1/score", {"conversations": []}, "conversations", "must be a non-empty list of conversations"),
    ("/v1/score", {"conversations": [[USER, "hello"]]}, "conversations[0][1]", "must be an object"),
    ("/v1/score", {"conversations": [[USER]] * 5}, "conversations", "5 items; this server takes at most 4 per "
     "request (--max-items)"),
    ("/v1/score", {"texts": ["a"] * 5}, "texts", "(--max-items)"),
    ("/v1/score", {"texts": ["a", "b" * 51]}, "texts[1]", "has 51 characters; this server takes at most 50 "
     "(--max-chars)"),
    ("/v1/score", {"conversations": [[USER, {"role": "assistant", "content": "x" * 49}]]}, "conversations[0]",
     "over 50 characters"),
    ("/v1/score", {"texts": [1, 2]}, "texts[0]", "must be a string, got int"),
    ("/v1/score", {"texts": []}, "texts", "non-empty list of strings"),
    ("/v1/score", {"nothing": 1}, None, "expected 'conversations'"),
    ("/v1/score", [1, 2], None, "must be a JSON object, got list"),
    ("/classify", {"text": [None]}, "text[0]", "must be a string"),
    ("/classify", {"input": {"a": 1}}, "input", "string or a non-empty list"),
    ("/pooling", {"messages": []}, "messages", "non-empty list"),
    ("/pooling", {"messages": [{"role": "user"}]}, "messages[0].content", "got NoneType"),
    # a field the server would not honour is refused, never silently ignored (the scores would not be what the
    # client asked for): vLLM's truncation, a chat template override, a typo
    ("/v1/score", {"texts": ["a"], "truncate_prompt_tokens": 3}, "truncate_prompt_tokens",
     "kitae serve rm does not support truncate_prompt_tokens"),
    ("/pooling", {"input": "a", "chat_template": "{{x}}"}, "chat_template", "does not support chat_template"),
    ("/v1/classify", {"messages": [USER], "add_special_tokens": True}, "add_special_tokens", "does not support"),
    ("/pooling", {"input": "a", "use_activation": True}, "use_activation", "does not support use_activation"),
    ("/classify", {"text": ["a"], "txt": ["b"]}, "txt", "does not support txt"),
])
def test_bad_requests_are_400_naming_the_field(limited, path, body, param, said):
    reply = httpx.post(limited + path, json=body, timeout=30)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert said in error["message"] and error["param"] == param


def test_the_model_name_and_user_fields_are_accepted(limited):
    for path, body in [("/v1/score", {"texts": ["a"]}), ("/pooling", {"input": "a"}), ("/classify", {"text": ["a"]}),
                       ("/v1/classify", {"messages": [USER]})]:
        reply = httpx.post(limited + path, json={"model": "m", "user": "u", **body}, timeout=30)
        assert reply.status_code == 200, (path, reply.text)


def test_a_body_that_is_not_json_says_so(limited):
    reply = httpx.post(limited + "/v1/score", content=b"texts=hello",
                       headers={"Content-Type": "application/json"}, timeout=30)
    assert reply.status_code == 400
    assert reply.json()["error"]["message"].startswith("the body is not JSON: Expecting value")


def test_requests_within_the_limits_are_scored(limited, random_rm):
    convs = [[USER, {"role": "assistant", "content": [{"type": "text", "text": "he"}, {"type": "text", "text": "llo"}]}]]
    reply = httpx.post(limited + "/v1/score", json={"conversations": convs * 4}, timeout=30)
    assert reply.status_code == 200, reply.text
    expected = LocalRewardModel(random_rm).score([[USER, {"role": "assistant", "content": "hello"}]])
    assert reply.json()["scores"] == pytest.approx(expected * 4, abs=1e-5)
    assert httpx.post(limited + "/v1/nothing", json={}, timeout=30).status_code == 404


def test_a_token_guarded_server_scores_for_a_grader_with_api_key_env(random_rm, monkeypatch):
    token = "s" * 20
    server = make_server(LocalRewardModel(random_rm), port=0, token=token)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    spec = {"type": "reward_model", "url": url, "full_chars": 0, "retries": 0, "gate": False}
    try:
        monkeypatch.setenv("RM_TOKEN_UNDER_TEST", token)
        with_key = build_grader({**spec, "api_key_env": "RM_TOKEN_UNDER_TEST"}).grade_group(ITEM, SAMPLES)
        without = build_grader(spec).grade_group(ITEM, SAMPLES)
        monkeypatch.delenv("RM_TOKEN_UNDER_TEST")
        unset = build_grader({**spec, "api_key_env": "RM_TOKEN_UNDER_TEST"}).grade_group(ITEM, SAMPLES)
    finally:
        server.shutdown()
        server.server_close()
    assert all(g.score is not None for g in with_key)
    assert all(g.score is None and "HTTP 401" in g.error and "api_key_env" in g.error for g in without)
    assert all(g.score is None and "$RM_TOKEN_UNDER_TEST, which is not set" in g.error for g in unset)
