"""QLoRA: a LoRA adapter trained over a 4-bit base (bitsandbytes on CPU), its reference the same base with the
adapter switched off, and its checkpoint reloaded elsewhere giving the same greedy tokens."""

from __future__ import annotations

import json

import pytest
import torch

from kitae.errors import ConfigError
from kitae.store import RunStore
from kitae.quantization import QuantizationConfig
from kitae.trainer.config import ModelConfig, load_train_config
from kitae.trainer.loop import Trainer
from kitae.trainer.update import BASE_UNDER_ADAPTER
from tests.plugins.tiny_run import write_config

pytest.importorskip("bitsandbytes")
pytestmark = pytest.mark.slow

QLORA = {"model.lora": {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]},
         "model.quantization": {"bits": 4, "type": "nf4"}}


@pytest.fixture(scope="module")
def qlora_assets(tiny_assets, tmp_path_factory):
    """tiny_assets with a model 64 wide: bitsandbytes' CPU 4-bit matmul packs weights in blocks of 64 inputs."""
    import shutil

    from tests.tiny import tiny_llama
    from kitae.models import load_tokenizer

    root = tmp_path_factory.mktemp("qlora")
    shutil.copy(tiny_assets / "train.jsonl", root / "train.jsonl")
    tiny_llama(len(load_tokenizer(str(tiny_assets / "model"))), hidden=64).save_pretrained(root / "model")
    for file in (tiny_assets / "model").iterdir():
        if "token" in file.name or file.name.endswith(".jinja"):
            shutil.copy(file, root / "model" / file.name)
    return root


def _4bit_layers(model) -> list:
    import bitsandbytes as bnb

    return [m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)]


def _4bit_weights_in_process() -> set[int]:
    """The storage of every 4-bit weight this process holds (bitsandbytes' Params4bit)."""
    import gc

    import bitsandbytes as bnb

    gc.collect()
    return {o.data_ptr() for o in gc.get_objects() if isinstance(o, bnb.nn.Params4bit)}


def test_qlora_trains_the_adapter_over_one_4bit_base_and_its_checkpoint_generates_the_same(
        qlora_assets, tmp_path, rewards_on_path):
    cfg = load_train_config(write_config(qlora_assets, tmp_path, **{
        **QLORA, "optim.steps": 2, "data.eval": None, "algorithm.kl": {"coef": 0.1}, "logging.save_every": 2}))
    trainer = Trainer(cfg)
    assert trainer.ref_model is BASE_UNDER_ADAPTER  # no second copy of the base
    layers = _4bit_layers(trainer.policy)
    assert layers  # the base's attention projections are 4-bit
    base_weights = {id(m): m.weight.data.clone() for m in layers}
    assert _4bit_weights_in_process() == {m.weight.data_ptr() for m in layers}  # one copy of the base
    lora_before = {n: p.detach().clone() for n, p in trainer.policy.named_parameters() if p.requires_grad}
    assert lora_before and all("lora_" in n for n in lora_before)
    trainer.train()
    metrics = RunStore.open(tmp_path / "t").metrics()
    assert [s for s, _ in metrics["kl"]] == [1, 2]
    changed = [n for n, p in trainer.policy.named_parameters() if p.requires_grad
               and not torch.equal(p.detach(), lora_before[n])]

    assert changed  # the adapter trained (bitsandbytes' CPU repacking, kitae.quantization, made every gradient 0)
    assert all(torch.equal(m.weight.data, base_weights[id(m)]) for m in layers)  # the 4-bit base did not

    folder = tmp_path / "t" / "checkpoints" / "step-000002" / "model"
    meta = json.loads((folder / "kitae_adapter.json").read_text())
    assert meta["quantization"]["bits"] == 4 and meta["quantization"]["type"] == "nf4"
    assert meta["base"] == str((qlora_assets / "model").resolve())  # a local folder stays a path
    assert json.loads((folder / "adapter_config.json").read_text())["base_model_name_or_path"] == meta["base"]

    from kitae.models import load_causal_lm, load_tokenizer

    tok = load_tokenizer(str(folder))
    prompt = tok("what is 1+2?", return_tensors="pt")
    reloaded = load_causal_lm(str(folder))
    assert _4bit_layers(reloaded)  # the base is quantized as it was trained
    policy = trainer.policy.eval()
    with torch.no_grad():
        kw = dict(max_new_tokens=8, do_sample=False, pad_token_id=tok.pad_token_id)
        want = policy.generate(**prompt, **kw)
        got = reloaded.eval().generate(**prompt, **kw)
    assert got.tolist() == want.tolist()


@pytest.mark.parametrize("quantization", [{"bits": 4, "type": "nf4"}, {"bits": 4, "type": "fp4"}, {"bits": 8}])
def test_qlora_supervised_loss_falls(qlora_assets, quantization):
    """The same machinery (load_policy's 4-bit base, LoRA, AdamW over the trainable parameters) learns: the
    cross-entropy of one sequence falls over 20 steps, after a rollout in eval mode as in a run."""
    from kitae.models import load_tokenizer
    from kitae.trainer.config import LoraConfig
    from kitae.trainer.setup import load_policy

    cfg = ModelConfig(lora=LoraConfig(r=8, alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]),
                      quantization=QuantizationConfig(**quantization))
    torch.manual_seed(0)
    model = load_policy(cfg, str(qlora_assets / "model"))
    tok = load_tokenizer(str(qlora_assets / "model"))
    ids = torch.tensor([tok("what is 3+3? 6", add_special_tokens=False)["input_ids"]])
    with torch.no_grad():  # a rollout first: eval mode without gradients, as the in-process engine samples
        model.eval().generate(input_ids=ids[:, :4], max_new_tokens=2, do_sample=False, pad_token_id=0)
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    losses = []
    for _ in range(20):
        loss = model(input_ids=ids, labels=ids).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.9 * losses[0], losses


@pytest.mark.parametrize("over, message", [
    ({"model.quantization": {"bits": 4}}, "cannot be trained"),  # full fine-tuning of a 4-bit model
    ({**QLORA, "model.quantization": {"bits": 3}}, "model.quantization.bits"),  # bitsandbytes has 4 and 8 only
    ({**QLORA, "model.quantization": {"bits": 4, "type": "int4"}}, "model.quantization.type"),
])
def test_quantization_that_cannot_work_is_refused_with_the_reason(tiny_assets, tmp_path, over, message):
    with pytest.raises(ConfigError, match=message):
        load_train_config(write_config(tiny_assets, tmp_path, **over))


def test_a_device_bitsandbytes_lacks_is_refused_naming_it():
    from kitae.quantization import check_supported

    with pytest.raises(ConfigError, match="bitsandbytes cannot run 4-bit nf4 layers on meta"):
        check_supported(4, "nf4", "meta")


def test_no_hub_kernel_warning_offline(qlora_assets):
    """Offline, bitsandbytes' failed fetch of its optional Hub kernel is not shown (kitae.quantization says why
    it is noise); the 4-bit model loads and runs on bitsandbytes' own CPU code."""
    import os
    import subprocess
    import sys

    code = ("from kitae.models import load_causal_lm; from kitae.quantization import QuantizationConfig; "
            "import torch, peft; "
            f"m = load_causal_lm({str(qlora_assets / 'model')!r}, quantization=QuantizationConfig()); "
            "print(m(torch.tensor([[1, 2, 3]])).logits.isfinite().all().item())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=os.environ | {"HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "True"
    assert "kernels-community" not in out.stderr, out.stderr


def test_preflight_refuses_a_quantization_the_device_lacks_before_reading_data(tiny_assets, tmp_path, monkeypatch):
    """No bitsandbytes here (its import fails): pre-flight says how to install it, before the data is read."""
    import builtins

    from kitae.quantization import _layer_problem
    from kitae.trainer.preflight import preflight

    real_import = builtins.__import__

    def no_bitsandbytes(name, *args, **kw):
        if name == "bitsandbytes":
            raise ImportError("No module named 'bitsandbytes'")
        return real_import(name, *args, **kw)

    _layer_problem.cache_clear()
    monkeypatch.setattr(builtins, "__import__", no_bitsandbytes)
    cfg = load_train_config(write_config(tiny_assets, tmp_path, **{**QLORA, "data.train": str(tmp_path / "none.jsonl")}))
    try:
        with pytest.raises(ConfigError, match=r"pip install 'kitae\[quant\]'"):
            preflight(cfg)
    finally:
        _layer_problem.cache_clear()


def test_a_qlora_run_resumes_from_its_adapter_checkpoint(qlora_assets, tmp_path, rewards_on_path):
    over = {**QLORA, "optim.steps": 1, "data.eval": None, "logging.save_every": 1}
    Trainer(load_train_config(write_config(qlora_assets, tmp_path, **over))).train()
    saved = tmp_path / "t" / "checkpoints" / "step-000001" / "model" / "adapter_model.safetensors"
    from safetensors.torch import load_file

    adapter = load_file(saved)
    resumed = Trainer(load_train_config(write_config(qlora_assets, tmp_path, **{**over, "optim.steps": 2})),
                      resume=True)
    assert resumed.start_step == 1 and _4bit_layers(resumed.policy)
    state = {k: v for k, v in resumed.policy.state_dict().items() if "lora_" in k}
    assert {k.replace(".default", ""): v for k, v in state.items()}.keys() == adapter.keys()
    assert all(torch.equal(state[k], adapter[k.replace(".default", "")]) for k in state if "lora_" in k)
    assert resumed.train()["steps"] == 2


def test_a_server_engine_that_takes_full_weights_is_refused_for_a_quantized_base(tiny_assets, tmp_path):
    """A merged push would send packed 4-bit tensors the server cannot load; an adapter push sends the adapter."""
    from kitae.models import load_tokenizer
    from kitae.trainer.setup import make_engine

    url = "http://127.0.0.1:9"
    settings = {**QLORA, "sampling.engine": "server", "sampling.servers": [url]}
    merged = load_train_config(write_config(tiny_assets, tmp_path, **settings, **{"sampling.lora_sync": "merged"}))
    with pytest.raises(ConfigError, match="sampling.lora_sync"):
        make_engine(merged, None, load_tokenizer(str(tiny_assets / "model")), None, {url: "tiny"})
    adapter = load_train_config(write_config(tiny_assets, tmp_path / "adapter", **settings))
    assert adapter.sampling.engine.lora_sync == "adapter"
    assert make_engine(adapter, None, load_tokenizer(str(tiny_assets / "model")), None, {url: "tiny"}) is not None
