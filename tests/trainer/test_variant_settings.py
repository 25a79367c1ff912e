"""Each loss, advantage estimator and prompt sampler declares its settings beside its code (issue 35): the config
reads them as before (flat keys beside the name), refuses a setting the chosen variant does not take, and every
example config runs its loss with exactly the values the old code gave it."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest

from kitae.errors import ConfigError
from kitae.trainer.config import load_train_config
from kitae.trainer.resume import _normalized, config_changes

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MINIMAL = {"rewards": [{"grader": {"type": "answer"}}]}

# What the policy loss ran with for each example config before each loss had its own settings: the old code's
# LossConfig (every field, whatever the loss), written out here by hand, not computed by the code under test.
OLD = {"eps_low": 0.2, "eps_high": 0.2, "aggregation": "seq_mean_token_mean", "kl_coef": 0.0, "kl_estimator": "k3",
       "gspo_eps_low": 3e-4, "gspo_eps_high": 4e-4, "cispo_eps_high": 0.28, "kimi_tau": 0.1}
OLD_RUNS = {  # example -> (loss, advantage, what the old LossConfig held beyond OLD)
    "agent_code.yaml": ("grpo", "grpo", {"max_completion_length": 1536}),
    "code.yaml": ("grpo", "grpo", {"max_completion_length": 48}),
    "gsm8k.yaml": ("dapo", "grpo", {"max_completion_length": 512, "eps_high": 0.28, "aggregation": "token_mean"}),
    "kimi.yaml": ("kimi", "dr_grpo", {"max_completion_length": 96}),
    "long2short_rl.yaml": ("kimi", "dr_grpo", {"max_completion_length": 48}),
    "tools.yaml": ("grpo", "grpo", {"max_completion_length": 160}),
    "vision.yaml": ("grpo", "grpo", {"max_completion_length": 24}),
    "zero.yaml": ("grpo", "grpo", {"max_completion_length": 48}),
    "zero_13b_one_gpu.yaml": ("grpo", "grpo", {"max_completion_length": 512}),
    "zero_recipe.yaml": ("grpo", "grpo", {"max_completion_length": 48}),
}
READS = {  # the settings each loss function reads (kitae/algorithms/losses.py)
    "grpo": {"eps_low", "eps_high", "aggregation"}, "dapo": {"eps_low", "eps_high", "aggregation"},
    "dr_grpo": {"eps_low", "eps_high", "aggregation"}, "gspo": {"gspo_eps_low", "gspo_eps_high"},
    "cispo": {"cispo_eps_high", "aggregation"}, "kimi": {"kimi_tau"},
}


def test_every_example_config_is_listed():
    assert sorted(p.name for p in EXAMPLES.glob("*.yaml")) == sorted(OLD_RUNS)


@pytest.mark.parametrize("example", sorted(OLD_RUNS))
def test_each_example_runs_its_loss_with_the_values_the_old_code_gave(example):
    loss, advantage, extra = OLD_RUNS[example]
    old = {**OLD, **extra}
    cfg = load_train_config(EXAMPLES / example)
    ran = cfg.loss_config(0.0)
    assert (cfg.algorithm.loss.type, cfg.algorithm.advantage.type) == (loss, advantage)
    settings = {k: v for k, v in dataclasses.asdict(ran.settings).items() if k != "type"}
    assert set(settings) == READS[loss]  # exactly what the loss reads, nothing it ignores
    assert settings == {k: old[k] for k in READS[loss]}
    assert (ran.max_completion_length, ran.kl_coef, ran.kl_estimator) == (
        old["max_completion_length"], old["kl_coef"], old["kl_estimator"])
    assert load_train_config(data=cfg.to_dict()).loss_config(0.0) == ran  # what config.yaml saves reads back


@pytest.mark.parametrize("algorithm, path, message", [
    ({"loss": "gspo", "cispo_eps_high": 0.3}, "algorithm.cispo_eps_high",
     "not a setting of loss 'gspo'; loss cispo takes it"),
    ({"loss": "kimi", "eps_high": 0.3}, "algorithm.eps_high",
     "not a setting of loss 'kimi'; loss dapo, dr_grpo, grpo take it"),
    ({"kimi_tau": 0.2}, "algorithm.kimi_tau", "not a setting of loss 'grpo'; loss kimi takes it"),  # grpo: default
    ({"loss": "gspo", "aggregation": "token_mean"}, "algorithm.aggregation", "not a setting of loss 'gspo'"),
    ({"loss": {"type": "kimi", "eps_low": 0.1}}, "algorithm.loss.eps_low", "not a setting of loss 'kimi'"),
    ({"loss": "dapo", "eps_hihg": 0.3}, "algorithm.eps_hihg", "unknown key"),
    ({"loss": "kimi", "kimi_tau": 0}, "algorithm.kimi_tau", "must be > 0"),  # named where written
    ({"loss": {"type": "kimi", "kimi_tau": 0}}, "algorithm.loss.kimi_tau", "must be > 0"),
    ({"loss": "grpo", "aggregation": "token_maen"}, "algorithm.aggregation", "unknown loss aggregation"),
    ({"advantage": {"type": "rloo", "eps": 0.1}}, "algorithm.advantage.eps", "not a setting of advantage "
                                                                             "estimator 'rloo'"),
])
def test_a_setting_the_chosen_variant_does_not_take_is_an_error_naming_it(algorithm, path, message):
    with pytest.raises(ConfigError) as err:
        load_train_config(data={**MINIMAL, "algorithm": algorithm})
    assert str(err.value).startswith(f"{path}:") and message in str(err.value), str(err.value)


@pytest.mark.parametrize("algorithm", [
    {"loss": "dapo", "eps_high": 0.3},  # today's form: the settings beside the name
    {"loss": {"type": "dapo", "eps_high": 0.3}},  # the variant's own mapping
    {"loss": "dapo", "eps_high": 0.3, "eps_low": None},  # null: left out, as before
])
def test_a_loss_setting_reads_flat_or_nested_and_the_rest_are_the_losss_defaults(algorithm):
    settings = load_train_config(data={**MINIMAL, "algorithm": algorithm}).algorithm.loss
    assert (settings.type, settings.eps_low, settings.eps_high, settings.aggregation) == (
        "dapo", 0.2, 0.3, "token_mean")


def test_an_advantage_takes_its_settings_and_pairs_with_the_loss():
    cfg = load_train_config(data={**MINIMAL, "algorithm": {"advantage": {"type": "grpo", "eps": 0.0}}})
    assert cfg.algorithm.advantage.eps == 0.0
    assert load_train_config(data={**MINIMAL, "algorithm": {"loss": "dr_grpo"}}).algorithm.advantage.type == "dr_grpo"


@pytest.mark.parametrize("sampler, message", [
    ({"name": "uniform", "floor": 0.1}, "data.sampler.floor: not a setting of prompt sampler 'uniform'; prompt "
                                        "sampler prioritized takes it"),
    ({"name": "prioritized", "warmup_steps": 3}, "data.sampler.warmup_steps: not a setting of prompt sampler "
                                                 "'prioritized'; prompt sampler curriculum takes it"),
    ({"floor": 0.1}, "data.sampler.floor: not a setting of prompt sampler 'uniform'"),  # no name: uniform
    ({"name": "prioritized", "ema": 1.0}, "data.sampler.ema: must be in [0, 1)"),
])
def test_a_sampler_setting_for_another_sampler_is_an_error(sampler, message):
    with pytest.raises(ConfigError) as err:
        load_train_config(data={**MINIMAL, "data": {"sampler": sampler}})
    assert message in str(err.value), str(err.value)


def test_a_sampler_keeps_todays_form_and_its_pass_rate_settings():
    cfg = load_train_config(data={**MINIMAL, "data": {"sampler": {"name": "prioritized", "floor": 0.2, "ema": 0.5,
                                                                   "correct": "right"}}})
    s = cfg.data.sampler
    assert (s.type, s.floor, s.ema, s.correct, s.pass_threshold) == ("prioritized", 0.2, 0.5, "right", 1.0)
    assert s.options() == {"ema": 0.5, "floor": 0.2}  # what the sampler's constructor gets
    assert cfg.to_dict()["data"]["sampler"] == {"name": "prioritized", "correct": "right", "pass_threshold": 1.0,
                                                "ema": 0.5, "floor": 0.2}
    assert load_train_config(data={**MINIMAL, "data": {"sampler": {"ema": 0.1}}}).data.sampler.type == "uniform"


# A run's config.yaml as kitae wrote it before each variant had its own settings: every loss setting beside the
# loss (also those it never read), the sampler with every sampler's settings.
SAVED_BEFORE = {
    "name": "old", "rewards": [{"name": "answer", "weight": 1.0, "grader": {"type": "answer"}, "function": None,
                                "think": "strip"}],
    "algorithm": {"advantage": "dr_grpo", "loss": "kimi", "eps_low": 0.2, "eps_high": 0.2, "gspo_eps_low": 0.0003,
                  "gspo_eps_high": 0.0004, "cispo_eps_high": 0.28, "aggregation": "seq_mean_token_mean",
                  "kimi_tau": 0.25, "mu": 1, "kl": {"coef": 0.0, "estimator": "k3", "where": "loss", "adaptive": None},
                  "dynamic_sampling": {"enabled": False, "max_rounds": 3}, "mask_truncated": False,
                  "reset_optimizer": True, "max_steps_without_reward": 3, "component_without_reward": "stop",
                  "tis_cap": 2.0},
    "data": {"train": "bundled:arith/train", "eval": "bundled:arith/test", "fields": {}, "answer_pattern": None,
             "system": None, "shuffle": True,
             "sampler": {"name": "curriculum", "correct": "correct", "pass_threshold": 1.0, "ema": 0.0, "floor": 0.05,
                         "schedule": "hard_focus", "warmup_steps": 20, "ramp_steps": 50, "difficulty_key": "difficulty",
                         "levels": ["fact", "easy", "medium", "hard"], "hard_levels": ["medium", "hard"],
                         "hard_threshold": 0.5}},
}


def test_a_config_saved_by_the_old_code_reads_back_and_resumes_unchanged():
    cfg = load_train_config(data=copy.deepcopy(SAVED_BEFORE))
    assert cfg.algorithm.loss.type == "kimi" and cfg.algorithm.loss.kimi_tau == 0.25
    assert cfg.data.sampler.type == "curriculum" and cfg.data.sampler.warmup_steps == 20
    assert cfg.data.sampler.levels == ["fact", "easy", "medium", "hard"]
    # resuming compares the saved config (read by this kitae) with the one the resume reads: no change
    assert config_changes(_normalized(copy.deepcopy(SAVED_BEFORE)), cfg.to_dict()) == []
    again = load_train_config(data=cfg.to_dict())  # the new config.yaml reads back too
    assert again == cfg and again.to_dict() == cfg.to_dict()
    assert "kimi_tau" not in cfg.to_dict()["algorithm"] and cfg.to_dict()["algorithm"]["loss"]["kimi_tau"] == 0.25


def test_only_a_whole_old_section_drops_the_settings_its_variant_does_not_take():
    """A user's config giving one other loss's setting is an error; an old saved section, every setting written,
    keeps those its loss takes."""
    partial = {k: v for k, v in SAVED_BEFORE["algorithm"].items() if k != "eps_low"}
    with pytest.raises(ConfigError, match="algorithm.eps_high: not a setting of loss 'kimi'"):
        load_train_config(data={**SAVED_BEFORE, "algorithm": partial})
