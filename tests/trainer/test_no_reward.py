"""A run in which no sample gets a reward stops with an error instead of "finishing" (tiny real model).

Every component failing on every sample (a grader template naming a missing field, a reward server that is
down) used to train on nothing for every step and end with exit 0."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from kitae.errors import KitaeError
from kitae.store import RunStore
from kitae.trainer.config import load_train_config
from kitae.trainer.loop import Trainer
from tests.trainer.conftest import write_config

pytestmark = pytest.mark.slow

BROKEN = [{"name": "down", "function": "tiny_rewards:down"}, {"name": "silent", "function": "tiny_rewards:silent"}]


@pytest.fixture
def service_down(monkeypatch):
    monkeypatch.delenv("TINY_REWARDS_UP", raising=False)
    return monkeypatch


def test_no_reward_stops_the_run_with_an_error_and_the_checkpoint_resumes(tiny_assets, tmp_path, rewards_on_path,
                                                                           service_down):
    cfg = load_train_config(write_config(tiny_assets, tmp_path, **{
        "optim.steps": 4, "data.eval": None, "logging.save_every": 100, "rewards": BROKEN,
        "algorithm.max_steps_without_reward": 2,
    }))
    with pytest.raises(KitaeError) as err:
        Trainer(cfg).train()
    message = str(err.value)
    assert message.startswith("no sample got a reward in steps 1-2: every reward component abstained or failed")
    assert "\n  down: ConnectionError: reward service down: \ufffd\n" in message  # printable: the surrogate replaced
    assert "\n  silent: abstained without saying why\n" in message
    assert f"kitae train --resume {tmp_path / 't'}" in message

    store = RunStore.open(tmp_path / "t")
    summary = store.summary()
    assert (summary["status"], summary["steps"]) == ("crashed", 2)
    assert summary["final"] == {"status": "crashed", "error": message}
    assert [v for _, v in store.metrics(["invalid_rate"])["invalid_rate"]] == [1.0, 1.0]
    sample = store.groups(step=2, with_samples=True)[0].samples[0]  # the store took the surrogate error text
    assert (sample.reward, sample.errors["down"]) == (None, "ConnectionError: reward service down: \ufffd")
    assert (tmp_path / "t" / "checkpoints" / "step-000002" / "state.pt").exists()
    store.close()

    service_down.setenv("TINY_REWARDS_UP", "1")  # the service is back: resume from the step-2 checkpoint
    resumed = Trainer(load_train_config(tmp_path / "t" / "config.yaml"), resume=True)
    assert resumed.start_step == 2
    assert resumed.train()["status"] == "finished"
    store = RunStore.open(tmp_path / "t")
    rewards = store.metrics(["reward"])["reward"]
    assert [s for s, _ in rewards] == [1, 2, 3, 4]
    assert all(math.isfinite(v) for s, v in rewards if s > 2) and store.summary()["final"]["status"] == "finished"
    store.close()


def test_zero_never_stops(tiny_assets, tmp_path, rewards_on_path, service_down):
    cfg = load_train_config(write_config(tiny_assets, tmp_path, **{
        "optim.steps": 2, "data.eval": None, "rewards": BROKEN, "algorithm.max_steps_without_reward": 0,
    }))
    assert Trainer(cfg).train()["status"] == "finished"


def test_kitae_train_exits_non_zero_naming_the_components(tiny_assets, tmp_path, rewards_on_path, service_down):
    cfg = write_config(tiny_assets, tmp_path, **{"optim.steps": 3, "data.eval": None, "rewards": BROKEN,
                                                 "algorithm.max_steps_without_reward": 1})
    out = subprocess.run([sys.executable, "-m", "kitae.cli.main", "train", str(cfg), "-q"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "error: no sample got a reward in step 1:" in out.stderr
    assert "down: ConnectionError: reward service down" in out.stderr and "silent: abstained" in out.stderr
    assert "Traceback" not in out.stderr
    assert RunStore.open(tmp_path / "t").summary()["status"] == "crashed"
