"""The training config: defaults, overrides, and errors that name the key path."""

from __future__ import annotations

import pytest

from kitae.errors import ConfigError
from kitae.trainer.config import load_train_config

MINIMAL = {"rewards": [{"grader": {"type": "answer"}}]}


def test_minimal_config_gets_defaults_and_a_component_name():
    cfg = load_train_config(data=MINIMAL)
    assert cfg.model.path == "bundled"
    assert cfg.algorithm.loss == "grpo" and cfg.sampling.group_size == 8
    assert cfg.rewards[0].name == "answer"
    assert cfg.algorithm.max_steps_without_reward == 3


@pytest.mark.parametrize("value, expected", [("0", 0), ("null", None), ("10", 10)])  # 0 and null: never stop
def test_max_steps_without_reward(value, expected):
    cfg = load_train_config(data=MINIMAL, overrides=[f"algorithm.max_steps_without_reward={value}"])
    assert cfg.algorithm.max_steps_without_reward == expected


def test_overrides_are_parsed_as_yaml():
    cfg = load_train_config(data=MINIMAL, overrides=["optim.lr=1e-5", "algorithm.kl.adaptive={target: 0.05}"])
    assert cfg.optim.lr == 1e-5
    assert cfg.algorithm.kl.adaptive.target == 0.05 and cfg.algorithm.kl.adaptive.horizon == 10000


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["optim.lrr=1"], "optim.lrr: unknown key; did you mean 'lr'?"),
        (["optim.lr=fast"], "optim.lr: expected a number, got 'fast'"),
        (["optim.steps=2.5"], "optim.steps: expected an integer"),
        (["algorithm.aggregation=tokenmean"], "did you mean 'token_mean'?"),
        (["algorithm.kl.estimator=k4"], "algorithm.kl.estimator: got 'k4'; expected one of k1, k2, k3"),
        (["sampling.group_size=1"], "sampling.group_size: GRPO compares samples"),
        (["optim.prompts_per_step=0"], "optim.prompts_per_step: must be at least 1"),
        (["model.lora=3"], "model.lora: expected a mapping"),
        (["nonsense"], "an override looks like key.path=value"),
        (["algorithm.max_steps_without_reward=-1"], "algorithm.max_steps_without_reward: must be 0 or more"),
    ],
)
def test_bad_values_name_the_key_path(overrides, message):
    with pytest.raises(ConfigError, match=None) as err:
        load_train_config(data=MINIMAL, overrides=overrides)
    assert message in str(err.value)


@pytest.mark.parametrize(
    "rewards, message",
    [
        ([], "rewards: give at least one reward component"),
        ([{"name": "x"}], "rewards[0]: give exactly one of 'grader'"),
        ([{"grader": {"type": "answer"}, "function": "m:f"}], "rewards[0]: give exactly one of"),
        ([{"grader": {"type": "answer"}}, {"grader": {"type": "answer"}}], "names must be unique; repeated: answer"),
        ([{"grader": {"type": "answer"}, "wieght": 2}], "rewards[0].wieght: unknown key; did you mean 'weight'?"),
    ],
)
def test_reward_component_errors(rewards, message):
    with pytest.raises(ConfigError) as err:
        load_train_config(data={"rewards": rewards})
    assert message in str(err.value)


def test_unknown_loss_is_reported_with_did_you_mean_when_the_trainer_builds(tmp_path):
    from kitae.algorithms.losses import POLICY_LOSSES

    with pytest.raises(ConfigError, match="did you mean 'grpo'"):
        POLICY_LOSSES.get("grop", "algorithm.loss")
