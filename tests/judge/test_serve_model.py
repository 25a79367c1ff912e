"""`kitae serve model`: the OpenAI chat protocol end to end with a real tiny model, in-process and as a process."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading

import httpx
import jsonschema
import pytest

from kitae.graders import build_grader
from kitae.judge.prompt import DEFAULT_CRITERIA, reply_schema
from kitae.rollout.base import SamplingParams
from kitae.serving.server import ChatService, load_service, make_server, parse_request

MSG = [{"role": "user", "content": "12+35は?"}]
ITEM = {"messages": MSG, "reference_answer": "47"}
SAMPLES = [{"output_text": "47"}, {"output_text": "48"}, {"output_text": "12+35=47です。"}]


@pytest.fixture(scope="module")
def served(random_lm):
    service = load_service(random_lm, name="tiny", max_context=4096, default_max_tokens=16)
    server = make_server(service, port=0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield service, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def post(url: str, body: dict | str) -> httpx.Response:
    content = body if isinstance(body, str) else json.dumps(body)
    return httpx.post(url + "/v1/chat/completions", content=content, headers={"Content-Type": "application/json"},
                      timeout=60)


def test_models_and_health(served):
    _, url = served
    models = httpx.get(url + "/v1/models").json()
    assert models["data"][0]["id"] == "tiny" and models["data"][0]["max_model_len"] == 4096
    assert httpx.get(url + "/health").json() == {"status": "ok", "model": "tiny", "weight_version": 0,
                                                "adapter": None}  # no LoRA adapter loaded (/v1/load_lora_adapter)


def test_a_model_is_retrieved_by_its_id(served):
    """OpenAI's GET /v1/models/{model}: the served model's object, the one /v1/models lists; 404 for others."""
    _, url = served
    reply = httpx.get(url + "/v1/models/tiny")
    assert reply.status_code == 200 and reply.json() == httpx.get(url + "/v1/models").json()["data"][0]
    for other in ("gpt-4o", "tiny2", "org%2Ftiny", ""):
        missing = httpx.get(url + "/v1/models/" + other)
        assert missing.status_code == 404, other
        error = missing.json()["error"]
        assert error["type"] == "not_found_error" and error["param"] == "model" and "'tiny'" in error["message"]


def test_a_model_id_with_a_slash_is_retrieved(random_lm):
    service = load_service(random_lm, name="org/tiny-7b")
    try:
        assert service.handle_get("/v1/models/org/tiny-7b")["id"] == "org/tiny-7b"
        assert service.handle_get("/v1/models/org%2Ftiny-7b")["id"] == "org/tiny-7b"  # the id URL-encoded
    finally:
        service.close()


def test_chat_logprobs_are_the_top_k_of_the_sampling_distribution(served):
    """``logprobs: true, top_logprobs: k``: choices[].logprobs.content, one entry per completion token (the
    tokens usage counts), each with its log-prob, its UTF-8 bytes and the k most likely tokens, best first, as a
    forward pass over the same tokens gives them."""
    import torch

    service, url = served
    body = {"messages": MSG, "temperature": 0, "max_tokens": 6, "logprobs": True, "top_logprobs": 3}
    reply = post(url, body)
    assert reply.status_code == 200, reply.text
    choice = reply.json()["choices"][0]
    content = choice["logprobs"]["content"]
    assert len(content) == reply.json()["usage"]["completion_tokens"]
    prompt = service.engine.encode_prompt(MSG)
    [[own]] = service.engine.generate_tokens([prompt], 1, SamplingParams(temperature=0, max_new_tokens=6,
                                                                        stop=service.markers))
    tok = service.engine.tokenizer
    assert [c["token"] for c in content] == [tok.decode([t]) for t in own.completion_ids]
    with torch.no_grad():
        logits = service.engine.model(torch.tensor([prompt + own.completion_ids])).logits[0].float()
    dist = torch.log_softmax(logits, dim=-1)[len(prompt) - 1 : -1]  # [C, V]
    for at, entry in enumerate(content):
        assert entry["bytes"] == list(entry["token"].encode("utf-8"))
        assert abs(entry["logprob"] - dist[at, own.completion_ids[at]].item()) < 1e-4
        best = torch.topk(dist[at], 3)
        assert [t["token"] for t in entry["top_logprobs"]] == [tok.decode([i]) for i in best.indices.tolist()]
        assert max(abs(t["logprob"] - v) for t, v in zip(entry["top_logprobs"], best.values.tolist())) < 1e-4
        assert all(t["bytes"] == list(t["token"].encode("utf-8")) for t in entry["top_logprobs"])
        assert entry["top_logprobs"][0]["token"] == entry["token"]  # greedy: the sampled one is the best


def test_chat_logprobs_without_alternatives(served):
    _, url = served
    reply = post(url, {"messages": MSG, "temperature": 1.0, "seed": 4, "max_tokens": 4, "n": 2,
                       "logprobs": True}).json()
    for choice in reply["choices"]:
        content = choice["logprobs"]["content"]
        assert content and all(c["top_logprobs"] == [] and c["logprob"] <= 0 for c in content)
    plain = post(url, {"messages": MSG, "max_tokens": 2}).json()
    assert plain["choices"][0]["logprobs"] is None


@pytest.mark.parametrize("role", ["system", "user", "assistant", "tool", "developer"])
def test_the_chat_roles_are_accepted(served, role):
    reply = post(served[1], {"messages": [{"role": role, "content": "hi"}, *MSG], "max_tokens": 2})
    assert reply.status_code == 200, reply.text


def test_plain_completion_matches_the_engine(served):
    service, url = served
    reply = post(url, {"model": "tiny", "messages": MSG, "temperature": 0, "max_tokens": 6}).json()
    expected = service.engine.generate([MSG], 1, SamplingParams(temperature=0, max_new_tokens=6))[0][0]
    choice = reply["choices"][0]
    assert reply["object"] == "chat.completion" and choice["message"]["role"] == "assistant"
    assert choice["message"]["content"] == expected.text.removesuffix("<|im_end|>").removesuffix("<|endoftext|>")
    prompt = len(service.engine.encode_prompt(MSG))
    assert reply["usage"] == {"prompt_tokens": prompt, "completion_tokens": expected.num_tokens,
                              "total_tokens": prompt + expected.num_tokens}
    assert choice["finish_reason"] == ("length" if expected.finish_reason == "length" else "stop")


def test_n_choices_and_seeds(served):
    _, url = served
    body = {"messages": MSG, "temperature": 1.0, "max_tokens": 5, "n": 2, "seed": 7}
    first, again = post(url, body).json(), post(url, body).json()
    assert len(first["choices"]) == 2 and [c["index"] for c in first["choices"]] == [0, 1]
    assert [c["message"] for c in first["choices"]] == [c["message"] for c in again["choices"]]


def test_top_p_0_samples_the_top_token(served):
    """OpenAI allows top_p 0; the nucleus filter once masked every token (NaN probabilities, a 500)."""
    _, url = served
    greedy = post(url, {"messages": MSG, "temperature": 0, "max_tokens": 5}).json()
    reply = post(url, {"messages": MSG, "temperature": 1.0, "top_p": 0, "max_tokens": 5, "seed": 3})
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"] == greedy["choices"][0]["message"]


def test_json_schema_is_honoured(served):
    _, url = served
    schema = reply_schema(3, DEFAULT_CRITERIA, (1, 5))
    for temperature in (0, 1.0):
        body = {"messages": MSG, "temperature": temperature, "seed": 1, "max_tokens": 64,
                "response_format": {"type": "json_schema", "json_schema": {"name": "j", "schema": schema}}}
        reply = post(url, body).json()
        jsonschema.validate(json.loads(reply["choices"][0]["message"]["content"]), schema)
        assert reply["usage"]["completion_tokens"] > 0


@pytest.mark.parametrize("fmt", [{"type": "json_object"}, {"type": "json_schema", "json_schema": {
    "name": "p", "schema": {"type": "string", "pattern": "^a$"}}}])
def test_formats_outside_the_subset_still_answer(served, fmt):
    _, url = served
    reply = post(url, {"messages": MSG, "temperature": 0.7, "max_tokens": 4, "response_format": fmt})
    assert reply.status_code == 200  # sampled and checked; with no valid attempt the last one comes back
    assert len(reply.json()["choices"]) == 1


PATTERN = {"type": "json_schema", "json_schema": {"schema": {"type": "string", "pattern": "^a+$"}}}


@pytest.mark.parametrize(
    "text, fmt, valid",
    [
        ('{"a": 1}', {"type": "json_object"}, True),
        ("[1, 2]", {"type": "json_object"}, False),  # JSON, but not an object
        ("{'a': 1}", {"type": "json_object"}, False),
        ('"aaa"', PATTERN, True),
        ('"ab"', PATTERN, False),
    ],
)
def test_sampled_replies_are_checked(text, fmt, valid):
    req = parse_request({"messages": MSG, "response_format": fmt})
    assert ChatService._valid(text, req) is valid


@pytest.mark.parametrize(
    "body, status, param",
    [
        ({"model": "gpt-4o", "messages": MSG}, 404, "model"),
        ({"messages": MSG, "stream": 1}, 400, "stream"),  # stream: true is served (tests/serving/test_streaming.py)
        ({"messages": MSG, "stream": True, "logprobs": True}, 400, "logprobs"),  # log-probs are not streamed
        ({"messages": MSG, "temperature": 3}, 400, "temperature"),
        ({"messages": MSG, "n": 0}, 400, "n"),
        ({"messages": MSG, "max_tokens": 0}, 400, "max_tokens"),
        ({"messages": MSG, "max_tokens": 5000}, 400, "max_tokens"),  # past the 4096-token context
        ({"messages": MSG, "max_tokens": 4096}, 400, "messages"),  # the context, but the messages take some
        ({"messages": []}, 400, "messages"),
        ({"messages": [{"role": "user", "content": 5}]}, 400, "messages[0].content"),
        ({"messages": MSG, "response_format": {"type": "xml"}}, 400, "response_format"),
        ({"messages": MSG, "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": 5}}}},
         400, "response_format.json_schema.schema"),
        ("{not json", 400, None),
        ({"messages": [{"role": {"a": 1}, "content": "x"}]}, 400, "messages[0].role"),
        ({"messages": [{"role": "user"}]}, 400, "messages[0].content"),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}, 400, "messages[0].content[0].text"),
        ({"messages": [{"role": "user", "content": "\ud800"}]}, 400, "messages[0].content"),  # a lone surrogate
        ({"messages": MSG, "seed": 2**100}, 400, "seed"),
        ({"messages": MSG, "seed": 1.5}, 400, "seed"),
        ({"messages": MSG, "max_tokens": 10**30}, 400, "max_tokens"),  # past the context, before tokenizing
        ({"messages": MSG, "max_completion_tokens": 4097}, 400, "max_completion_tokens"),
        ({"messages": MSG, "n": 17}, 400, "n"),
        ({"messages": MSG, "stop": ["a"] * 17}, 400, "stop"),
        ({"messages": MSG, "stop": [""]}, 400, "stop"),
        ({"messages": MSG, "presence_penalty": 0.5}, 400, "presence_penalty"),  # would change the results
        ({"messages": MSG, "frequency_penalty": -1}, 400, "frequency_penalty"),
        ({"messages": MSG, "logit_bias": {"5": 100}}, 400, "logit_bias"),
        ({"messages": MSG, "top_k": 5}, 400, "top_k"),
        ({"messages": MSG, "chat_template_kwargs": "enable_thinking"}, 400, "chat_template_kwargs"),  # not an object
        ({"messages": MSG, "chat_template_kwargs": {"tokenize": True}}, 400, "chat_template_kwargs.tokenize"),
        ({"messages": MSG, "logprobs": "yes"}, 400, "logprobs"),
        ({"messages": MSG, "logprobs": True, "top_logprobs": 21}, 400, "top_logprobs"),  # vLLM's max_logprobs
        ({"messages": MSG, "logprobs": True, "top_logprobs": -1}, 400, "top_logprobs"),
        ({"messages": MSG, "top_logprobs": 2}, 400, "top_logprobs"),  # without logprobs: true
        ({"messages": MSG, "logprobs": True, "response_format": {"type": "json_schema", "json_schema": {
            "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}}}, 400, "logprobs"),
        ({"messages": [{"role": "robot", "content": "x"}]}, 400, "messages[0].role"),
        ({"messages": [*MSG, {"role": "User", "content": "x"}]}, 400, "messages[1].role"),
        ({"messages": MSG, "tools": [{"type": "function"}]}, 400, "tools"),
    ],
)
def test_errors_are_openai_shaped(served, body, status, param):
    _, url = served
    reply = post(url, body)
    assert reply.status_code == status
    assert reply.json()["error"]["param"] == param and reply.json()["error"]["message"]


@pytest.mark.parametrize("extra", [
    {"user": "someone", "metadata": {"run": "1"}, "store": False},  # bookkeeping
    {"stream": False, "logprobs": False, "presence_penalty": 0, "frequency_penalty": 0.0, "logit_bias": {}},
    {"top_k": None, "n": None, "seed": None, "tools": [], "tool_choice": "none"},  # null is "not given"
    {"seed": 2**63 - 1, "reasoning_effort": "low"},
])
def test_fields_that_change_nothing_are_accepted(served, extra):
    reply = post(served[1], {"messages": MSG, "max_tokens": 2, **extra})
    assert reply.status_code == 200, reply.text


def test_an_unsupported_field_is_named_with_the_supported_ones(served):
    error = post(served[1], {"messages": MSG, "presence_penalty": 1, "top_k": 3}).json()["error"]
    assert error["message"].startswith("kitae serve model does not support presence_penalty, top_k; remove them")
    assert "temperature" in error["message"] and error["type"] == "invalid_request_error"


def test_an_unknown_role_is_named_with_the_allowed_ones(served):
    error = post(served[1], {"messages": [{"role": "robot", "content": "x"}]}).json()["error"]
    assert "'robot'" in error["message"]
    assert all(role in error["message"] for role in ("system", "user", "assistant", "tool", "developer"))


def test_an_oversize_prompt_is_refused_by_its_characters(served):
    service, url = served
    too_long = "x" * (service.max_prompt_chars + 1)
    error = post(url, {"messages": [{"role": "user", "content": too_long}]}).json()["error"]
    assert error["param"] == "messages" and f"over {service.max_prompt_chars:,} characters" in error["message"]
    # and the bound never refuses what fits: no token stands for more characters than the longest vocab entry
    tok = service.engine.tokenizer
    longest = max(tok.get_vocab(), key=len)
    assert service.max_prompt_chars == service.max_context * len(longest)
    assert len(tok.decode(tok.convert_tokens_to_ids([longest]))) <= len(longest)


def test_unknown_path(served):
    _, url = served
    reply = httpx.post(url + "/v1/embeddings", json={})
    assert reply.status_code == 404 and "/v1/completions" in reply.json()["error"]["message"]
    assert httpx.get(url + "/v1/embeddings").status_code == 404


def test_judge_and_model_graders_through_the_server(served):
    _, url = served
    judge = build_grader({"type": "judge", "model": "tiny", "base_url": url + "/v1", "max_tokens": 200})
    grades = judge.grade_group(ITEM, SAMPLES)
    assert all(g.score is not None and 0 <= g.score <= 1 for g in grades)  # constrained: always a valid judgement
    stats = judge.stats()
    assert stats["invalid_outputs"] == 0 and stats["client_format_downgrades"] == 0 and stats["prompt_tokens"] > 0
    label = build_grader({"type": "label_model", "model": "tiny", "base_url": url + "/v1",
                          "input": [{"role": "user", "content": "{{sample.output_text}}"}],
                          "labels": ["right", "wrong"], "passing_labels": ["right"]})
    assert all(g.score in (0.0, 1.0) and g.reason.startswith("label: ") for g in label.grade_group(ITEM, SAMPLES))
    score = build_grader({"type": "score_model", "model": "tiny", "base_url": url + "/v1", "range": [0, 10],
                          "input": [{"role": "user", "content": "{{sample.output_text}}"}]})
    assert all(0 <= g.score <= 10 and g.reason.startswith("model said") for g in score.grade_group(ITEM, SAMPLES))


@pytest.fixture(scope="module")
def stuck(tmp_path_factory):
    """A real model that says ``<|im_start|>`` at every step (every layer's output zeroed, every embedding the
    same vector, and the head aligned with it for that one token)."""
    import torch

    from tests.tiny import tiny_llama, tiny_tokenizer

    tok = tiny_tokenizer()
    model = tiny_llama(len(tok))
    model.config.tie_word_embeddings = False
    model.lm_head.weight = torch.nn.Parameter(torch.zeros_like(model.lm_head.weight))
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(torch.ones(model.config.hidden_size))
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.lm_head.weight[tok.convert_tokens_to_ids("<|im_start|>")] = 1.0
    folder = tmp_path_factory.mktemp("stuck")
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    service = load_service(str(folder), name="stuck")
    assert service.engine.generate([MSG], 1, SamplingParams(temperature=0, max_new_tokens=3))[0][0].text \
        .startswith("<|im_start|>")  # the model does say it
    return service


@pytest.mark.parametrize("body", [
    {"max_tokens": 5},
    {"max_tokens": 5, "stop": ["zzz"]},
    {"max_tokens": 5, "response_format": {"type": "json_object"}},  # sampled and checked
])
def test_no_control_token_text_reaches_the_client(stuck, body):
    reply = stuck.chat(parse_request({"messages": MSG, "temperature": 0, **body}))
    for choice in reply["choices"]:
        assert "<|im_start|>" not in choice["message"]["content"] and choice["finish_reason"] == "stop"


@pytest.mark.parametrize("text, cut", [
    ("hello<|im_start|>user\nmore", "hello"),
    ("<|im_end|>", ""),
    ("a<|endoftext|>b<|im_start|>", "a"),
    ("plain text", "plain text"),
    ("<|im_st", "<|im_st"),  # not a marker
])
def test_cut_at_markers(text, cut):
    from kitae.chat import TEMPLATE_TOKENS
    from kitae.http.requests import cut_at_markers

    assert cut_at_markers(text, TEMPLATE_TOKENS) == (cut, cut != text)


PREFIX = "kitae serve model: serving "


@pytest.mark.slow
def test_cli_process_end_to_end(tiny_lm, tmp_path):
    """The bundled model when it is built (else a tiny one), as users run it: a process on a free port."""
    cmd = [sys.executable, "-m", "kitae.cli.main", "serve", "model", "--model", tiny_lm, "--port", "0",
           "--max-context", "8192", "--name", "judge-under-test"]
    log = open(tmp_path / "server.log", "w")
    env = os.environ | {"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
    try:
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: lines.put(proc.stdout.readline()), daemon=True).start()
        first = lines.get(timeout=120)
        assert first.startswith(PREFIX + "judge-under-test on http://127.0.0.1:"), first
        url = first.strip().rsplit(" on ", 1)[1]
        judge = build_grader({"type": "judge", "model": "judge-under-test", "base_url": url, "max_tokens": 160})
        grades = judge.grade_group(ITEM, SAMPLES[:2])
        assert all(g.score is not None for g in grades), judge.stats()
    finally:
        proc.kill()
        proc.wait(timeout=30)
        log.close()


@pytest.mark.parametrize("model, dtype, message", [
    ("/no/such/folder", "float32", "--model: no model folder at '/no/such/folder' (give a local folder"),
    ("Qwen/Qwen2.5-0.5B-Instruct", "float32", "not in the Hub cache"),  # offline, not cached: not fetched
    (None, "int4", "--dtype: expected float32, bfloat16 or float16"),
])
def test_load_errors_for_people(random_lm, model, dtype, message):
    from kitae.errors import ConfigError

    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        load_service(model or random_lm, dtype=dtype)
