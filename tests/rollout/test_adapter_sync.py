"""The adapter push (kitae.rollout.sync.AdapterSync) against a real `kitae serve model` on 127.0.0.1: which strategy
a run gets, the bytes it reports, and replicas that lose or refuse the adapter."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import httpx
import pytest
import torch

from kitae.rollout.base import SamplingParams
from kitae.rollout.server import ServerEngine
from kitae.rollout.sync import AdapterSync, DiskSync, adapter_name, build_sync, folder_bytes, full_bytes
from tests.rollout.test_sync import lora
from tests.served import serve_model


@pytest.fixture(scope="module")
def base_folder(tmp_path_factory):
    from tests.plugins.tiny_models import build_tiny_lm

    return build_tiny_lm(tmp_path_factory.mktemp("base"))


@pytest.fixture
def served(base_folder):
    with serve_model(base_folder, name="base", default_max_tokens=4) as url:
        yield url


@pytest.fixture
def policy(base_folder):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoTokenizer.from_pretrained(base_folder), lora(AutoModelForCausalLM.from_pretrained(base_folder))


def sampling_cfg(tmp_path, **kw):
    base = dict(sync_dir=str(tmp_path / "sync"), server_timeout=30.0, api_key_env=None, sync="disk",
                lora_sync="adapter", server_api="openai", max_staleness=0)
    return SimpleNamespace(**{**base, **kw})


def loaded_adapters(url: str) -> list[str]:
    return [m["id"] for m in httpx.get(url + "/v1/models", timeout=30).json()["data"]][1:]


def test_a_lora_model_gets_the_adapter_push_and_a_full_model_the_named_sync(policy, base_folder, tmp_path):
    from transformers import AutoModelForCausalLM

    _, model = policy
    cases = [  # (model, lora_sync, the strategy)
        (model, "adapter", AdapterSync),
        (model, "merged", DiskSync),  # a server without LoRA: the merged weights
        (AutoModelForCausalLM.from_pretrained(base_folder), "adapter", DiskSync),  # full fine-tuning: the named sync
    ]
    for m, mode, cls in cases:
        assert type(build_sync(sampling_cfg(tmp_path, lora_sync=mode), tmp_path, m)) is cls


def test_each_push_moves_the_adapter_folder_and_unloads_the_one_before(policy, served, tmp_path):
    tok, model = policy
    engine = ServerEngine(None, tok, [served], weight_sync=AdapterSync(sampling_cfg(tmp_path), tmp_path))
    for version in (1, 2):
        moved = engine.sync_weights(model, version)
        folder = tmp_path / "sync" / f"adapter-v{version:06d}"
        assert moved == {"sync/bytes": folder_bytes(folder), "sync/full_bytes": full_bytes(model)}
        assert sorted(f.name for f in folder.iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]
        assert moved["sync/bytes"] < moved["sync/full_bytes"] / 10
        assert loaded_adapters(served) == [adapter_name(version)]  # the one before is unloaded
    assert [p.name for p in (tmp_path / "sync").iterdir()] == ["adapter-v000002"]
    assert engine.replicas[0].adapter == adapter_name(2) and engine.replicas[0].synced == 2


def test_a_replica_that_lost_its_adapter_loads_it_again_before_it_samples(policy, served, tmp_path):
    tok, model = policy
    engine = ServerEngine(None, tok, [served], weight_sync=AdapterSync(sampling_cfg(tmp_path), tmp_path),
                          down_secs=0.2, max_wait=60)
    engine.sync_weights(model, 1)
    # the server restarted (here: its adapter unloaded behind the trainer's back): requests naming it get a 404
    assert httpx.post(served + "/v1/unload_lora_adapter", json={"lora_name": adapter_name(1)}).is_success
    groups = engine.generate([[{"role": "user", "content": "hi"}]], 2, SamplingParams(max_new_tokens=2))
    assert len(groups[0]) == 2 and loaded_adapters(served) == [adapter_name(1)]
    assert engine.take_stats()["policy_version"] == 1


def test_a_refused_adapter_marks_the_replica_down_with_the_servers_reason(policy, served, tmp_path):
    tok, model = policy
    engine = ServerEngine(None, tok, [served], weight_sync=AdapterSync(sampling_cfg(tmp_path), tmp_path))
    (tmp_path / "sync").mkdir()
    (tmp_path / "sync" / "adapter-v000001").write_text("a file where the folder goes")  # cannot be loaded
    sync = engine.weight_sync
    sync.latest = (1, tmp_path / "sync" / "adapter-v000001")
    sync._try_reload(engine, engine.replicas[0])
    replica = engine.replicas[0]
    assert replica.synced is None and "no adapter_config.json" in replica.last_error and loaded_adapters(served) == []


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None and torch.cuda.is_available(),
                    reason="vllm and CUDA are here: the vllm sync is allowed anyway")
def test_a_lora_run_against_vllm_needs_no_nccl_in_the_trainer():
    from kitae.errors import ConfigError
    from kitae.trainer.config import load_train_config

    data = {"rewards": [{"name": "c", "grader": {"type": "answer"}}], "model": {"lora": {"r": 4}},
            "sampling": {"engine": "server", "servers": ["http://127.0.0.1:8000"], "sync": "vllm"}}
    assert load_train_config(data=data).sampling.engine.lora_sync == "adapter"  # the adapter goes by HTTP, not NCCL
    data["sampling"]["lora_sync"] = "merged"  # merged weights over vLLM's NCCL broadcast: refused here
    with pytest.raises(ConfigError, match=r"^sampling.sync: 'vllm' broadcasts the weights over NCCL"):
        load_train_config(data=data)


def test_a_server_without_the_adapter_routes_gets_the_fix_named(policy, tmp_path):
    from tests.rollout.scripted import CompletionsServer

    tok, model = policy
    with CompletionsServer() as server:  # no /v1/load_lora_adapter: a 404, as vLLM without runtime LoRA updating
        engine = ServerEngine(None, tok, [server.url], weight_sync=AdapterSync(sampling_cfg(tmp_path), tmp_path))
        engine.sync_weights(model, 1)
    why = engine.replicas[0].last_error
    assert engine.replicas[0].synced is None and "HTTP 404" in why
    assert "--enable-lora" in why and "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True" in why and "lora_sync: merged" in why
