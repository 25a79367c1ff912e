"""The GPU path's settings, checked on CPU: ``model.dtype`` with ``model.master_weights`` (float32 weights and
bf16 autocast, or the weights themselves in bf16), ``model.attn_implementation`` reaching the model's config, and
the reference model held and run as the policy is. CUDA itself is not exercised here (no GPU in the default
test run); bf16 autocast on CPU runs the same accelerate code path."""

from __future__ import annotations

import pytest
import torch

from kitae.errors import ConfigError
from kitae.trainer.batch import micro_batch_rows, token_logps
from kitae.trainer.config import ModelConfig, load_train_config
from kitae.trainer.loop import Trainer
from kitae.trainer.setup import Precision, attention, load_policy, precision
from tests.plugins.tiny_run import write_config


@pytest.mark.parametrize("dtype, master, cuda, expected", [
    ("float32", "auto", True, Precision("float32", "no")),  # fp32: nothing to mix
    ("bfloat16", "auto", True, Precision("float32", "bf16")),  # CUDA: fp32 master weights, bf16 autocast
    ("float16", "auto", True, Precision("float32", "fp16")),  # ... fp16 autocast with accelerate's loss scaler
    ("bfloat16", "auto", False, Precision("bfloat16", "no")),  # CPU: today's behaviour, the weights in bf16
    ("bfloat16", "float32", False, Precision("float32", "bf16")),  # asked for on CPU: CPU autocast
    ("bfloat16", "dtype", True, Precision("bfloat16", "no")),  # pure bf16 on CUDA: half the memory
    ("float32", "dtype", True, Precision("float32", "no")),
])
def test_precision_of_dtype_and_master_weights(dtype, master, cuda, expected):
    assert precision(ModelConfig(dtype=dtype, master_weights=master), cuda) == expected


@pytest.mark.parametrize("name, dtype, cuda, expected", [
    ("auto", "bfloat16", False, None),  # CPU: transformers' default for the model
    ("auto", "float32", True, None),  # flash attention has no fp32 kernels
    ("sdpa", "float32", False, "sdpa"),
    ("eager", "bfloat16", True, "eager"),
])
def test_attention_implementation(name, dtype, cuda, expected):
    assert attention(ModelConfig(dtype=dtype, attn_implementation=name), cuda) == expected


@pytest.mark.parametrize("dtype, cuda, why", [
    ("bfloat16", False, "needs a CUDA device"),
    ("float32", True, "needs model.dtype bfloat16 or float16"),
])
def test_flash_attention_where_it_cannot_run_is_a_config_error(dtype, cuda, why):
    with pytest.raises(ConfigError, match=f"model.attn_implementation.*{why}"):
        attention(ModelConfig(dtype=dtype, attn_implementation="flash_attention_2"), cuda)


@pytest.mark.parametrize("name", ["eager", "sdpa"])
def test_the_attention_setting_reaches_the_models_config(tiny_assets, name):
    model = load_policy(ModelConfig(attn_implementation=name), str(tiny_assets / "model"))
    assert model.config._attn_implementation == name


@pytest.fixture
def fresh_accelerate_state():
    """accelerate keeps one process-wide state whose mixed precision cannot change once set: start and end
    clean so the other tests' Trainers (mixed precision "no") are not refused."""
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


def _trainer(tiny_assets, tmp_path, **model):
    over = {"data.eval": None, "rewards": [{"name": "correct", "grader": {"type": "answer"}}],
            "algorithm.kl.coef": 0.1, **{f"model.{k}": v for k, v in model.items()}}
    return Trainer(load_train_config(write_config(tiny_assets, tmp_path, **over)))


def test_bf16_with_fp32_master_weights_trains_under_autocast(tiny_assets, tmp_path, fresh_accelerate_state):
    t = _trainer(tiny_assets, tmp_path, dtype="bfloat16", master_weights="float32")
    assert t.acc.mixed_precision == "bf16"
    assert {p.dtype for p in t.policy.parameters()} == {torch.float32}  # the master weights
    assert {p.dtype for p in t.ref_model.parameters()} == {torch.float32}  # held as the policy is
    before = [p.detach().clone() for p in t.policy.parameters()]
    batch = t.update.batch_before_advantages([c for g in t.rollouts.sample_grade_and_tell_sampler(1).groups for c in g])
    # the reference is the starting policy under the same autocast: the same log-probs, bit for bit, over the
    # same micro-batches
    own = torch.zeros_like(batch.old_logp)  # [B, L-1]
    with torch.no_grad():
        for rows in micro_batch_rows(batch, t.cfg.optim.micro_batch_size):
            mb = batch.select(torch.tensor(rows)).trimmed()
            logp = token_logps(t.model, mb, t.cfg.sampling.temperature)[0]
            own[rows, : logp.shape[1]] = logp
    batch.ref_logp = t.update.reference_logps(batch)
    assert torch.equal(batch.ref_logp * batch.mask, own * batch.mask)
    # the policy's forward computes in bf16 (autocast), its outputs come back in fp32
    seen = []
    hook = t.policy.lm_head.register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
    try:
        mb = batch.select(torch.tensor([0])).trimmed()
        with torch.no_grad():
            assert t.model(input_ids=mb.input_ids, attention_mask=mb.attention_mask).logits.dtype == torch.float32
    finally:
        hook.remove()
    assert seen == [torch.bfloat16]
    batch.advantages = torch.linspace(-1, 1, len(batch))
    out = t.update.optimize(batch, t.loss_config())
    assert out["skipped_steps"] == 0 and torch.isfinite(torch.tensor(out["loss"]))
    assert {p.dtype for p in t.policy.parameters()} == {torch.float32}
    assert any(not torch.equal(a, b) for a, b in zip(before, t.policy.parameters()))  # it trained


def test_bf16_on_cpu_by_default_keeps_the_weights_in_bf16(tiny_assets, tmp_path):
    t = _trainer(tiny_assets, tmp_path, dtype="bfloat16")
    assert t.acc.mixed_precision == "no"
    assert {p.dtype for p in t.policy.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in t.ref_model.parameters()} == {torch.bfloat16}
    assert t.engine.device == next(t.policy.parameters()).device  # the engine samples with the policy itself


@pytest.mark.parametrize("kind, fsdp2, sync, why", [
    ("NO", False, "none", None),
    ("MULTI_GPU", False, "none", None),  # DDP: one full copy per process
    ("MULTI_CPU", False, "disk", None),
    ("FSDP", True, "none", None),  # FSDP2: kitae.trainer.sharded (tests/trainer/test_fsdp.py runs it)
    ("FSDP", False, "none", "FSDP1 .fsdp_version: 1. is not supported.*set fsdp_version: 2"),
    ("FSDP", True, "disk", None),  # the push gathers the full weights first (tests/trainer/test_fsdp.py)
    ("DEEPSPEED", False, "none", "DEEPSPEED is not supported.*steps its optimizer inside each backward"),
])
def test_launchers_the_loop_cannot_run_are_refused_with_the_reason(kind, fsdp2, sync, why):
    # accelerate gives DeepSpeed only with a GPU and FSDP on CPU only through kitae.trainer.sharded.enable_on_cpu,
    # so the accelerator's distributed_type is given here as accelerate names it
    from types import SimpleNamespace

    from accelerate.utils import DistributedType

    from kitae.trainer.setup import check_distributed

    acc = SimpleNamespace(distributed_type=DistributedType[kind], is_fsdp2=fsdp2)
    cfg = SimpleNamespace(sampling=SimpleNamespace(engine="server", sync=sync))
    if why is None:
        check_distributed(acc, cfg)
        return
    with pytest.raises(ConfigError, match=why):
        check_distributed(acc, cfg)
