"""The reward-model HTTP client against real servers on loopback: every protocol, retries, timeouts, limits."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from kitae.graders import build_grader
from kitae.rewards.remote import RM_PROTOCOLS, RemoteRewardModel, RewardModelError
from kitae.rewards.reward_model import LocalRewardModel
from kitae.serving.reward_server import make_server
from tests.scripted_http import ScriptedServer

CONVS = [
    [{"role": "user", "content": "12+35は?"}, {"role": "assistant", "content": "47です。"}],
    [{"role": "user", "content": "12+35?"}, {"role": "assistant", "content": "The answer is 47."}],
    [{"role": "user", "content": "首都は?"}, {"role": "assistant", "content": "東京"}],
]


@pytest.fixture(scope="module")
def local(tiny_rm) -> LocalRewardModel:
    return LocalRewardModel(tiny_rm, batch_size=2)


@pytest.fixture(scope="module")
def served(local):
    server = make_server(local, port=0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("protocol", ["kitae", "sglang", "vllm-classify", "vllm-pooling"])
def test_every_protocol_gives_the_local_scores(served, local, protocol):
    client = RemoteRewardModel(served, protocol, tokenizer=local.tokenizer, batch_size=2)
    got = asyncio.run(client.score(CONVS))
    assert got == pytest.approx(local.score(CONVS), abs=1e-5)
    requests = 3 if protocol == "vllm-pooling" else 2  # pooling: one per conversation; others: batches of 2
    assert client.counters.as_dict() == {"requests": requests, "retries": 0, "timeouts": 0,
                                         "connection_errors": 0, "http_errors": 0, "bad_replies": 0,
                                         "failed_calls": 0}


# ---- replies as the real servers send them (from their docs), parsed --------------------------------
@pytest.mark.parametrize(
    "protocol,reply,scores",
    [
        ("kitae", {"scores": [1.5, -2.0]}, [1.5, -2.0]),
        ("sglang", [{"embedding": [0.7], "meta_info": {}}, {"embedding": [-1.0, 3.0]}], [0.7, -1.0]),
        ("sglang", {"embedding": [2.5], "meta_info": {}}, [2.5]),  # one text -> one object
        ("vllm-classify", {"data": [{"index": 1, "probs": [0.2]}, {"index": 0, "probs": [0.9, 0.1]}]}, [0.9, 0.2]),
        ("vllm-pooling", {"data": [{"index": 0, "object": "pooling", "data": [3.25]}]}, [3.25]),
        ("vllm-pooling", {"data": [{"index": 0, "data": [[0.1], [0.2], [0.75]]}]}, [0.75]),  # per token: last
        ("vllm-pooling", {"data": [{"index": 0, "data": 1.0}]}, [1.0]),
    ],
)
def test_parse_replies(protocol, reply, scores):
    assert RM_PROTOCOLS.get(protocol).parse(reply, len(scores)) == pytest.approx(scores)


@pytest.mark.parametrize(
    "protocol,reply",
    [("kitae", {"score": 1}), ("sglang", [{"meta_info": {}}]), ("vllm-classify", {"data": [{"index": 0}]}),
     ("vllm-pooling", {"data": [{"index": 0, "data": []}]})],
)
def test_malformed_replies_raise(protocol, reply):
    with pytest.raises(RewardModelError):
        RM_PROTOCOLS.get(protocol).parse(reply, 1)


def test_requests_carry_served_model_and_raw_logit_flags():
    body = RM_PROTOCOLS.get("vllm-classify").build(["text"], "my-rm")
    assert body == {"model": "my-rm", "input": ["text"], "use_activation": False, "add_special_tokens": False}
    assert RM_PROTOCOLS.get("sglang").build(["a", "b"], None) == {"text": ["a", "b"]}


# ---- a scriptable server for failure modes ------------------------------------------------------------
def echo_scores(body: dict) -> dict:
    """One score per conversation: its index."""
    return {"scores": [float(i) for i in range(len(body["conversations"]))]}


@pytest.fixture
def scripted():
    servers = []

    def start(script, default=(200, echo_scores, 0.0)):
        servers.append(ScriptedServer(script, default))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def test_retries_on_5xx_and_429_then_succeeds(scripted):
    server = scripted([(503, {}, 0.0), (429, {}, 0.0)])
    client = RemoteRewardModel(server.url, retries=2, backoff=0.01)
    assert asyncio.run(client.score(CONVS[:2])) == [0.0, 1.0]
    c = client.counters
    assert (c.requests, c.retries, c.http_errors, c.failed_calls) == (3, 2, 2, 0)


def test_gives_up_after_the_last_retry(scripted):
    server = scripted([], default=(500, {}, 0.0))
    client = RemoteRewardModel(server.url, retries=1, backoff=0.01)
    with pytest.raises(RewardModelError, match="HTTP 500: .*\\(after 2 attempts\\)"):
        asyncio.run(client.score(CONVS[:1]))
    assert (client.counters.requests, client.counters.failed_calls) == (2, 1)


def test_client_errors_are_not_retried(scripted):
    server = scripted([(400, {"error": "bad"}, 0.0)])
    client = RemoteRewardModel(server.url, retries=3, backoff=0.01)
    with pytest.raises(RewardModelError, match="HTTP 400"):
        asyncio.run(client.score(CONVS[:1]))
    assert (client.counters.requests, client.counters.retries) == (1, 0)


def test_timeouts_are_counted_and_retried(scripted):
    server = scripted([], default=(200, echo_scores, 1.0))
    client = RemoteRewardModel(server.url, timeout=0.1, retries=1, backoff=0.01)
    with pytest.raises(RewardModelError, match="timed out"):
        asyncio.run(client.score(CONVS[:1]))
    assert (client.counters.timeouts, client.counters.failed_calls) == (2, 1)


def test_wrong_number_of_scores_is_a_bad_reply(scripted):
    server = scripted([(200, {"scores": [1.0]}, 0.0)])
    client = RemoteRewardModel(server.url, retries=0)
    with pytest.raises(RewardModelError, match="1 scores for 2 inputs"):
        asyncio.run(client.score(CONVS[:2]))
    assert client.counters.bad_replies == 1


def test_concurrency_limit_holds(scripted):
    server = scripted([], default=(200, echo_scores, 0.05))
    client = RemoteRewardModel(server.url, batch_size=1, max_concurrency=2)
    scores = asyncio.run(client.score(CONVS * 3))  # 9 requests of one conversation
    assert scores == [0.0] * 9 and len(server.bodies) == 9
    assert server.max_in_flight <= 2


def test_connection_refused_abstains_in_the_grader(scripted):
    server = scripted([])
    url = server.url
    server.close()  # nothing listens there any more
    grader = build_grader({"type": "reward_model", "url": url, "retries": 1, "backoff": 0.01})
    item = {"messages": CONVS[0][:1]}
    grades = grader.grade_group(item, [{"output_text": "47です。<|im_end|>"}, {"output_text": "47"}])
    assert grades[0].score is None and "ConnectError" in grades[0].error
    assert grades[1].score == 0.0  # gated: never needed the server
    stats = grader.stats()
    assert (stats["failed_calls"], stats["abstained"], stats["gated"]) == (1, 1, 1)
    assert (stats["client_connection_errors"], stats["client_retries"]) == (2, 1)


# ---- scores that are not finite numbers: abstain, never clipped into ±10 ---------------------------
@pytest.mark.parametrize(
    "protocol, reply",
    [  # what each server would send for the scores NaN, Infinity, -Infinity, 2.0 (Python's json writes them)
        ("kitae", {"scores": [float("nan"), float("inf"), float("-inf"), 2.0]}),
        ("sglang", [{"embedding": [v]} for v in (float("nan"), float("inf"), float("-inf"), 2.0)]),
        ("vllm-classify", {"data": [{"index": i, "probs": [v]}
                                    for i, v in enumerate((float("nan"), float("inf"), float("-inf"), 2.0))]}),
    ],
)
def test_a_server_sending_nan_or_infinity_makes_those_samples_abstain(scripted, protocol, reply):
    server = scripted([(200, reply, 0.0)])
    grader = build_grader({"type": "reward_model", "url": server.url, "protocol": protocol, "retries": 0,
                           "full_chars": 0})
    assert "NaN" in json.dumps(reply) and "Infinity" in json.dumps(reply)  # the wire really carries them
    samples = [{"output_text": f"answer {i}<|im_end|>"} for i in range(4)]
    grades = grader.grade_group({"messages": CONVS[0][:1]}, samples)
    assert [g.score for g in grades] == [None, None, None, 2.0]
    assert [g.error for g in grades[:3]] == [f"reward model returned {v}, not a finite number"
                                             for v in ("nan", "inf", "-inf")]
    stats = grader.stats()
    assert (stats["scored"], stats["non_finite"], stats["abstained"], stats["failed_calls"]) == (1, 3, 3, 0)


@pytest.fixture(scope="module")
def nan_rm(tmp_path_factory) -> str:
    """A real reward model whose score head is NaN: every score it gives is NaN."""
    import torch
    from transformers import AutoModelForSequenceClassification

    from tests.plugins.tiny_models import build_random_rm

    folder = build_random_rm(tmp_path_factory.mktemp("nan-rm"))
    model = AutoModelForSequenceClassification.from_pretrained(folder)
    with torch.no_grad():
        model.score.weight.fill_(float("nan"))
    model.save_pretrained(folder)
    return folder


def test_a_local_and_a_served_reward_model_giving_nan_abstain(nan_rm):
    """`kitae serve rm`'s server on loopback, in front of a real model that outputs NaN, and the same model
    loaded locally: neither NaN becomes the +10 that min(10, nan) would give."""
    server = make_server(LocalRewardModel(nan_rm), port=0)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        specs = [{"type": "reward_model", "url": url, "retries": 0}, {"type": "reward_model", "model": nan_rm}]
        for spec in specs:
            grader = build_grader(spec)
            grades = grader.grade_group({"messages": CONVS[0][:1]}, [{"output_text": "47です。<|im_end|>"}] * 2)
            assert [g.score for g in grades] == [None, None], spec
            assert grades[0].error == "reward model returned nan, not a finite number"
            assert grader.stats()["non_finite"] == 2
    finally:
        server.shutdown()
        server.server_close()


def test_serve_rm_replies_are_strict_json_when_the_model_gives_nan(nan_rm):
    """NaN is not JSON: a served score that is not a number goes out as null, which any client can parse."""
    import httpx

    server = make_server(LocalRewardModel(nan_rm), port=0)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1/score"
        reply = httpx.post(url, json={"texts": ["a", "b"]}, timeout=30)

        def refuse(name):
            raise ValueError(f"not JSON: {name}")

        body = json.loads(reply.text, parse_constant=refuse)
        assert reply.status_code == 200 and body["scores"] == [None, None]
    finally:
        server.shutdown()
        server.server_close()
