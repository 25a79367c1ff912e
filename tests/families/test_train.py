"""Each family trained as users train it: LoRA on the family's attention layers, gradient checkpointing, two GRPO
steps with an evaluation and a checkpoint that plain transformers reloads, and `kitae chat` on that checkpoint."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM
from typer.testing import CliRunner

from kitae.cli.main import app
from kitae.models import load_tokenizer
from kitae.rollout.base import SamplingParams
from kitae.store import RunStore
from kitae.trainer.config import LoraConfig, ModelConfig, load_train_config
from kitae.trainer.loop import Trainer
from kitae.trainer.setup import load_policy
from tests.plugins.tiny_run import write_config


def test_lora_default_targets_fit_the_family_and_checkpointed_backward_works(family):
    fam, folder = family
    policy = load_policy(ModelConfig(path=str(folder), lora=LoraConfig(r=2, alpha=4), gradient_checkpointing=True),
                         str(folder))
    adapted = {name.split(".lora_A")[0].rsplit(".", 1)[-1] for name, p in policy.named_parameters() if p.requires_grad and "lora_A" in name}
    assert adapted == set(fam.lora_attention)
    assert policy.is_gradient_checkpointing
    policy.train()
    ids = load_tokenizer(folder)("hello world, the answer is 47.", return_tensors="pt")["input_ids"]
    policy(input_ids=ids, labels=ids).loss.backward()
    grads = [p.grad for name, p in policy.named_parameters() if "lora_B" in name]
    assert grads and all(g is not None and torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)


def test_a_lora_target_the_model_lacks_is_an_error_naming_its_layers(family_dirs):
    from kitae.errors import ConfigError

    folder = str(family_dirs["llama3"])
    with pytest.raises(ConfigError, match=r"model\.lora\.target_modules.*'qkv' is not a linear layer.*q_proj"):
        load_policy(ModelConfig(path=folder, lora=LoraConfig(target_modules=["q_proj", "qkv"])), folder)


def test_two_grpo_steps_an_eval_a_checkpoint_transformers_reloads_and_kitae_chat(family, tmp_path):
    fam, folder = family
    train = folder.parent / "train.jsonl"
    cfg = load_train_config(write_config(folder.parent, tmp_path, **{
        "model.path": str(folder), "model.gradient_checkpointing": True,
        "data.train": str(train), "data.eval": str(train),
        "rewards": [{"name": "chars", "function": "tests.reward_functions:chars"},
                    {"name": "template", "grader": {"type": "template", "min_chars": 1}},
                    {"name": "repetition", "grader": {"type": "repetition"}, "weight": 0.5}],
        "sampling.group_size": 2, "sampling.max_new_tokens": 6, "optim.steps": 2, "optim.lr": 1e-2,
        "logging.save_every": 2, "eval.every": 2, "eval.limit": 2, "eval.k": 1,
    }))
    summary = Trainer(cfg).train()
    assert summary["status"] == "finished" and summary["steps"] == 2
    store = RunStore.open(cfg.run_dir)
    metrics = store.summary()["metrics"]
    assert {"reward/template", "reward/repetition"} <= set(metrics), sorted(metrics)
    assert summary["latest_eval"] is not None
    ckpt = cfg.run_dir / "checkpoints" / "step-2" / "model"
    if not ckpt.is_dir():
        [ckpt] = sorted(cfg.run_dir.glob("checkpoints/*/model"))
    reloaded = AutoModelForCausalLM.from_pretrained(ckpt)
    start = AutoModelForCausalLM.from_pretrained(folder)
    assert type(reloaded).__name__ == type(start).__name__
    moved = [n for (n, a), b in zip(reloaded.state_dict().items(), start.state_dict().values()) if not torch.equal(a, b)]
    assert moved  # the checkpoint holds the trained weights, not the starting ones
    assert list(reloaded.generation_config.eos_token_id) == list(start.generation_config.eos_token_id)
    result = CliRunner().invoke(app, ["chat", "hi", "--model", str(ckpt), "--max-new-tokens", "4", "--seed", "0",
                                      "--raw"])
    assert result.exit_code == 0, result.output
    assert "finish_reason=" in result.output


def test_a_run_s_chat_template_kwargs_and_end_marker_reach_its_engines(family_dirs, tmp_path):
    folder = family_dirs["qwen3"]
    train = folder.parent / "train.jsonl"
    cfg = load_train_config(write_config(folder.parent, tmp_path, **{
        "model.path": str(folder), "model.chat_template_kwargs": {"enable_thinking": False},
        "model.end_marker": "</think>", "data.train": str(train), "data.eval": str(train),
        "rewards": [{"name": "template", "grader": {"type": "template"}}],
    }))
    trainer = Trainer(cfg)
    try:
        for engine in (trainer.engine, trainer.engine_sync.eval_engine(trainer.policy, trainer.tokenizer)):
            ids = engine.encode_prompt([{"role": "user", "content": "hi"}])
            assert trainer.tokenizer.decode(ids).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
            assert engine.end_marker.text == "</think>"
            assert "</think>" in engine.ending(SamplingParams()).stop
    finally:
        trainer.store.close() if trainer.store else None
