"""`kitae plan` (kitae.trainer.memory_plan): hand-computed rows, the 13B recipe from a Hub cache offline, exit
statuses, and the plan against peaks measured on CPU at three model sizes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kitae.errors import ConfigError
from kitae.trainer.memory_plan import (
    GIB, LOGPROB_CHUNK, ModelShape, Quantization, load_setup, make_plan, parse_gpus, parse_size,
)
from tests.hub_cache import lay_out

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "examples" / "zero_13b_one_gpu.yaml"
LLAMA2_13B = "meta-llama/Llama-2-13b-hf"
# meta-llama/Llama-2-13b-hf's config.json, as on the Hub
LLAMA2_13B_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
    "hidden_size": 5120, "initializer_range": 0.02, "intermediate_size": 13824, "max_position_embeddings": 4096,
    "model_type": "llama", "num_attention_heads": 40, "num_hidden_layers": 40, "num_key_value_heads": 40,
    "pad_token_id": 0, "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": None,
    "tie_word_embeddings": False, "torch_dtype": "float16", "transformers_version": "4.32.0.dev0",
    "use_cache": True, "vocab_size": 32000,
}


def kitae(*args, env=None):
    return subprocess.run([sys.executable, "-m", "kitae.cli.main", *map(str, args)], capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, timeout=300)


@pytest.fixture
def hub13b(tmp_path):
    """A Hub cache holding Llama 2 13B's config.json only (no weights), for HF_HUB_OFFLINE=1."""
    source = tmp_path / "src"
    source.mkdir()
    (source / "config.json").write_text(json.dumps(LLAMA2_13B_CONFIG))
    lay_out(tmp_path / "hf", LLAMA2_13B, source)
    return {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_CACHE": str(tmp_path / "hf" / "hub"), "HF_HUB_OFFLINE": "1"}


def test_13b_parameter_count_from_config_json():
    shape = ModelShape.from_config(LLAMA2_13B_CONFIG)
    assert 13.0e9 < shape.params < 13.05e9  # Llama 2 13B: 13,015,864,320 parameters
    # rank 16 on the 7 linear kinds: 16 x (in + out) per layer: q,k,v,o 4 x 10240, gate/up 2 x 18944, down 18944
    assert shape.lora_params(16, ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]) == \
        40 * 16 * (4 * 10240 + 3 * 18944)


def test_quantized_weights_per_param():
    assert Quantization(bits=4, double_quant=False).bytes_per_weight() == 0.5 + 4 / 64
    assert 0.5 < Quantization(bits=4, double_quant=True).bytes_per_weight() < 0.52
    assert Quantization(bits=8).bytes_per_weight() == 1.0
    with pytest.raises(ConfigError, match="bits"):
        Quantization.read({"bits": 3})


def test_recipe_fits_32gb_from_a_hub_cache_offline(hub13b):
    out = kitae("plan", RECIPE, "--gpu", "32GB", env=hub13b)
    assert out.returncode == 0, out.stderr
    assert "fits" in out.stdout and "13.02B params" in out.stdout
    assert "the base with the adapter disabled" in out.stdout  # LoRA: no reference copy
    assert "kitae serve rm" in out.stdout  # the reward model is on the other GPU, said so


def test_full_bf16_13b_does_not_fit_and_the_fix_is_named(hub13b):
    out = kitae("plan", RECIPE, "--gpu", "32GB", "--set", "model.quantization=null", "--set", "model.lora=null",
                env=hub13b)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "DOES NOT FIT" in out.stdout and "it fits with: --set 'model.lora=" in out.stdout


@pytest.mark.parametrize("args, message", [
    (["--gpu", "lots"], "expected a size"),                       # not a size
    (["--gpu", "32GB", "--gpus", "2x80GB"], "not both"),          # two answers to one question
    (["--set", "model.quantization={bits: 3}"], "expected one of 4, 8"),  # a quantization bitsandbytes lacks
    (["--set", "optim.micro_batch_size=0"], "micro_batch_size"),  # a bad config value
])
def test_bad_input_exits_2_with_the_reason(hub13b, args, message):
    out = kitae("plan", RECIPE, *args, env=hub13b)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


def test_sizes():
    assert parse_size("32GB") == 32 * GIB and parse_size("512MiB") == 0.5 * GIB
    assert parse_gpus("2x80GB") == [80 * GIB] * 2 and parse_gpus("32GB,16GB") == [32 * GIB, 16 * GIB]


def setup_of(tmp_path, hub13b, monkeypatch, *overrides):
    for k, v in hub13b.items():
        monkeypatch.setenv(k, v)
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", hub13b["HF_HUB_CACHE"])
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return load_setup(RECIPE, list(overrides))


def rows(setup):
    return {r.what: r.bytes for d in make_plan(setup).devices for r in d.rows}


def test_each_setting_moves_its_own_row(tmp_path, hub13b, monkeypatch):
    base = rows(setup_of(tmp_path, hub13b, monkeypatch))
    no_ckpt = rows(setup_of(tmp_path, hub13b, monkeypatch, "model.gradient_checkpointing=false"))
    chunked = rows(setup_of(tmp_path, hub13b, monkeypatch, "optim.logprob_chunk_size=64"))
    eight_bit = rows(setup_of(tmp_path, hub13b, monkeypatch, "model.quantization.bits=8"))
    full_kl = rows(setup_of(tmp_path, hub13b, monkeypatch, "model.lora=null", "model.quantization=null"))
    # 40 layers' activations against 40 layer inputs and one layer's: (7h + 2i) x 40 over (h x 40 + 7h + 2i)
    assert no_ckpt["activations"] / base["activations"] == pytest.approx(40 * 63488 / (40 * 5120 + 63488))
    assert chunked["log-prob logits"] == base["log-prob logits"] * 64 / LOGPROB_CHUNK  # 64 positions of the default
    quantized = ModelShape.from_config(LLAMA2_13B_CONFIG).quantizable  # the linear layers: 1 byte against 0.516
    assert eight_bit["weights"] - base["weights"] == pytest.approx(quantized * (1 - Quantization().bytes_per_weight()))
    assert full_kl["reference model"] == full_kl["weights"] and base["reference model"] == 0


def test_server_engine_plans_a_second_device(tmp_path, hub13b, monkeypatch):
    s = setup_of(tmp_path, hub13b, monkeypatch, "sampling.engine=server", "sampling.servers=[http://127.0.0.1:8000]")
    plan = make_plan(s, parse_gpus("2x80GB"))
    assert [d.name for d in plan.devices] == ["trainer", "rollout server"] and plan.notes[0].startswith("reward")
    assert not any(r.what.startswith("KV") for r in plan.devices[0].rows)  # the trainer samples nothing
    assert plan.fits()


# ---- the plan against peaks measured on CPU ----------------------------------------------------------------
# Three Qwen2-shaped random models with the bundled tokenizer: (hidden, layers, heads) -> about 0.16M, 2M, 14M
# parameters. One GRPO step each in a fresh process (tests/trainer/memory_probe.py): peak RSS above the
# post-import baseline.
SIZES = {"0.16M": (64, 2, 4), "2M": (192, 4, 4), "14M": (384, 8, 6)}
# Where the model dominates the fixed overhead (CPU_OVERHEAD), the plan is within 15% of the peak; at 0.16M
# parameters the peak is mostly that overhead (about 200 MB against 40 MB of tensors), so only "under" is asserted.
WITHIN_15 = {"2M", "14M"}


def tiny_run(root: Path, name: str, hidden: int, layers: int, heads: int) -> Path:
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from kitae.models import BUNDLED_MODEL

    folder = root / name
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=1024, hidden_size=hidden, intermediate_size=3 * hidden, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=2, max_position_embeddings=256,
                         tie_word_embeddings=True)
    Qwen2ForCausalLM(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(BUNDLED_MODEL).save_pretrained(folder)
    cfg = {"name": name, "output_dir": str(root / "runs"), "threads": 1, "model": {"path": str(folder)},
           "data": {"train": "bundled:arith/train", "eval": None},
           "rewards": [{"name": "correct", "grader": {"type": "answer"}}],
           "sampling": {"group_size": 4, "max_new_tokens": 48},
           "optim": {"steps": 1, "prompts_per_step": 8, "micro_batch_size": 32, "skip_zero_advantage": False},
           "logging": {"save_every": 0}, "eval": {"every": 0}, "alarms": {"enabled": False}}
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def longest_prompt(model: Path) -> int:
    """Tokens of the longest bundled arithmetic prompt under the model's chat template (the plan's prompt length)."""
    from transformers import AutoTokenizer

    from kitae.chat import format_prompt
    from kitae.models import BUNDLED_DATA

    tok = AutoTokenizer.from_pretrained(model)
    rows = [json.loads(line) for line in (BUNDLED_DATA / "train.jsonl").read_text(encoding="utf-8").splitlines()]
    return max(len(tok(format_prompt(tok, r["messages"]), add_special_tokens=False)["input_ids"]) for r in rows)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SIZES))
@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="resets Linux's peak-RSS counter")
def test_plan_covers_the_measured_peak_on_cpu(tmp_path, name):
    config = tiny_run(tmp_path, name, *SIZES[name])
    out = tmp_path / "peak.json"
    run = subprocess.run([sys.executable, "-m", "tests.trainer.memory_probe", str(config), str(out)],
                         capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    measured = json.loads(out.read_text())["measured"]
    planned = make_plan(load_setup(config, cuda=False, prompt_tokens=longest_prompt(tmp_path / name))).devices[0].peak
    print(f"{name}: measured {measured / 2**20:.0f} MiB, planned {planned / 2**20:.0f} MiB "
          f"({planned / measured - 1:+.1%})")
    assert measured <= planned
    if name in WITHIN_15:
        assert planned <= 1.15 * measured


def test_kitae_train_prints_the_plan_only_when_asked_on_cpu(tmp_path, capsys):
    """`kitae train --plan` prints the table before the model loads; on CPU without it, nothing (zero.yaml's
    output unchanged). Pre-flight as `kitae train` runs it, on the bundled model."""
    from kitae.cli.train import show_memory_plan
    from kitae.trainer.config import load_train_config
    from kitae.trainer.preflight import preflight

    cfg = load_train_config(ROOT / "examples" / "zero.yaml", [f"output_dir={tmp_path}"])
    checked = preflight(cfg)
    try:
        show_memory_plan(cfg, checked)
        assert capsys.readouterr().out == ""
        show_memory_plan(cfg, checked, full=True)
        out = capsys.readouterr().out
    finally:
        checked.close()
    assert out.startswith("memory plan: trainer: peak") and "activations [update]" in out


def test_the_plans_chunk_is_the_trainers_default():
    from kitae.trainer.logprobs import DEFAULT_CHUNK_SIZE

    assert LOGPROB_CHUNK == DEFAULT_CHUNK_SIZE
