"""The saved config is exactly what ran (issue 16): a loss's own defaults fill only the settings the config leaves out.

Each test trains the tiny model one step and records what the registered loss and advantage functions were
really called with; the run's config.yaml, read back, must give that same LossConfig, and resuming with it must
not count as a config change.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path

import pytest

from kitae.algorithms import ADVANTAGES, POLICY_LOSSES, LossConfig
from kitae.registry import Registry
from kitae.trainer.config import load_train_config
from kitae.trainer.loop import Trainer
from kitae.trainer.resume import plan_resume
from tests.plugins.tiny_run import write_config

ONE_STEP = {"optim.steps": 1, "data.eval": None, "eval.every": 0, "logging.save_every": 0}
# the values each loss ran with before it had its own settings (PRESETS then), written out here
PAPER_DEFAULTS = {"dapo": {"aggregation": "token_mean", "eps_high": 0.28},
                  "dr_grpo": {"aggregation": "seq_sum_constant"}, "cispo": {"aggregation": "token_mean"}}


@pytest.fixture
def calls():
    """Every call of a registered loss or advantage function during the test: (registry kind, name, settings),
    the LossConfig copied as the loss received it. The real functions run."""
    seen: list[tuple[str, str, LossConfig | None]] = []
    originals = [(reg, name, reg.get(name)) for reg in (POLICY_LOSSES, ADVANTAGES) for name in reg.names()]
    for reg, name, fn in originals:
        reg.register(name, _recorded(fn, reg, name, seen), replace=True)
    yield seen
    for reg, name, fn in originals:
        reg.register(name, fn, replace=True)


def _recorded(fn, reg: Registry, name: str, seen: list):
    @functools.wraps(fn)  # keeps the loss's marks (zero_at_zero_advantage)
    def call(*args, **kwargs):
        cfg = next((a for a in args if isinstance(a, LossConfig)), None)
        seen.append((reg.kind, name, copy.deepcopy(cfg)))
        return fn(*args, **kwargs)

    return call


def _train_one_step(tiny_assets: Path, root: Path, algorithm: dict) -> Path:
    over = {**ONE_STEP, **{f"algorithm.{k}": v for k, v in algorithm.items()}}
    cfg = load_train_config(write_config(tiny_assets, root, **over))
    Trainer(cfg).train()
    return cfg.run_dir


def _ran(calls: list, kind: str) -> list:
    return [(name, cfg) for k, name, cfg in calls if k == kind]


def _saved(run: Path):
    """The config `kitae train --resume RUN` builds from the run's config.yaml."""
    cfg = load_train_config(run / "config.yaml")
    cfg.output_dir, cfg.name = str(run.parent), run.name
    return cfg


def _check_saved_config_is_what_ran(run: Path, loss: str, calls: list) -> LossConfig:
    losses = _ran(calls, "policy loss")
    assert losses, "the step ran no loss"
    assert {name for name, _ in losses} == {loss}
    ran = losses[0][1]
    assert all(cfg == ran for _, cfg in losses)
    saved = _saved(run)
    assert saved.loss_config(ran.kl_coef) == ran  # kl_coef: the KL controller's value (0 here), not a setting
    assert plan_resume(saved).changes == []  # resuming with the saved config changes nothing
    return ran


@pytest.mark.parametrize("loss", POLICY_LOSSES.names())
def test_the_saved_config_gives_the_loss_config_that_ran(tiny_assets, tmp_path, rewards_on_path, calls, loss):
    run = _train_one_step(tiny_assets, tmp_path, {"loss": loss})
    ran = _check_saved_config_is_what_ran(run, loss, calls)
    assert ran == LossConfig.for_loss(loss, max_completion_length=6)  # the loss's defaults, nothing else
    for key, value in PAPER_DEFAULTS.get(loss, {}).items():
        assert getattr(ran.settings, key) == value


def test_a_value_written_out_beats_the_preset(tiny_assets, tmp_path, rewards_on_path, calls):
    """`loss: dapo` with `eps_high: 0.2` written out trains with 0.2 (it used to train with 0.28 while the saved
    config said 0.2), and with dapo's token_mean, which was left out."""
    run = _train_one_step(tiny_assets, tmp_path, {"loss": "dapo", "eps_high": 0.2})
    ran = _check_saved_config_is_what_ran(run, "dapo", calls)
    assert (ran.settings.eps_high, ran.settings.aggregation) == (0.2, "token_mean")
    assert _saved(run).algorithm.loss.aggregation == "token_mean"  # config.yaml shows the default's value too


@pytest.mark.parametrize("algorithm, advantage", [
    ({"loss": "dr_grpo"}, "dr_grpo"),  # r - group mean, as the Dr. GRPO paper
    ({"loss": "dr_grpo", "advantage": "grpo"}, "grpo"),  # unless written
])
def test_loss_dr_grpo_brings_its_advantage_unless_one_is_written(tiny_assets, tmp_path, rewards_on_path, calls,
                                                                algorithm, advantage):
    run = _train_one_step(tiny_assets, tmp_path, algorithm)
    assert {name for name, _ in _ran(calls, "advantage estimator")} == {advantage}
    assert _saved(run).algorithm.advantage.type == advantage
    _check_saved_config_is_what_ran(run, "dr_grpo", calls)


def _resume_with_the_cli(run: Path, *extra: str):
    from typer.testing import CliRunner

    from kitae.cli.main import app

    result = CliRunner().invoke(app, ["train", "--resume", str(run), "--set", "optim.steps=2", "--quiet", *extra])
    assert result.exit_code == 0, result.output + repr(result.exception)
    return result


def test_a_resumed_run_keeps_a_written_value_equal_to_the_default(tiny_assets, tmp_path, rewards_on_path, calls):
    run = _train_one_step(tiny_assets, tmp_path, {"loss": "dapo", "eps_high": 0.2})
    calls.clear()
    _resume_with_the_cli(run)
    assert {c.settings.eps_high for _, c in _ran(calls, "policy loss")} == {0.2}
