"""GRPO on image prompts end to end with the bundled kitae-tiny-vl (LoRA on the language part): the run stores
its images, the checkpoint reloads as a vision-language model; pre-flight refuses what cannot run."""

from __future__ import annotations

import json
import os

import pytest
import yaml

from kitae.errors import ConfigError, DataError
from kitae.store import RunStore
from kitae.trainer.config import load_train_config, resolve_data_path
from kitae.trainer.preflight import preflight

SMALL = 6  # rows of the bundled vision task in these runs


def small_set(tmp_path) -> str:
    """The first rows of the bundled test split, their image paths made absolute (another folder)."""
    src = resolve_data_path("bundled:vision/test")
    rows = [json.loads(line) for line in open(src, encoding="utf-8")][:SMALL]
    for r in rows:
        part = r["messages"][0]["content"][0]
        part["image"] = os.path.join(os.path.dirname(src), part["image"])
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def config(tmp_path, **over) -> str:
    data = small_set(tmp_path)
    cfg = {"name": "vl", "output_dir": str(tmp_path / "runs"), "seed": 0, "threads": 1,
           "model": {"path": "kitae-tiny-vl", "lora": {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}},
           "data": {"train": data, "eval": data},
           "rewards": [{"name": "correct", "grader": {"type": "answer"}}],
           "sampling": {"group_size": 3, "max_new_tokens": 6},
           "optim": {"steps": 2, "prompts_per_step": 2, "micro_batch_size": 4, "lr": 1e-3},
           "logging": {"save_every": 2}, "eval": {"every": 2, "k": 1, "limit": 2, "grader": {"type": "answer"}}}
    cfg.update(over)
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


@pytest.mark.slow  # trains (2 steps, about a second): in the default run, out of -m "not slow"
def test_grpo_on_image_prompts_stores_images_and_saves_a_vision_checkpoint(tmp_path):
    from kitae.trainer.loop import Trainer

    cfg = load_train_config(config(tmp_path))
    trainer = Trainer(cfg)
    trainer.train()
    run = tmp_path / "runs" / "vl"
    with RunStore.open(run, read_only=True) as store:
        groups = store.groups(limit=10)
        assert len(groups) == 4 and store.summary()["steps"] == 2
        for g in groups:
            (name,) = g.item["images"]
            assert (run / "images" / name).is_file()
            assert g.messages[0]["content"][0] == {"type": "image", "image": name}
            assert g.prompt.startswith(f"[image {name[:12]}]")
        metrics = store.metrics(["loss", "grad_norm", "ratio_mean"])
        assert all(v is not None for _, v in metrics["grad_norm"])
        # the update's first pass recomputes the sampler's log-probs (images included): the ratio is 1
        assert abs(metrics["ratio_mean"][0][1] - 1) < 1e-4
    ckpt = next((run / "checkpoints").glob("step-*")) / "model"
    assert (ckpt / "adapter_config.json").is_file() and (ckpt / "processor_config.json").is_file()
    from transformers import AutoProcessor

    assert AutoProcessor.from_pretrained(ckpt).image_processor.size["height"] == 48


def test_image_rows_on_a_text_model_are_refused_naming_the_row(tmp_path):
    cfg = load_train_config(config(tmp_path, model={"path": "bundled"}))
    with pytest.raises(DataError, match="text model") as err:
        preflight(cfg)
    assert err.value.row == 1 and err.value.field == "messages"


@pytest.mark.parametrize("key, value", [
    ("sampling", {"engine": "server", "servers": ["http://127.0.0.1:9/v1"], "group_size": 2}),
    ("sampling", {"partial": {"segment_tokens": 4}, "group_size": 2}),
])
def test_what_image_prompts_cannot_run_on_is_refused_before_the_model_loads(tmp_path, key, value):
    cfg = load_train_config(config(tmp_path, **{key: value}))
    with pytest.raises(ConfigError, match="vision-language|partial rollouts"):
        preflight(cfg)


def _image_token_loving_model(tmp_path) -> str:
    """kitae-tiny-vl with its image placeholder token made the likeliest next token after a prompt."""
    import torch

    from kitae.models import load_causal_lm, load_processor, resolve_model_path
    from kitae.rollout.vision import VisionEngine

    src = resolve_model_path("kitae-tiny-vl")
    model, processor = load_causal_lm(src), load_processor(src)
    rows = [json.loads(line) for line in open(small_set(tmp_path), encoding="utf-8")]
    ids, images = VisionEngine(model, processor.tokenizer, processor).encode(rows[0]["messages"])
    with torch.no_grad():
        hidden = model(input_ids=torch.tensor([ids]), output_hidden_states=True, **images).hidden_states[-1][0]
        d = hidden.mean(0)
        model.lm_head.weight[model.config.image_token_id] = d / d.norm() ** 2 * 30
    out = tmp_path / "image-token-model"
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return str(out)


@pytest.mark.slow  # trains 2 steps
def test_the_image_placeholder_token_is_never_sampled_so_a_run_never_crashes_on_it(tmp_path):
    """A sampled image placeholder (<image>) made the update's forward fail (image tokens and image features
    no longer match): a run died on it. The token is masked out of the model's next-token logits everywhere
    (engine, update, reference), so it is never sampled and old and new log-probs stay one distribution."""
    from kitae.models import load_causal_lm
    from kitae.trainer.loop import Trainer

    path = _image_token_loving_model(tmp_path)
    optim = {"steps": 2, "prompts_per_step": 2, "micro_batch_size": 4, "lr": 1e-3, "skip_zero_advantage": False}
    cfg = load_train_config(config(tmp_path, model={"path": path}, eval={"every": 0}, optim=optim))
    Trainer(cfg).train()
    with RunStore.open(tmp_path / "runs" / "vl", read_only=True) as store:
        assert store.summary()["status"] == "finished" and store.summary()["steps"] == 2
        texts = [s.text for g in store.groups(limit=10) for s in store.group(g.id).samples]
        assert len(texts) == 12 and not any("<image>" in t for t in texts)
        ratio = store.metrics(["ratio_mean"])["ratio_mean"]
        assert abs(ratio[0][1] - 1) < 1e-4
    model = load_causal_lm(path)
    assert model.lm_head.weight.shape[0] > model.config.image_token_id  # the token is in the vocabulary
