"""kitae against vLLM 0.34 as released (its modules, in the contract environment): the /v1/completions bodies
kitae sends, the reply fields it reads, and the vllm weight sync (calls, payloads, routes, and the weights a worker
unpacks from the broadcast). The NCCL transport itself is not run: no GPU here (vllm_checks.without_nccl)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kitae.rollout.base import SamplingParams
from kitae.rollout.server import SERVER_APIS, Replica, ServerEngine, request_stops
from kitae.rollout.sync import ADAPTER_ROUTES, VLLM_ROUTES, adapter_name
from kitae.serving.server import LOAD_ADAPTER_PATH, UNLOAD_ADAPTER_PATH
from tests.built_once import built_once
from tests.contracts.checks import run_checks

CONFIGS = [  # (sampling settings, n, served model name)
    (SamplingParams(), 4, None),  # kitae's defaults: no seed, two stop strings
    (SamplingParams(temperature=0.7, top_p=0.9, top_k=20, repetition_penalty=1.1, max_new_tokens=64, seed=7,
                    stop=["</answer>"]), 8, "policy"),  # every setting kitae sends, and a model name
    (SamplingParams(temperature=0.0, max_new_tokens=1, stop=[], seed=0), 1, None),  # greedy (vLLM: n must be 1)
]
CHAT_BODIES = [  # chat requests kitae serve model honours, chat_template_kwargs included (tests/serving, tests/families)
    {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
     "chat_template_kwargs": {"enable_thinking": False}},
    {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}], "n": 2,
     "temperature": 0.7, "top_p": 0.9, "seed": 3, "stop": ["</answer>"], "logprobs": True, "top_logprobs": 2,
     "chat_template_kwargs": {}},
]
CHANGED = [[[5, 6, 7], [-0.5, -1.0, -0.25], "stop", [["4", 0, 1], ["5", 1, 3]]],  # weights changed mid-sample
           [[8], [-2.0], "length", [["5", 0, 1]]]]


@pytest.fixture(scope="module")
def vllm_says(contract_python, tmp_path_factory) -> dict:
    """Every check of this file, run in the contract environment at once."""
    bodies = [SERVER_APIS.get("openai").build([1, 2, 3], n, sp, model) for sp, n, model in CONFIGS]
    checks = {
        "requests": ["requests", bodies], "chat": ["chat", CHAT_BODIES], "changed": ["reply", {"choices": CHANGED}],
        "fresh": ["reply", {"choices": [[[5], [-1.0], "stop", [["5", 0, 1]]]]}],
        "protocols": ["protocols", {}], "sync": ["sync", {"world_size": 2, "versions": [5, 6]}],
        "adapter_request": ["requests", [SERVER_APIS.get("openai").build([1, 2, 3], 2, SamplingParams(), "base",
                                                                         adapter_name(7))]],
        "lora": ["lora", {"folder": "/srv/kitae-sync", "versions": [1, 2, 3]}]}

    def check(folder: Path) -> None:  # run_checks' answer is JSON
        (folder / "says.json").write_text(json.dumps(run_checks(contract_python, checks)))

    return json.loads((built_once(tmp_path_factory, "vllm-says", check) / "says.json").read_text())


def test_completion_bodies_are_what_vllm_reads(vllm_says):
    got = vllm_says["requests"]["requests"]
    for (sp, n, _), read in zip(CONFIGS, got):
        assert read["undeclared"] == []  # vLLM ignores an undeclared field: it would be a setting silently lost
        assert read["return_weight_versions"] is True and read["return_tokens_as_token_ids"] is True
        s = read["sampling"]
        assert (s["n"], s["seed"], s["max_tokens"], s["logprobs"]) == (n, sp.seed, sp.max_new_tokens, 0)
        assert (s["top_p"], s["repetition_penalty"]) == (sp.top_p, sp.repetition_penalty)
        assert max(s["top_k"], 0) == sp.top_k  # kitae's 0 (off) is sent as -1, which vLLM reads as 0
        assert s["temperature"] == pytest.approx(sp.temperature) and s["stop"] == request_stops(sp)
        assert s["skip_special_tokens"] is False and s["include_stop_str_in_output"] is True


def test_a_vllm_reply_is_read_with_its_weight_versions(vllm_says):
    reply = vllm_says["changed"]["reply"]
    parsed = SERVER_APIS.get("openai").parse(reply, 2)
    assert [(c.token_ids, c.logprobs, c.finish_reason) for c in parsed.choices] == [
        ([5, 6, 7], [-0.5, -1.0, -0.25], "stop"), ([8], [-2.0], "length")]
    assert parsed.weight_version == 4  # the oldest weights that sampled any token


def test_a_reply_sampled_partly_by_old_weights_is_stale(vllm_says):
    engine = ServerEngine.__new__(ServerEngine)  # only the staleness rule: no model, no servers
    engine.weight_sync, engine.max_staleness, engine.version = object(), 0, 5
    replica = Replica("http://127.0.0.1:9", 0, synced=5, server_version=5)  # as VllmSync marks a push
    version = engine._sample_version(replica, SERVER_APIS.get("openai").parse(vllm_says["changed"]["reply"], 2))
    assert version is None and engine._too_old(version)
    fresh = vllm_says["fresh"]["reply"]
    assert engine._sample_version(replica, SERVER_APIS.get("openai").parse(fresh, 1)) == 5


def test_kitae_weight_source_and_client_implement_vllms_interfaces(vllm_says):
    got = vllm_says["protocols"]
    assert got["source_is_weight_source"] and got["implements_iter_full"]
    assert got["metadata"] == [["weight", "torch.float32", [2, 3]], ["bias", "torch.float32", [2]]]
    assert {"init_weight_transfer_engine", "update_weights", "finish_weight_update"} <= set(got["signatures"])
    for name, (kitae_params, vllm_params) in got["signatures"].items():  # every method of vLLM's client protocol
        assert kitae_params == vllm_params, name


def test_the_weight_sync_speaks_vllms_routes_and_payloads(vllm_says):
    got = vllm_says["sync"]
    served = {path: methods for path, methods in got["routes"]}
    for method, route in VLLM_ROUTES.values():
        assert method in served.get(route, []), route
    assert got["endpoints"] == [{"world_size": 3, "rank": 0, "packed": True}]  # one NCCL group for both pushes
    # packing is agreed at init: vLLM's workers unpack only when the trainer's init says so
    init = ["init", {"rank_offset": 1, "world_size": 3, "packed": True}]
    names, shapes = ["0.weight", "0.bias", "1.weight", "1.bias"], [[2, 3], [2], [1, 2], [1]]
    first = [["pause", "wait"], ["start"], ["update", names, ["bfloat16"] * 4, shapes, 0], ["finish", "5"],
             ["resume"]]
    second = [*first[:2], ["update", [], [], [], 0], ["finish", "6"], ["resume"]]  # metadata sent once
    assert got["calls"] == [init, *first, *second]
    pushed = [[name, "torch.bfloat16", shape, True] for name, shape in zip(names, shapes)]
    assert got["received"] == [pushed, pushed]  # each push's weights, as a worker unpacks them
    assert got["loaded"] == [[5, 5], [6, 6]] and got["down"] == []


def test_chat_template_kwargs_are_vllm_s_chat_field_and_no_completions_field(vllm_says):
    """kitae serve model's chat API reads chat_template_kwargs as vLLM's does; vLLM's completions API has no such
    field (it would ignore one), so the server engine applies model.chat_template_kwargs itself and sends the
    prompt's token ids (tests/families/test_server_engine.py)."""
    from kitae.serving.server import parse_request

    said = vllm_says["chat"]
    for body, read in zip(CHAT_BODIES, said["chat"]):
        assert read["undeclared"] == []
        assert read["chat_template_kwargs"] == body["chat_template_kwargs"] == parse_request(body).chat_template_kwargs
    assert said["completions_field"] is False
    for sp, n, model in CONFIGS:
        assert "chat_template_kwargs" not in SERVER_APIS.get("openai").build([1], n, sp, model)


def test_the_adapter_push_speaks_vllms_lora_routes(vllm_says):
    lora = vllm_says["lora"]
    load, unload = ADAPTER_ROUTES["openai"]
    assert [load, ["POST"]] in lora["routes"] and [unload, ["POST"]] in lora["routes"]
    assert (LOAD_ADAPTER_PATH, UNLOAD_ADAPTER_PATH) == (load, unload)  # kitae serve model's are vLLM's: one client
    names = [adapter_name(v) for v in (1, 2, 3)]
    folders = [f"/srv/kitae-sync/adapter-v{v:06d}" for v in (1, 2, 3)]
    loads = [body for what, body in lora["seen"] if what == "load"]
    assert [(b["lora_name"], b["lora_path"], b["load_inplace"]) for b in loads] == \
        list(zip(names, folders, [False] * 3))
    unloads = [body["lora_name"] for what, body in lora["seen"] if what == "unload"]
    assert unloads == names[:2]  # each push unloads the adapter before it (max_staleness 0)
    assert lora["loaded"] == [[1, None, names[0]], [2, None, names[1]], [3, None, names[2]]]  # vLLM's text reply read
    assert lora["answers_text"]  # vLLM 0.34 answers a load with text, not JSON: kitae reads either


def test_a_request_names_the_adapter_as_vllms_model(vllm_says):
    read = vllm_says["adapter_request"]["requests"][0]
    body = SERVER_APIS.get("openai").build([1, 2, 3], 2, SamplingParams(), "base", adapter_name(7))
    assert read["undeclared"] == [] and body["model"] == adapter_name(7)  # vLLM serves each loaded adapter by name
