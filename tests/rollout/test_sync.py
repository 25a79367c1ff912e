"""Weight sync: the folder the disk sync writes (full and LoRA-merged weights), the reload calls, replicas that
miss a push, and the vLLM sync's refusal where vllm or CUDA is missing."""

from __future__ import annotations

import copy
import importlib.util
from types import SimpleNamespace

import pytest
import torch

from kitae.errors import ConfigError
from kitae.models import load_causal_lm
from kitae.rollout.base import SamplingParams
from kitae.rollout.server import ServerEngine
from kitae.rollout.sync import DiskSync, policy_tensors, write_weights
from kitae.serving.weights import apply_reload, plan_reload
from tests.rollout.scripted import CompletionsServer, choice, reply
from tests.tiny import tiny_llama, tiny_tokenizer


@pytest.fixture
def tiny():
    tok = tiny_tokenizer()
    return tok, tiny_llama(len(tok))


def lora(model):
    import peft

    m = peft.get_peft_model(copy.deepcopy(model), peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                                  task_type="CAUSAL_LM"))
    with torch.no_grad():  # a trained-looking adapter (B starts at 0, which would merge to nothing)
        for name, p in m.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    return m


def test_full_weights_folder_loads_back_equal(tiny, tmp_path):
    _, model = tiny
    folder = write_weights(model, tmp_path / "v000001")
    back = load_causal_lm(folder)
    for (name, a), b in zip(model.state_dict().items(), back.state_dict().values()):
        assert torch.equal(a, b), name
    assert not (tmp_path / ".v000001.tmp").exists()


def test_lora_pushes_merged_weights_and_leaves_the_adapter_alone(tiny, tmp_path):
    _, model = tiny
    m = lora(model)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    want = copy.deepcopy(m).merge_and_unload().state_dict()
    got = dict(policy_tensors(m))
    assert set(got) == set(want)  # the base model's names: no lora_ or base_layer keys
    for name in want:
        assert torch.allclose(got[name], want[name], atol=1e-6), name
    assert any(not torch.equal(got[k], model.state_dict()[k]) for k in got)  # the adapter did change something
    assert all(torch.equal(v, m.state_dict()[k]) for k, v in before.items())  # the training model is untouched
    folder = write_weights(m, tmp_path / "v000002")
    served = copy.deepcopy(model)
    apply_reload(served, plan_reload(served, str(folder)))  # kitae serve model takes the folder as is
    for name, t in served.state_dict().items():
        assert torch.allclose(t, want[name], atol=1e-6), name


def sampling_cfg(tmp_path, **kw):
    base = dict(sync_dir=str(tmp_path / "sync"), server_timeout=30.0, api_key_env=None, sync="disk")
    return SimpleNamespace(**{**base, **kw})


def test_disk_sync_writes_reloads_and_keeps_only_the_newest(tiny, tmp_path):
    tok, model = tiny
    with CompletionsServer() as a, CompletionsServer() as b:
        sync = DiskSync(sampling_cfg(tmp_path), tmp_path)
        engine = ServerEngine(None, tok, [a.url, b.url], weight_sync=sync)
        engine.sync_weights(model, 3)
        engine.sync_weights(model, 4)
    newest = (tmp_path / "sync" / "v000004").resolve()
    assert a.reloads == b.reloads == [str((tmp_path / "sync" / "v000003").resolve()), str(newest)]
    assert [p.name for p in (tmp_path / "sync").iterdir()] == ["v000004"]
    assert [(r.synced, r.server_version) for r in engine.replicas] == [(4, 2), (4, 2)]


def test_a_replica_down_during_the_push_loads_the_weights_before_it_samples(tiny, tmp_path):
    tok, model = tiny
    answer = lambda body: reply([choice([5], [-1.0], "stop", i) for i in range(body["n"])], weight_version=None)
    with CompletionsServer(default=answer) as a:
        engine = ServerEngine(None, tok, [a.url], weight_sync=DiskSync(sampling_cfg(tmp_path), tmp_path),
                              down_secs=0.3)
        engine.mark_down(engine.replicas[0], "scripted outage")
        engine.sync_weights(model, 1)  # a is skipped: it is down
        assert a.reloads == [] and engine.replicas[0].synced is None
        engine.generate([[{"role": "user", "content": "hi"}]], 2, SamplingParams(max_new_tokens=2))
        assert len(a.reloads) == 1 and engine.replicas[0].synced == 1
        assert engine.take_stats()["policy_version"] == 1


def test_a_failed_reload_marks_the_replica_down(tiny, tmp_path):
    tok, model = tiny
    with CompletionsServer() as a:
        a.handle_post = lambda path, body: {"success": False, "message": "shapes differ"}
        engine = ServerEngine(None, tok, [a.url], weight_sync=DiskSync(sampling_cfg(tmp_path), tmp_path))
        engine.sync_weights(model, 1)
    assert engine.replicas[0].synced is None and "shapes differ" in engine.replicas[0].last_error


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None and torch.cuda.is_available(),
                    reason="vllm and CUDA are here: the vllm sync is allowed")
def test_vllm_sync_without_vllm_or_cuda_is_a_config_error():
    from kitae.trainer.config import load_train_config

    data = {"rewards": [{"name": "c", "grader": {"type": "answer"}}],
            "sampling": {"engine": "server", "servers": ["http://127.0.0.1:8000"], "sync": "vllm"}}
    with pytest.raises(ConfigError, match=r"^sampling.sync: 'vllm' broadcasts the weights over NCCL.*sync: disk"):
        load_train_config(data=data)
