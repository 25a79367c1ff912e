"""benchmarks/vs_trl.py compares kitae and TRL on equal settings: its two configs agree on every setting that
changes the work (gradient checkpointing, stops, tokens, rows, optimizer), kitae's config loads, and the reward
for the random-weight models varies within a group (else kitae would skip every row)."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "vs_trl.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("vs_trl", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_same_sampling_and_update(k: dict, trl: dict) -> None:
    """kitae's config ``k`` and TRL's GRPOConfig ``trl`` sample and update alike: temperature, top-p/k, the
    prompt order, the loss, no KL, the clip range, the optimizer (also benchmarks/agents.py's two sides)."""
    assert k["sampling"]["temperature"] == trl["temperature"] and k["sampling"]["top_p"] == trl["top_p"] == 1.0
    assert k["sampling"]["top_k"] == trl["top_k"] == 0
    assert k["data"]["shuffle"] is trl["shuffle_dataset"] is False  # the same prompts at every step
    assert k["algorithm"]["loss"] == trl["loss_type"] == "grpo"
    assert k["algorithm"]["kl"]["coef"] == trl["beta"] == 0.0
    assert k["algorithm"]["eps_low"] == k["algorithm"]["eps_high"] == trl["epsilon"]
    assert k["optim"]["lr"] == trl["learning_rate"] and k["optim"]["scheduler"] == trl["lr_scheduler_type"]
    assert k["optim"]["betas"] == [trl["adam_beta1"], trl["adam_beta2"]]
    assert k["optim"]["weight_decay"] == trl["weight_decay"] and k["optim"]["max_grad_norm"] == trl["max_grad_norm"]


@pytest.fixture(scope="module")
def model():
    from kitae.models import BUNDLED_MODEL

    return str(BUNDLED_MODEL)


@pytest.mark.parametrize("size", ["2M", "20M", "100M"])
@pytest.mark.parametrize("arm", ["kitae", "kitae-all-rows", "kitae-gc"])
def test_both_sides_run_the_same_settings(bench, model, size, arm, tmp_path):
    k = bench.side_settings(arm, model, size, 3, 1, str(tmp_path))
    t = bench.side_settings(bench.BASELINE[arm], model, size, 3, 1, str(tmp_path))
    trl = t["config"]
    assert k["model"]["gradient_checkpointing"] is trl["gradient_checkpointing"] is arm.endswith("-gc")
    assert k["sampling"]["max_new_tokens"] == trl["max_completion_length"] == bench.MAX_NEW
    assert k["sampling"]["group_size"] == trl["num_generations"]
    assert k["optim"]["prompts_per_step"] * k["sampling"]["group_size"] == trl["per_device_train_batch_size"]
    assert_same_sampling_and_update(k, trl)
    assert k["optim"]["skip_zero_advantage"] is (arm != "kitae-all-rows")  # the every-row arm trains them all
    from kitae.trainer.config import load_train_config

    cfg = load_train_config(data=k)  # kitae takes it as it is
    assert cfg.model.gradient_checkpointing is arm.endswith("-gc")


def test_trl_stops_at_the_end_markers_kitae_stops_at(bench, model, tmp_path):
    from kitae.models import load_tokenizer
    from kitae.rollout.base import SamplingParams
    from kitae.rollout.hf import HFEngine

    tok = load_tokenizer(model)
    engine = HFEngine(None, tok)
    stops = engine.ending(SamplingParams()).stop  # what kitae's engine stops at by default
    eos = bench.side_settings("trl", model, "2M", 3, 1, str(tmp_path))["eos_token_id"]
    assert sorted(eos) == sorted(i for s in stops for i in engine.codec.stop_ids((s,))[0][1])
    assert tok.convert_tokens_to_ids("<|endoftext|>") in eos  # TRL's default decodes past it
    assert tok.convert_tokens_to_ids("<|im_end|>") in eos


def test_random_models_get_a_reward_that_varies_within_a_group(bench, model, tmp_path):
    from kitae.registry import load_target

    assert bench.rewards_for("2M") == "task" and bench.rewards_for("20M") == bench.rewards_for("100M") == "digits"
    k = bench.side_settings("kitae", model, "20M", 3, 1, str(tmp_path))
    assert [r["function"] for r in k["rewards"]] == ["vs_trl:digit_share"]
    sys.path.insert(0, str(SCRIPT.parent))  # as the benchmark's children have it
    try:
        fn = load_target("vs_trl:digit_share")
    finally:
        sys.path.remove(str(SCRIPT.parent))
    group = ["ab12<|im_end|>", "7 x", "none", [{"role": "assistant", "content": "9<|endoftext|>"}]]
    assert fn(group) == [0.5, 1 / 3, 0.0, 1.0]
    assert fn(group) == bench.digit_share(group)  # the same function on both sides


def test_the_async_arm_runs_now_that_kitae_takes_sampling_async(bench):
    """(Its check once passed a config without rewards, which kitae refuses: the arm was skipped, saying that
    kitae did not take sampling.async.)"""
    sides, skipped = bench.arms(argparse.Namespace(checkpointing=True, use_async=True))
    assert sides[:3] == ["kitae", "kitae-all-rows", "trl"] and {"kitae-gc", "trl-gc"} <= set(sides)
    assert bench.async_supported() is None
    assert "kitae-async" in sides and not skipped
    assert bench.arms(argparse.Namespace(checkpointing=False, use_async=False)) == (["kitae", "kitae-all-rows", "trl"], {})


def test_the_settings_that_differ_between_the_libraries_are_named(bench):
    names = {row[0] for row in bench.defaults_that_differ()}
    assert {"gradient checkpointing", "stops at", "rows with advantage 0"} <= names
