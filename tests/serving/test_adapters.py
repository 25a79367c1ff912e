"""`kitae serve model`'s LoRA adapter routes (vLLM's /v1/load_lora_adapter and /v1/unload_lora_adapter) on a real
server on 127.0.0.1: the served model samples with the adapter loaded last, exactly as peft's model in the client's
process does, and a bad folder changes nothing."""

from __future__ import annotations

import httpx
import pytest
import torch

from tests.served import serve_model

PROMPT = [1, 2, 3, 4, 5]


def make_adapter(model_path: str, folder, seed: int, r: int = 4) -> object:
    """A peft LoRA adapter of ``model_path`` with random (non-zero) weights saved to ``folder``; the peft model."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(model_path),
                           LoraConfig(r=r, lora_alpha=2 * r, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for name, w in model.named_parameters():
            if "lora_B" in name:
                w.normal_(0, 0.5)  # peft starts B at zero: the adapter would change nothing
    model.save_pretrained(folder)
    return model.eval()


def greedy_logps(model, prompt: list[int], steps: int = 4) -> tuple[list[int], list[float]]:
    """Greedy tokens and their log-probs from ``model`` in this process."""
    ids, logps = list(prompt), []
    with torch.no_grad():
        for _ in range(steps):
            logits = model(torch.tensor([ids])).logits[0, -1].float()
            token = int(logits.argmax())
            logps.append(float(torch.log_softmax(logits, -1)[token]))
            ids.append(token)
    return ids[len(prompt):], logps


@pytest.fixture(scope="module")
def served(random_lm):
    with serve_model(random_lm, name="tiny", default_max_tokens=4) as url:
        yield url


def complete(url: str, model: str | None = None) -> httpx.Response:
    body = {"prompt": PROMPT, "max_tokens": 4, "temperature": 0.0, "logprobs": 0, "return_tokens_as_token_ids": True,
            "skip_special_tokens": False, **({"model": model} if model else {})}
    return httpx.post(url + "/v1/completions", json=body, timeout=60)


def sampled(resp: httpx.Response) -> tuple[list[int], list[float]]:
    assert resp.status_code == 200, resp.text
    lp = resp.json()["choices"][0]["logprobs"]
    return [int(t.removeprefix("token_id:")) for t in lp["tokens"]], lp["token_logprobs"]


def post(url: str, route: str, body: dict) -> httpx.Response:
    return httpx.post(url + route, json=body, timeout=60)


def test_the_served_model_samples_with_the_adapter_loaded_last(served, random_lm, tmp_path):
    base = sampled(complete(served))
    first = make_adapter(random_lm, tmp_path / "a1", seed=1)
    second = make_adapter(random_lm, tmp_path / "a2", seed=2)
    version = httpx.get(served + "/health").json()["weight_version"]

    resp = post(served, "/v1/load_lora_adapter", {"lora_name": "a1", "lora_path": str(tmp_path / "a1")})
    assert resp.status_code == 200 and resp.json()["success"] is True and resp.json()["weight_version"] == version + 1
    tokens, logps = sampled(complete(served, "a1"))
    want_tokens, want_logps = greedy_logps(first, PROMPT)
    assert tokens == want_tokens and max(abs(a - b) for a, b in zip(logps, want_logps)) < 1e-4  # peft's own model
    assert (tokens, logps) != base

    assert post(served, "/v1/load_lora_adapter", {"lora_name": "a2", "lora_path": str(tmp_path / "a2")}).is_success
    tokens, logps = sampled(complete(served, "a2"))
    want_tokens, want_logps = greedy_logps(second, PROMPT)
    assert tokens == want_tokens and max(abs(a - b) for a, b in zip(logps, want_logps)) < 1e-4
    models = [m["id"] for m in httpx.get(served + "/v1/models").json()["data"]]
    assert models == ["tiny", "a1", "a2"]

    refused = complete(served, "a1")  # loaded, but not the one that samples
    assert refused.status_code == 400 and "one LoRA adapter at a time" in refused.json()["error"]["message"]
    assert complete(served, "tiny").status_code == 400  # the base alone cannot sample while an adapter is active
    assert complete(served, "nope").status_code == 404

    unloaded = post(served, "/v1/unload_lora_adapter", {"lora_name": "a1"})  # not the active one: outputs stay
    assert unloaded.status_code == 200 and unloaded.json()["weight_version"] == version + 2
    assert sampled(complete(served, "a2"))[0] == want_tokens
    assert post(served, "/v1/unload_lora_adapter", {"lora_name": "a2"}).json()["weight_version"] == version + 3
    tokens, logps = sampled(complete(served))
    assert tokens == base[0] and max(abs(a - b) for a, b in zip(logps, base[1])) < 1e-6  # the base's layers back
    assert [m["id"] for m in httpx.get(served + "/v1/models").json()["data"]] == ["tiny"]


BAD_LOADS = [  # (body, the field named, words of the message)
    ({"lora_name": "x"}, "lora_path", "lora_path must be"),  # no folder
    ({"lora_name": "", "lora_path": "/tmp"}, "lora_name", "lora_name must be"),  # no name
    ({"lora_name": "tiny", "lora_path": "{adapter}"}, "lora_name", "served base model's name"),
    ({"lora_name": "x", "lora_path": "{empty}"}, "lora_path", "no adapter_config.json"),
    ({"lora_name": "x", "lora_path": "{other}"}, "lora_path", "does not fit the served model"),  # another size
    ({"lora_name": "x", "lora_path": "{adapter}", "lora_int_id": 3}, "lora_int_id", "does not support"),
]


@pytest.mark.parametrize("body,param,says", BAD_LOADS)
def test_a_bad_adapter_is_refused_and_changes_nothing(served, random_lm, tmp_path, body, param, says):
    make_adapter(random_lm, tmp_path / "adapter", seed=3)
    other = tmp_path / "other"  # an adapter of another model: its layers are wider than the served ones
    make_adapter(random_lm, other, seed=3)
    weights = other / "adapter_model.safetensors"
    from safetensors.torch import load_file, save_file

    save_file({k: torch.zeros(v.shape[0], v.shape[1] + 8) if "lora_A" in k else v
               for k, v in load_file(weights).items()}, weights)
    (tmp_path / "empty").mkdir()
    folders = {"adapter": tmp_path / "adapter", "empty": tmp_path / "empty", "other": other}
    body = {k: v.format(**folders) if isinstance(v, str) else v for k, v in body.items()}
    before = httpx.get(served + "/health").json()
    resp = post(served, "/v1/load_lora_adapter", body)
    assert resp.status_code == 400, resp.text
    payload = resp.json()
    assert payload["success"] is False and payload["error"]["param"] == param and says in payload["message"]
    assert httpx.get(served + "/health").json() == before  # same version, no adapter


def test_unload_of_an_unknown_adapter_is_a_404_and_full_reloads_wait_for_unload(served, random_lm, tmp_path):
    resp = post(served, "/v1/unload_lora_adapter", {"lora_name": "never-loaded"})
    assert resp.status_code == 404 and resp.json()["success"] is False and "cannot be found" in resp.json()["message"]
    make_adapter(random_lm, tmp_path / "a", seed=4)
    assert post(served, "/v1/load_lora_adapter", {"lora_name": "a", "lora_path": str(tmp_path / "a")}).is_success
    try:
        resp = post(served, "/update_weights_from_disk", {"model_path": random_lm})
        assert resp.status_code == 400 and "unload them" in resp.json()["message"]
    finally:
        assert post(served, "/v1/unload_lora_adapter", {"lora_name": "a"}).is_success
    assert post(served, "/update_weights_from_disk", {"model_path": random_lm}).json()["success"] is True


def test_the_adapter_routes_take_json_objects_by_post_only(served):
    resp = httpx.post(served + "/v1/load_lora_adapter", json=[1], timeout=10)
    assert resp.status_code == 400 and resp.json()["success"] is False
    assert httpx.get(served + "/v1/load_lora_adapter", timeout=10).status_code == 404
