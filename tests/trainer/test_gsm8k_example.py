"""examples/gsm8k.yaml as a user runs it, on stand-ins laid out in a Hub cache under the recipe's own ids (a tiny
model as Qwen/Qwen2.5-0.5B-Instruct, a GSM8K-shaped dataset as openai/gsm8k; HF_HUB_OFFLINE=1): the config reads,
the dataset's columns map to prompts and references, and a training step and an evaluation with its math grader run.
The real model and dataset are not downloaded here; docs/recipes.md has the commands for a GPU machine."""

from __future__ import annotations

from pathlib import Path

from kitae.trainer.config import load_train_config
from kitae.trainer.loop import Trainer
from tests.data.test_sources import _gsm8k_like
from tests.hub_cache import lay_out, offline_hub

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gsm8k.yaml"


def test_the_gsm8k_recipe_reads_as_a_trl_user_expects():
    cfg = load_train_config(EXAMPLE)
    assert cfg.model.path == "Qwen/Qwen2.5-0.5B-Instruct"
    assert cfg.data.train.hub == cfg.data.eval.hub == "openai/gsm8k"
    assert (cfg.data.train.split, cfg.data.eval.split) == ("train", "test")
    assert cfg.sampling.group_size == 8 and cfg.optim.lr == 1e-6 and cfg.algorithm.kl.coef == 0.0
    assert cfg.algorithm.loss.type == "dapo" and cfg.algorithm.loss.eps_high == 0.28  # TRL's loss_type "dapo"
    assert cfg.data.rowmap().apply({"question": "q", "answer": "so\n#### 72"}, "x", 1)["reference_answer"] == "72"


def test_the_gsm8k_recipe_trains_on_hub_stand_ins(tiny_assets, tmp_path, monkeypatch):
    home = tmp_path / "hf"
    offline_hub(monkeypatch, home)
    lay_out(home, "Qwen/Qwen2.5-0.5B-Instruct", tiny_assets / "model")
    lay_out(home, "openai/gsm8k", _gsm8k_like(tmp_path / "gsm8k"), repo_type="dataset")
    small = [f"output_dir={tmp_path}", "model.dtype=float32", "sampling.max_new_tokens=8", "optim.steps=1",
             "optim.prompts_per_step=2", "sampling.group_size=2", "eval.limit=1", "eval.every=1",
             "logging.save_every=1"]
    trainer = Trainer(load_train_config(EXAMPLE, small))
    assert [r["messages"][0]["role"] for r in trainer.eval_rows] == ["system"]
    summary = trainer.train()
    assert summary["status"] == "finished" and summary["steps"] == 1
    assert (tmp_path / "gsm8k" / "checkpoints" / "step-000001" / "model" / "config.json").exists()
