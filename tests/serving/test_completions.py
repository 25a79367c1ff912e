"""`kitae serve model` as a rollout server, over HTTP on 127.0.0.1: vLLM's /v1/completions (token-id prompts, n,
log-probs, token ids), concurrent requests, SGLang's /update_weights_from_disk, /health's weight_version, and
the 400s for what it does not support. The wire contract is the one kitae's `server` rollout engine speaks."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import torch

from kitae.errors import ConfigError
from kitae.models import load_causal_lm
from kitae.serving.server import load_service, make_server
from tests.serving.loopback import TOKEN

TIMEOUT = 120


def start(service, host: str = "127.0.0.1", token: str | None = None):
    server = make_server(service, host=host, port=0, token=token)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture(scope="module")
def served(random_lm):
    service = load_service(random_lm, name="tiny", default_max_tokens=8, max_batch=32)
    server, url = start(service)
    yield service, url
    server.shutdown()
    server.server_close()
    service.close()


@pytest.fixture
def fresh(random_lm):
    """A server of its own, for tests that change its weights."""
    service = load_service(random_lm, name="tiny", default_max_tokens=8)
    server, url = start(service)
    yield service, url
    server.shutdown()
    server.server_close()
    service.close()


def complete(url: str, body: dict | str, **headers) -> httpx.Response:
    content = body if isinstance(body, str) else json.dumps(body)
    return httpx.post(url + "/v1/completions", content=content, timeout=TIMEOUT,
                      headers={"Content-Type": "application/json", **headers})


def ids_of(service, text: str = "hello world, the answer is") -> list[int]:
    return service.engine.tokenizer(text, add_special_tokens=False)["input_ids"]


def rollout_body(prompt, **kw) -> dict:
    """What kitae's `server` engine sends (SERVER_CONTRACT.md)."""
    return {"model": "tiny", "prompt": prompt, "n": 3, "max_tokens": 10, "temperature": 1.0, "top_p": 1.0,
            "top_k": -1, "seed": 7, "stop": ["<|im_end|>", "<|endoftext|>"], "include_stop_str_in_output": True,
            "skip_special_tokens": False, "logprobs": 0, "return_tokens_as_token_ids": True,
            "repetition_penalty": 1.0, **kw}


def tokens_of(choice: dict) -> list[int]:
    return [int(t.removeprefix("token_id:")) for t in choice["logprobs"]["tokens"]]


def forward_distributions(model, prompt: list[int], tokens: list[int], temperature: float) -> torch.Tensor:
    """log_softmax(logits / T) over the vocabulary at each position of the completion, from one forward pass."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + tokens])).logits[0].float()  # [P + C, V]
    return torch.log_softmax(logits / (temperature or 1.0), dim=-1)[len(prompt) - 1 : -1]  # [C, V]


def forward_logprobs(model, prompt: list[int], tokens: list[int], temperature: float) -> torch.Tensor:
    """log_softmax(logits / T) at each token of the completion, from one forward pass."""
    logp = forward_distributions(model, prompt, tokens, temperature)  # [C, V]
    return logp.gather(-1, torch.tensor(tokens)[:, None]).squeeze(-1)  # [C]


# ---- the reply ---------------------------------------------------------------------------------------------
def test_a_rollout_request_gets_token_ids_and_logprobs(served):
    service, url = served
    prompt = ids_of(service)
    stop_ids = list(range(1, service.vocab_size, 6))  # so that the samples end at different steps
    reply = complete(url, rollout_body(prompt, n=6, stop_token_ids=stop_ids)).json()
    assert reply["object"] == "text_completion" and reply["model"] == "tiny" and reply["weight_version"] == 0
    assert [c["index"] for c in reply["choices"]] == list(range(6))
    assert len({len(tokens_of(c)) for c in reply["choices"]}) > 1
    tok = service.engine.tokenizer
    for choice in reply["choices"]:
        tokens, logprobs = tokens_of(choice), choice["logprobs"]["token_logprobs"]
        assert 0 < len(tokens) == len(logprobs) <= 10
        # vLLM's CompletionLogProbs: top_logprobs is a list, with logprobs 0 the sampled token alone per position
        assert choice["logprobs"]["top_logprobs"] == [{f"token_id:{t}": lp} for t, lp in zip(tokens, logprobs)]
        stopped = tokens[-1] in stop_ids or choice["text"].endswith(("<|im_end|>", "<|endoftext|>"))
        assert choice["finish_reason"] == ("stop" if stopped else "length") and (stopped or len(tokens) == 10)
        assert choice["text"] == tok.decode(tokens)  # the stop string kept, nothing after it
        want = forward_logprobs(service.engine.model, prompt, tokens, 1.0)
        assert (want - torch.tensor(logprobs)).abs().max().item() < 1e-4
        offsets = choice["logprobs"]["text_offset"]
        assert offsets[0] == 0 and offsets == sorted(offsets)
    assert reply["usage"] == {"prompt_tokens": len(prompt),
                              "completion_tokens": sum(len(tokens_of(c)) for c in reply["choices"]),
                              "total_tokens": len(prompt) + sum(len(tokens_of(c)) for c in reply["choices"])}
    again = complete(url, rollout_body(prompt, n=6, stop_token_ids=stop_ids)).json()
    assert [c["logprobs"]["tokens"] for c in again["choices"]] == [c["logprobs"]["tokens"] for c in reply["choices"]]


def test_a_text_prompt_is_the_same_as_its_token_ids(served):
    service, url = served
    text = "what is 12+35?"
    by_text = complete(url, {"prompt": text, "temperature": 0, "max_tokens": 6, "logprobs": 0,
                             "return_tokens_as_token_ids": True, "add_special_tokens": False}).json()
    by_ids = complete(url, {"prompt": ids_of(service, text), "temperature": 0, "max_tokens": 6, "logprobs": 0,
                            "return_tokens_as_token_ids": True}).json()
    assert by_text["choices"][0]["logprobs"]["tokens"] == by_ids["choices"][0]["logprobs"]["tokens"]
    assert by_text["usage"] == by_ids["usage"]
    plain = complete(url, {"prompt": [text], "temperature": 0, "max_tokens": 6, "add_special_tokens": False}).json()
    assert plain["choices"][0]["text"] == by_text["choices"][0]["text"] and plain["choices"][0]["logprobs"] is None


@pytest.mark.parametrize("temperature", [0, 0.7])
def test_logprobs_k_gives_the_top_k_of_the_sampling_distribution(served, temperature):
    """OpenAI's legacy ``logprobs: k``: at each position the sampled token and the k most likely ones (k or k + 1
    entries), their log-probs those of the forward pass under log_softmax(logits / T), the sampled token's the
    one in token_logprobs."""
    service, url = served
    prompt, k = ids_of(service), 5
    body = rollout_body(prompt, n=2, max_tokens=8, temperature=temperature, logprobs=k, top_k=-1)
    reply = complete(url, body)
    assert reply.status_code == 200, reply.text
    for choice in reply.json()["choices"]:
        tokens, lp = tokens_of(choice), choice["logprobs"]
        dist = forward_distributions(service.engine.model, prompt, tokens, temperature)  # [C, V]
        assert len(lp["top_logprobs"]) == len(tokens)
        for at, (token, top) in enumerate(zip(tokens, lp["top_logprobs"])):
            best = torch.topk(dist[at], k)
            want = {f"token_id:{i}": v for i, v in zip(best.indices.tolist(), best.values.tolist())}
            want.setdefault(f"token_id:{token}", dist[at, token].item())
            assert top.keys() == want.keys() and len(top) in (k, k + 1)
            assert max(abs(top[key] - want[key]) for key in want) < 1e-4
            assert top[f"token_id:{token}"] == lp["token_logprobs"][at]
            if temperature == 0:  # greedy: the sampled token is the most likely one
                assert len(top) == k and token == best.indices[0].item()


def test_logprobs_k_names_tokens_by_text_without_token_ids(served):
    service, url = served
    reply = complete(url, {"prompt": ids_of(service), "temperature": 0, "max_tokens": 4, "logprobs": 3}).json()
    lp = reply["choices"][0]["logprobs"]
    for token, top in zip(lp["tokens"], lp["top_logprobs"]):
        assert token in top and not any(key.startswith("token_id:") for key in top)
        assert top[token] == max(top.values())  # greedy


def test_stop_strings_are_kept_only_when_asked(served):
    service, url = served
    prompt = ids_of(service)
    free = complete(url, {"prompt": prompt, "temperature": 0, "max_tokens": 10, "ignore_eos": True}).json()
    text = free["choices"][0]["text"]
    stop = text[3:7]  # text the model writes (any tokens it spans)
    body = {"prompt": prompt, "temperature": 0, "max_tokens": 10, "stop": [stop], "ignore_eos": True}
    kept = complete(url, {**body, "include_stop_str_in_output": True}).json()["choices"][0]
    cut = complete(url, body).json()["choices"][0]
    assert kept["finish_reason"] == cut["finish_reason"] == "stop"
    assert kept["text"] == text[: text.index(stop) + len(stop)] and cut["text"] == text[: text.index(stop)]


# ---- batching over HTTP ----------------------------------------------------------------------------------
def test_concurrent_requests_get_what_they_get_alone(served):
    service, url = served
    texts = ["hello", "what is 12+35?", "東京は", "the answer is 47", "hi there", "こんにちは"]
    bodies = [rollout_body(ids_of(service, t), n=2, seed=i, temperature=[0, 0.8, 1.2][i % 3], max_tokens=12)
              for i, t in enumerate(texts)]
    one_by_one = [complete(url, b).json() for b in bodies]
    with ThreadPoolExecutor(len(bodies)) as pool:
        together = list(pool.map(lambda b: complete(url, b).json(), bodies))
    for a, b in zip(one_by_one, together):
        assert [tokens_of(c) for c in a["choices"]] == [tokens_of(c) for c in b["choices"]]
        assert [c["finish_reason"] for c in a["choices"]] == [c["finish_reason"] for c in b["choices"]]
        for x, y in zip(a["choices"], b["choices"]):
            assert torch.allclose(torch.tensor(x["logprobs"]["token_logprobs"]),
                                  torch.tensor(y["logprobs"]["token_logprobs"]), atol=1e-5)


def test_chat_and_completions_share_the_batch(served):
    """A judge call and rollouts at once: both answered, the chat reply as it is alone."""
    service, url = served
    chat = {"messages": [{"role": "user", "content": "12+35は?"}], "temperature": 0, "max_tokens": 6}
    alone = httpx.post(url + "/v1/chat/completions", json=chat, timeout=TIMEOUT).json()
    with ThreadPoolExecutor(4) as pool:
        rollouts = [pool.submit(complete, url, rollout_body(ids_of(service), max_tokens=30)) for _ in range(3)]
        beside = pool.submit(httpx.post, url + "/v1/chat/completions", json=chat, timeout=TIMEOUT).result()
        assert all(r.result().status_code == 200 for r in rollouts)
    assert beside.json()["choices"] == alone["choices"]


# ---- what it refuses -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("extra, param", [
    ({"presence_penalty": 0.5}, "presence_penalty"),  # would change the samples: not silently ignored
    ({"frequency_penalty": 1}, "frequency_penalty"),
    ({"logit_bias": {"5": 10}}, "logit_bias"),
    ({"logprobs": 21}, "logprobs"),  # past vLLM's default max_logprobs (20)
    ({"logprobs": -1}, "logprobs"),  # vLLM's "the whole vocabulary" needs --max-logprobs -1 there
    ({"logprobs": True}, "logprobs"),
    ({"logprobs": 1.5}, "logprobs"),
    ({"echo": True}, "echo"),
    ({"stream": "yes"}, "stream"),  # stream: true is served (test_streaming.py)
    ({"stream": True, "logprobs": 1}, "logprobs"),  # log-probs are not streamed
    ({"best_of": 4}, "best_of"),
    ({"min_p": 0.1}, "min_p"),
    ({"min_tokens": 4}, "min_tokens"),
    ({"guided_json": {"type": "object"}}, "guided_json"),
    ({"suffix": "x"}, "suffix"),
    ({"response_format": {"type": "json_object"}}, "response_format"),  # a chat field
    ({"prompt": [[1, 2], [3, 4]]}, "prompt"),  # one prompt per request
    ({"prompt": []}, "prompt"),
    ({"prompt": ""}, "prompt"),
    ({"prompt": [1, "2"]}, "prompt"),
    ({"prompt": [1, True]}, "prompt"),
    ({"prompt": [-1]}, "prompt"),
    ({"prompt": [10**9]}, "prompt"),  # not a token of this vocabulary
    ({"prompt": None}, "prompt"),
    ({"prompt": [1] * 600}, "prompt"),  # longer than the context (512)
    ({"max_tokens": 510}, "prompt"),  # prompt + max_tokens past the context
    ({"max_tokens": 0}, "max_tokens"),
    ({"n": 0}, "n"),
    ({"n": 257}, "n"),
    ({"temperature": -1}, "temperature"),
    ({"top_p": 1.5}, "top_p"),
    ({"top_k": -2}, "top_k"),
    ({"repetition_penalty": 0}, "repetition_penalty"),
    ({"seed": 2**64}, "seed"),
    ({"stop": [""]}, "stop"),
    ({"stop_token_ids": [10**9]}, "stop_token_ids"),
    ({"include_stop_str_in_output": "yes"}, "include_stop_str_in_output"),
    ({"return_tokens_as_token_ids": 1}, "return_tokens_as_token_ids"),
])
def test_bad_or_unsupported_fields_are_400s_naming_them(served, extra, param):
    service, url = served
    reply = complete(url, {**rollout_body(ids_of(service)), **extra})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error" and error["message"]


def test_an_unsupported_field_is_named_with_the_supported_ones(served):
    service, url = served
    error = complete(url, {"prompt": ids_of(service), "presence_penalty": 1, "echo": True}).json()["error"]
    assert error["message"].startswith("kitae serve model does not support presence_penalty, echo; remove them")
    assert "return_tokens_as_token_ids" in error["message"]


@pytest.mark.parametrize("extra", [
    {"stream": False, "echo": False, "presence_penalty": 0, "frequency_penalty": 0.0, "logit_bias": {}},
    {"top_k": -1, "logprobs": None, "seed": None, "user": "u", "priority": 0},
    {"top_k": 0, "min_p": 0, "best_of": 1, "stop": "<|im_end|>", "skip_special_tokens": True},
])
def test_fields_that_change_nothing_are_accepted(served, extra):
    service, url = served
    reply = complete(url, {"prompt": ids_of(service), "max_tokens": 2, **extra})
    assert reply.status_code == 200, reply.text


def test_another_model_name_is_a_404(served):
    service, url = served
    assert complete(url, rollout_body(ids_of(service), model="gpt-4o")).status_code == 404


# ---- weight reload -----------------------------------------------------------------------------------------
def save_changed(random_lm: str, folder, scale: float = 3.0, seed: int = 1) -> str:
    """The served model with noise added to every weight, saved as save_pretrained saves it."""
    model = load_causal_lm(random_lm)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * 0.02 * torch.randn(p.shape, generator=gen))
    model.save_pretrained(folder)
    return str(folder)


def reload(url: str, body: dict, **headers) -> httpx.Response:
    return httpx.post(url + "/update_weights_from_disk", json=body, timeout=TIMEOUT, headers=headers)


def greedy(url: str, service) -> dict:
    body = rollout_body(ids_of(service), n=1, temperature=0, max_tokens=8, seed=None)
    return complete(url, body).json()


def test_a_reload_changes_the_outputs_and_bumps_the_version(fresh, random_lm, tmp_path):
    service, url = fresh
    before = greedy(url, service)
    changed = save_changed(random_lm, tmp_path / "changed")
    reply = reload(url, {"model_path": changed, "load_format": None})
    assert reply.status_code == 200 and reply.json()["success"] is True and reply.json()["weight_version"] == 1
    assert httpx.get(url + "/health").json()["weight_version"] == 1
    after = greedy(url, service)
    assert after["weight_version"] == 1
    old_lp, new_lp = (torch.tensor(r["choices"][0]["logprobs"]["token_logprobs"]) for r in (before, after))
    assert not torch.allclose(old_lp, new_lp, atol=1e-3)
    # the served log-probs are the new model's, to forward-pass precision
    tokens = tokens_of(after["choices"][0])
    want = forward_logprobs(load_causal_lm(changed), ids_of(service), tokens, 1.0)
    assert (want - torch.tensor(after["choices"][0]["logprobs"]["token_logprobs"])).abs().max().item() < 1e-4
    # and the old weights come back from their own folder, with a version the trainer chose
    back = reload(url, {"model_path": random_lm, "weight_version": 40}).json()
    assert back["weight_version"] == 40 and greedy(url, service)["choices"] == before["choices"]


def test_a_lora_merged_model_reloads(fresh, random_lm, tmp_path):
    import peft

    service, url = fresh
    model = load_causal_lm(random_lm)
    lora = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                      init_lora_weights=False))  # B != 0: the merge changes q, v
    merged = lora.merge_and_unload()
    merged.save_pretrained(tmp_path / "merged")
    assert reload(url, {"model_path": str(tmp_path / "merged")}).json()["weight_version"] == 1
    choice = greedy(url, service)["choices"][0]
    served = torch.tensor(choice["logprobs"]["token_logprobs"])
    assert (forward_logprobs(merged, ids_of(service), tokens_of(choice), 1.0) - served).abs().max() < 1e-4
    base = forward_logprobs(load_causal_lm(random_lm), ids_of(service), tokens_of(choice), 1.0)
    assert (base - served).abs().max() > 1e-3  # the merge changed the model, and the server has the change


def test_a_bf16_checkpoint_loads_into_a_float32_server(fresh, random_lm, tmp_path):
    service, url = fresh
    model = load_causal_lm(save_changed(random_lm, tmp_path / "changed")).to(torch.bfloat16)
    model.save_pretrained(tmp_path / "bf16")
    assert reload(url, {"model_path": str(tmp_path / "bf16")}).status_code == 200
    served = dict(service.engine.model.named_parameters())
    assert all(p.dtype == torch.float32 for p in served.values())
    for name, p in model.named_parameters():
        assert torch.equal(served[name], p.float()), name


def other_architecture(folder) -> str:
    from tests.tiny import tiny_llama

    tiny_llama(400, hidden=64).save_pretrained(folder)
    return str(folder)


@pytest.mark.parametrize("make_body, said", [
    (lambda tmp, lm: {"model_path": str(tmp / "nowhere")}, "no folder at"),
    (lambda tmp, lm: {"model_path": str(tmp)}, "no .safetensors files"),
    (lambda tmp, lm: {"model_path": other_architecture(tmp / "big")}, "has shape"),
    (lambda tmp, lm: {"model_path": lm, "load_format": "pt"}, "load_format must be"),
    (lambda tmp, lm: {"model_path": lm, "abort_all_requests": True}, "does not support abort_all_requests"),
    (lambda tmp, lm: {"model_path": lm, "weight_version": -1}, "weight_version must be"),
    (lambda tmp, lm: {"model_path": 5}, "model_path must be"),
    (lambda tmp, lm: {}, "model_path must be"),
    (lambda tmp, lm: [lm], "must be a JSON object"),
])
def test_a_bad_reload_is_a_400_and_changes_nothing(fresh, random_lm, tmp_path, make_body, said):
    service, url = fresh
    before = greedy(url, service)
    reply = reload(url, make_body(tmp_path, random_lm))
    assert reply.status_code == 400, reply.text
    payload = reply.json()
    assert payload["success"] is False and said in payload["message"] and said in payload["error"]["message"]
    assert httpx.get(url + "/health").json()["weight_version"] == 0
    assert greedy(url, service)["choices"] == before["choices"]


def test_a_lora_adapter_folder_is_refused_with_how_to_merge_it(fresh, random_lm, tmp_path):
    import peft

    service, url = fresh
    lora = peft.get_peft_model(load_causal_lm(random_lm), peft.LoraConfig(r=2, target_modules=["q_proj"]))
    lora.save_pretrained(tmp_path / "adapter")
    message = reload(url, {"model_path": str(tmp_path / "adapter")}).json()["message"]
    assert "LoRA adapter" in message and "merge_and_unload" in message


def test_reload_beyond_loopback_needs_the_token(random_lm, tmp_path):
    service = load_service(random_lm, name="tiny", default_max_tokens=4)
    try:
        with pytest.raises(ConfigError, match="--host"):
            make_server(service, host="0.0.0.0", port=0)  # no token: refused before it listens
        server, url = start(service, host="0.0.0.0", token=TOKEN)
        changed = save_changed(random_lm, tmp_path / "changed")
        try:
            assert reload(url, {"model_path": changed}).status_code == 401
            assert reload(url, {"model_path": changed}, Authorization="Bearer " + "x" * 24).status_code == 401
            assert httpx.get(url + "/health", headers={"Authorization": f"Bearer {TOKEN}"}).json()[
                "weight_version"] == 0  # the refused reloads changed nothing
            ok = reload(url, {"model_path": changed}, Authorization=f"Bearer {TOKEN}")
            assert ok.status_code == 200 and ok.json()["weight_version"] == 1
        finally:
            server.shutdown()
            server.server_close()
    finally:
        service.close()
