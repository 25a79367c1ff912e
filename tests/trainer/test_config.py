"""The training config: defaults, overrides, and errors that name the key path."""

from __future__ import annotations

import pytest

from kitae.algorithms.advantages import StdSettings
from kitae.errors import ConfigError
from kitae.trainer.config import load_train_config

MINIMAL = {"rewards": [{"grader": {"type": "answer"}}]}


def test_minimal_config_gets_defaults_and_a_component_name():
    cfg = load_train_config(data=MINIMAL)
    assert cfg.model.path == "bundled"
    assert cfg.algorithm.loss.type == "grpo" and cfg.sampling.group_size == 8
    assert cfg.rewards[0].name == "answer"
    assert cfg.algorithm.max_steps_without_reward == 3


@pytest.mark.parametrize("value, expected", [("0", 0), ("null", None), ("10", 10)])  # 0 and null: never stop
def test_max_steps_without_reward(value, expected):
    cfg = load_train_config(data=MINIMAL, overrides=[f"algorithm.max_steps_without_reward={value}"])
    assert cfg.algorithm.max_steps_without_reward == expected


@pytest.mark.parametrize("value", [r"####\s*(.+)$", "# a comment", " "])
def test_a_set_value_yaml_reads_as_nothing_is_refused(value):
    """GSM8K's answer pattern typed after --set: YAML reads it as a comment, the setting as null (the run would
    train on the whole worked answer as the reference)."""
    with pytest.raises(ConfigError) as err:
        load_train_config(data=MINIMAL, overrides=[f"data.answer_pattern={value}"])
    assert str(err.value).startswith("--set data.answer_pattern: YAML reads") and "as nothing" in str(err.value)
    assert "for null write data.answer_pattern=null" in str(err.value)


@pytest.mark.parametrize("value", ["null", "~", "NULL"])
def test_a_set_null_is_null(value):
    assert load_train_config(data=MINIMAL, overrides=[f"eval.limit={value}"]).eval.limit is None


def test_a_quoted_pattern_after_set_is_text():
    cfg = load_train_config(data=MINIMAL, overrides=[r"data.answer_pattern='####\s*(.+)$'"])
    assert cfg.data.answer_pattern == r"####\s*(.+)$"


@pytest.mark.parametrize("overrides, message", [
    (["sampling.async=maybe"], "sampling.async: expected true or false, got 'maybe'"),
    (["sampling.asyn=true"], "sampling.asyn: unknown key; did you mean 'async'?"),
    (["sampling.async_=true"], "sampling.async_: unknown key; did you mean 'async'?"),  # the attribute is no key
])
def test_errors_name_a_renamed_key_as_yaml_writes_it(overrides, message):
    with pytest.raises(ConfigError) as err:
        load_train_config(data=MINIMAL, overrides=overrides)
    assert str(err.value) == message


def test_an_empty_config_file_is_named(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text("# to do\n")
    with pytest.raises(ConfigError, match=f"^{path}: the file is empty .*examples/zero.yaml"):
        load_train_config(path)


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
        (["optim.prompts_per_step=0"], "optim.prompts_per_step: must be >= 1, got 0"),
        (["optim.steps=0"], "optim.steps: must be >= 1, got 0"),
        (["logging.save_every=-1"], "logging.save_every: must be >= 0, got -1"),
        (["sampling.engine=server", "sampling.servers=[http://127.0.0.1:8000]", "sampling.sync_every=0"],
         "sampling.sync_every: must be >= 1, got 0"),  # the server engine's setting, beside the engine
        (["sampling.sync_every=2"], "sampling.sync_every: not a setting of engine 'hf'; engine server takes it"),
        (["sampling.partial={segment_tokens: 0}"], "sampling.partial.segment_tokens: must be >= 1, got 0"),
        (["algorithm.mu=0"], "algorithm.mu: must be >= 1, got 0"),
        (["algorithm.loss=grop"], "algorithm.loss: unknown policy loss 'grop'; did you mean 'grpo'?"),
        (["algorithm.advantage=rlo"], "algorithm.advantage: unknown advantage estimator 'rlo'; did you mean 'rloo'?"),
        (["algorithm.eps_low=-0.1"], "algorithm.eps_low: must be >= 0, got -0.1"),
        (["algorithm.loss=kimi", "algorithm.kimi_tau=0"], "algorithm.kimi_tau: must be > 0, got 0"),
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


PRESET_CASES = [
    # algorithm section, field, the value training runs with (and the saved config shows)
    ({}, "aggregation", "seq_mean_token_mean"),  # grpo's defaults
    ({}, "eps_high", 0.2),
    ({"loss": "dapo"}, "eps_high", 0.28),  # the loss's own defaults fill what is left out
    ({"loss": "dapo"}, "aggregation", "token_mean"),
    ({"loss": "dapo", "eps_high": 0.2}, "eps_high", 0.2),  # a value written out wins, even grpo's default
    ({"loss": "dapo", "eps_high": 0.2}, "aggregation", "token_mean"),  # ... and only that one
    ({"loss": "dapo", "aggregation": "seq_mean_token_mean"}, "aggregation", "seq_mean_token_mean"),
    ({"loss": "dapo", "eps_high": None}, "eps_high", 0.28),  # null: left out
    ({"loss": "dr_grpo"}, "aggregation", "seq_sum_constant"),
    ({"loss": "cispo"}, "aggregation", "token_mean"),
    ({"loss": "cispo"}, "cispo_eps_high", 0.28),
    ({"loss": "kimi"}, "kimi_tau", 0.1),
    ({"loss": "gspo", "gspo_eps_high": 1e-3}, "gspo_eps_high", 1e-3),
]


@pytest.mark.parametrize("algorithm, field, expected", PRESET_CASES)
def test_loss_settings_left_out_come_from_the_losss_defaults(algorithm, field, expected):
    cfg = load_train_config(data={**MINIMAL, "algorithm": algorithm})
    assert getattr(cfg.algorithm.loss, field) == expected
    assert cfg.to_dict()["algorithm"]["loss"][field] == expected  # what config.yaml saves
    assert getattr(cfg.loss_config(0.0).settings, field) == expected  # what the loss runs with


@pytest.mark.parametrize("algorithm, advantage", [
    ({}, "grpo"), ({"loss": "dapo"}, "grpo"),
    ({"loss": "dr_grpo"}, "dr_grpo"),  # the Dr. GRPO paper's pair: r - group mean
    ({"loss": "dr_grpo", "advantage": "grpo"}, "grpo"),  # ... unless written
    ({"loss": "kimi"}, "dr_grpo"),
])
def test_the_advantage_left_out_is_the_losss_pair(algorithm, advantage):
    cfg = load_train_config(data={**MINIMAL, "algorithm": algorithm})
    assert cfg.algorithm.advantage.type == advantage and cfg.to_dict()["algorithm"]["advantage"]["type"] == advantage


def test_the_saved_config_reads_back_to_the_same_config():
    for loss in ("grpo", "dapo", "dr_grpo", "gspo", "cispo", "kimi"):
        cfg = load_train_config(data={**MINIMAL, "algorithm": {"loss": loss}})
        again = load_train_config(data=cfg.to_dict())
        assert again.to_dict() == cfg.to_dict(), loss
        assert again.loss_config(0.1) == cfg.loss_config(0.1), loss


def test_a_config_built_in_code_runs_its_losss_defaults():
    """A TrainConfig built in Python and never read from YAML runs its loss's own defaults."""
    from kitae.algorithms import LossSettings
    from kitae.trainer.config import AlgorithmConfig, RewardConfig, TrainConfig

    algorithm = AlgorithmConfig(loss=LossSettings.read("dapo", "algorithm.loss"))
    cfg = TrainConfig(rewards=[RewardConfig(grader={"type": "answer"})], algorithm=algorithm)
    assert cfg.loss_config(0.0).settings.eps_high == 0.28


@pytest.mark.parametrize(
    "override, message",
    [
        # not a finite number: refused before the model loads, whatever the field
        ("optim.lr=1e400", "optim.lr: expected a finite number, got '1e400'"),  # reads as infinity
        ("optim.lr=1.0e+400", "optim.lr: expected a finite number, got inf"),
        ("optim.lr=.inf", "optim.lr: expected a finite number, got inf"),
        ("optim.lr=nan", "optim.lr: expected a finite number, got 'nan'"),
        ("sampling.temperature=.nan", "sampling.temperature: expected a finite number, got nan"),
        ("optim.betas=[0.9, .nan]", "optim.betas[1]: expected a finite number"),
        ("algorithm.eps_high=.inf", "algorithm.eps_high: expected a finite number"),
        ("algorithm.loss={type: kimi, kimi_tau: .nan}", "algorithm.loss.kimi_tau: expected a finite number"),
        ("algorithm.tis_cap=.nan", "algorithm.tis_cap: expected a finite number"),
        ("sampling.engine={type: server, servers: [http://127.0.0.1:8000], server_timeout: .nan}",
         "sampling.engine.server_timeout: expected a finite number"),
        ("data.sampler.pass_threshold=.nan", "data.sampler.pass_threshold: expected a finite number"),
        ("eval.pass_threshold=-.inf", "eval.pass_threshold: expected a finite number"),
        # finite, but outside what the field means
        ("optim.lr=0", "optim.lr: must be > 0, got 0.0"),
        ("optim.lr=-1e-5", "optim.lr: must be > 0, got -1e-05"),
        ("optim.max_grad_norm=0", "optim.max_grad_norm: must be > 0, got 0.0"),
        ("optim.weight_decay=-0.1", "optim.weight_decay: must be >= 0, got -0.1"),
        ("optim.betas=[0.9, 1.0]", "optim.betas[1]: must be in [0, 1) (Adam's beta), got 1.0"),
        ("optim.betas=[0.9]", "optim.betas: expected two numbers (Adam's beta1, beta2), got 1"),
        ("optim.warmup_steps=-1", "optim.warmup_steps: must be >= 0, got -1"),
        ("sampling.temperature=-0.5", "sampling.temperature: must be >= 0, got -0.5"),
        ("sampling.top_p=0", "sampling.top_p: must be > 0, got 0.0"),
        ("sampling.top_p=1.5", "sampling.top_p: must be <= 1, got 1.5"),
        ("sampling.repetition_penalty=0", "sampling.repetition_penalty: must be > 0, got 0.0"),
        ("sampling.max_new_tokens=0", "sampling.max_new_tokens: must be >= 1, got 0"),
        ("eval.temperature=-1", "eval.temperature: must be >= 0, got -1.0"),
        ("eval.k=0", "eval.k: must be >= 1, got 0"),
        ("algorithm.kl.coef=-0.1", "algorithm.kl.coef: must be >= 0, got -0.1"),
        ("algorithm.kl.adaptive={target: 0}", "algorithm.kl.adaptive.target: must be > 0, got 0.0"),
        ("algorithm.kl.adaptive={horizon: 0}", "algorithm.kl.adaptive.horizon: must be >= 1, got 0"),
        ("algorithm.dynamic_sampling={max_rounds: 0}", "algorithm.dynamic_sampling.max_rounds: must be >= 1, got 0"),
        ("model.lora={dropout: 1.5}", "model.lora.dropout: must be <= 1, got 1.5"),
        ("model.lora={r: 0}", "model.lora.r: must be >= 1, got 0"),
        ("data.sampler={name: prioritized, floor: -0.1}", "data.sampler.floor: must be >= 0, got -0.1"),
    ],
)
def test_bad_numbers_name_the_key_path(override, message):
    with pytest.raises(ConfigError) as err:
        load_train_config(data=MINIMAL, overrides=[override])
    assert str(err.value).startswith(message), str(err.value)


def test_a_nan_reward_weight_is_refused_and_a_negative_one_is_a_penalty():
    with pytest.raises(ConfigError, match=r"^rewards\[0\]\.weight: expected a finite number"):
        load_train_config(data={"rewards": [{"grader": {"type": "answer"}, "weight": float("nan")}]})
    cfg = load_train_config(data={"rewards": [{"grader": {"type": "answer"}, "weight": -0.5}]},
                            overrides=["sampling.repeat={penalty: -1.0}", "sampling.temperature=0"])
    assert cfg.rewards[0].weight == -0.5 and cfg.sampling.repeat.penalty == -1.0  # penalties stay negative
    assert cfg.sampling.temperature == 0.0  # 0: greedy


CODE = {"type": "code", "time_limit": 1}


@pytest.mark.parametrize("rewards, eval_section, expected", [
    ([{"name": "correct", "grader": CODE}], {}, CODE),                        # rewarded by code, evaluated by code
    ([{"name": "correct", "grader": CODE}, {"grader": {"type": "template"}}], {}, CODE),
    ([{"grader": {"type": "template"}}], {}, {"type": "answer"}),             # no `correct` component: answers
    ([{"name": "correct", "function": "m:f"}], {}, {"type": "answer"}),       # a function has no grader spec
    ([{"name": "correct", "grader": CODE}], {"grader": {"type": "answer"}}, {"type": "answer"}),  # as written
])
def test_the_eval_grader_left_out_is_the_correct_component_s_grader(rewards, eval_section, expected):
    cfg = load_train_config(data={"rewards": rewards, "eval": eval_section})
    assert cfg.eval.grader == expected
    assert load_train_config(data=cfg.to_dict()).eval.grader == expected  # the saved config says what evaluated
    if cfg.rewards[0].grader is not None:
        cfg.rewards[0].grader["time_limit"] = 2
        assert cfg.eval.grader == expected  # a copy, not the reward's own spec


def test_a_config_built_in_code_without_an_eval_grader_evaluates_with_its_correct_component():
    from kitae.trainer.config import RewardConfig, TrainConfig

    cfg = TrainConfig(rewards=[RewardConfig("correct", grader=CODE)])
    assert cfg.eval.grader is None and cfg.eval_grader_spec() == CODE


RESOLVED = [
    # the section, its key path, a field as a config leaves it out, and what resolve fills in
    (lambda c: c.logging, "logging", "report_to", "tensorboard", ["tensorboard"]),  # one name: a list of it
    (lambda c: c.alarms, "alarms", "stop_on", ["all"], None),  # None: every alarm kind (checked below)
    (lambda c: c.sampling, "sampling", "max_staleness", None, 0),  # sync: 0
    (lambda c: c.algorithm, "algorithm", "advantage", None, StdSettings(type="grpo")),  # dapo's pair
    (lambda c: c.rewards[0], "rewards[0]", "name", "", "answer"),  # the grader's type
    (lambda c: c.rewards[0], "rewards[0]", "think", None, "strip"),
    (lambda c: c, "", "threads", 2, 2),  # nothing to fill in: resolve leaves it
]


@pytest.mark.parametrize("section, path, key, left_out, filled", RESOLVED)
def test_validate_only_checks_and_resolve_fills_in(section, path, key, left_out, filled):
    """Reading a config resolves each section (fills in what was left out), then validates it (checks, changes
    nothing): validate used to fill in too."""
    from kitae.trainer.alarms import KINDS

    cfg = load_train_config(data={**MINIMAL, "algorithm": {"loss": "dapo"}})
    obj = section(cfg)
    setattr(obj, key, left_out)
    obj.validate(path)
    assert getattr(obj, key) == left_out  # checked as it is, not changed
    obj.resolve(path)
    assert getattr(obj, key) == (list(KINDS) if filled is None else filled)


def test_the_whole_config_resolves_the_eval_grader_and_validates_without_changing_it():
    cfg = load_train_config(data={"rewards": [{"name": "correct", "grader": {"type": "code"}}]})
    cfg.eval.grader = None
    cfg.validate("")
    assert cfg.eval.grader is None
    cfg.resolve("")
    assert cfg.eval.grader == {"type": "code"}


def test_a_grader_spec_without_a_type_is_refused_by_its_key_path():
    """`rewards: [{grader: {}}]` used to crash with an AttributeError while the component's name was filled in."""
    from kitae.trainer.preflight import build_components

    cfg = load_train_config(data={"rewards": [{"grader": {}}]})
    with pytest.raises(ConfigError, match=r"^rewards\[0\]\.grader\.type: missing; one of: answer, "):
        build_components(cfg.rewards)
