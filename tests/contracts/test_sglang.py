"""kitae against SGLang 0.5 as released: the /generate body, the /update_weights_from_disk body and the fields of
its reply, checked against the installed package's own class definitions and routes. They are read as source
(with ast): SGLang's modules import its GPU stack (triton, torchvision, vllm's kernels), which the contract
environment does not install."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest

from kitae.rollout.base import SamplingParams
from kitae.rollout.server import SERVER_APIS, Replica
from kitae.rollout.sync import ADAPTER_ROUTES, AdapterSync, DiskSync, adapter_name
from tests.rollout.scripted import CompletionsServer


def fields(source: Path, cls: str) -> set[str]:
    """The annotated fields of class ``cls`` in ``source``."""
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return {n.target.id for n in node.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    raise AssertionError(f"no class {cls} in {source}")


def routes(source: Path) -> dict[str, set[str]]:
    """path -> methods of the ``@app.post/get/api_route`` decorators in ``source``."""
    out: dict[str, set[str]] = {}
    for node in ast.walk(ast.parse(source.read_text())):
        for d in getattr(node, "decorator_list", []):
            if isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute) and d.args and \
                    isinstance(d.args[0], ast.Constant):
                kw = {k.arg: k.value for k in d.keywords}
                methods = {e.value for e in kw["methods"].elts} if "methods" in kw else {d.func.attr.upper()}
                out.setdefault(d.args[0].value, set()).update(methods)
    return out


@pytest.mark.parametrize("sp", [SamplingParams(), SamplingParams(temperature=0.6, top_k=5, seed=11, stop=["x"])])
def test_generate_body_is_what_sglang_reads(sglang_source, sp):
    body = SERVER_APIS.get("sglang").build([1, 2], 3, sp, "policy")
    assert set(body) <= fields(sglang_source / "srt/managers/io_struct.py", "GenerateReqInput")
    params = fields(sglang_source / "srt/sampling/sampling_params.py", "SamplingParams")
    assert "sampling_seed" in params  # SGLang's per-request seed (its OpenAI routes map "seed" to it)
    for one in body["sampling_params"]:
        assert set(one) <= params and one["n"] == 1
    seeds = [one.get("sampling_seed") for one in body["sampling_params"]]
    assert seeds == ([None] * 3 if sp.seed is None else [sp.seed, sp.seed + 1, sp.seed + 2])
    assert body["input_ids"] == [[1, 2]] * 3
    assert "POST" in routes(sglang_source / "srt/entrypoints/http_server.py")["/generate"]


def test_disk_reload_body_and_reply_are_sglangs(sglang_source, tmp_path):
    io = sglang_source / "srt/managers/io_struct.py"
    with CompletionsServer() as server:
        sync = DiskSync(SimpleNamespace(sync_dir=str(tmp_path), server_timeout=10.0, api_key_env=None), tmp_path)
        sync.latest = (3, tmp_path)
        loaded = []
        sync.reload(SimpleNamespace(mark_loaded=lambda r, v, s: loaded.append(v)), Replica(server.url, 0))
        body = server.requests[-1]["body"]
    assert loaded == [3] and set(body) <= fields(io, "UpdateWeightFromDiskReqInput")
    reply = fields(io, "UpdateWeightFromDiskReqOutput")
    assert {"success", "message"} <= reply and "weight_version" not in reply  # kitae reads no version from SGLang
    assert "POST" in routes(sglang_source / "srt/entrypoints/http_server.py")["/update_weights_from_disk"]


def test_the_adapter_push_speaks_sglangs_lora_routes(sglang_source, tmp_path):
    io = sglang_source / "srt/managers/io_struct.py"
    sampling = SimpleNamespace(sync_dir=str(tmp_path), server_api="sglang", server_timeout=10.0, api_key_env=None,
                               max_staleness=0)
    with CompletionsServer() as server:  # answers SGLang's LoRAUpdateOutput
        sync, replica, loaded = AdapterSync(sampling, tmp_path), Replica(server.url, 0), []
        for version in (1, 2):
            sync.latest = (version, tmp_path / f"adapter-v{version:06d}")
            sync.reload(SimpleNamespace(mark_loaded=lambda r, v, s: loaded.append(v)), replica)
        sent = [(r["path"], r["body"]) for r in server.requests]
    load, unload = ADAPTER_ROUTES["sglang"]
    assert [path for path, _ in sent] == [load, load, unload]  # the second push unloads the first adapter
    assert sent[1][1] == {"lora_name": adapter_name(2), "lora_path": str(tmp_path / "adapter-v000002")}
    assert set(sent[1][1]) <= fields(io, "LoadLoRAAdapterReqInput") and {"lora_name", "lora_path"} <= \
        fields(io, "LoadLoRAAdapterReqInput")
    assert sent[2][1] == {"lora_name": adapter_name(1)} and set(sent[2][1]) <= fields(io, "UnloadLoRAAdapterReqInput")
    assert loaded == [1, 2] and replica.adapter == adapter_name(2)
    assert {"success", "error_message"} <= fields(io, "LoRAUpdateOutput")  # kitae reads success, error_message
    registered = routes(sglang_source / "srt/entrypoints/http_server.py")
    assert "POST" in registered[load] and "POST" in registered[unload]


def test_a_generate_request_names_the_adapter_by_lora_path(sglang_source):
    body = SERVER_APIS.get("sglang").build([1, 2], 3, SamplingParams(), "policy", adapter_name(4))
    assert body["lora_path"] == adapter_name(4)  # SGLang copies one name to every request of the batch
    assert set(body) <= fields(sglang_source / "srt/managers/io_struct.py", "GenerateReqInput")
