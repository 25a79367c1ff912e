"""A run in which no sample gets a reward, or one component gives no sample a finite score, stops with an error
instead of "finishing" (tiny real model).

Every component failing on every sample (a grader template naming a missing field, a reward server that is
down) used to train on nothing for every step and end with exit 0; so did one component failing on every
sample (a TRL reward function reading completion_ids, which kitae did not pass), the run trained on the others."""

from __future__ import annotations

import math
import subprocess
import sys
import warnings

import pytest

from kitae.errors import KitaeError
from kitae.store import RunStore
from kitae.trainer.config import load_train_config
from kitae.trainer.loop import Trainer
from tests.plugins.tiny_run import write_config

pytestmark = pytest.mark.slow

BROKEN = [{"name": "down", "function": "tests.reward_functions:down"}, {"name": "silent", "function": "tests.reward_functions:silent"}]


@pytest.fixture
def service_down(monkeypatch):
    monkeypatch.delenv("TINY_REWARDS_UP", raising=False)
    return monkeypatch


def test_no_reward_stops_the_run_with_an_error_and_the_checkpoint_resumes(tiny_assets, tmp_path, rewards_on_path,
                                                                           service_down):
    cfg = load_train_config(write_config(tiny_assets, tmp_path, **{
        "optim.steps": 4, "data.eval": None, "logging.save_every": 100, "rewards": BROKEN,
        "algorithm.max_steps_without_reward": 2, "algorithm.component_without_reward": "warn",  # silent stays silent
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
    with pytest.warns(UserWarning, match="reward component 'silent' gave no sample a finite score in step 3; the run "
                                         r"goes on without it \(algorithm.component_without_reward: warn\)"):
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


# ---- one component without a finite score --------------------------------------------------------------
def test_one_component_failing_on_every_sample_stops_the_run_naming_it(tiny_assets, tmp_path, rewards_on_path,
                                                                      service_down):
    cfg = load_train_config(write_config(tiny_assets, tmp_path, **{
        "optim.steps": 4, "data.eval": None, "logging.save_every": 100, "algorithm.max_steps_without_reward": 2,
        "rewards": [{"name": "short", "function": "tests.reward_functions:short"}, {"name": "down", "function": "tests.reward_functions:down"}],
    }))
    with pytest.warns(UserWarning, match="reward component 'down' gave no sample a finite score in step 1; the run stops "
                                         "if it goes on for 2 steps in a row"):
        with pytest.raises(KitaeError) as err:
            Trainer(cfg).train()  # was: "finished", trained on short alone
    message = str(err.value)
    assert message.startswith("reward component 'down' gave no sample a finite score in steps 1-2, so the run trained "
                              "on the other components alone (algorithm.max_steps_without_reward: 2). Its last errors:\n"
                              "  ConnectionError: reward service down: \ufffd\n")
    assert f"kitae train --resume {tmp_path / 't'}" in message and "component_without_reward: warn" in message
    store = RunStore.open(tmp_path / "t")
    assert (store.summary()["status"], store.summary()["steps"]) == ("crashed", 2)
    assert [v for _, v in store.metrics(["invalid_rate"])["invalid_rate"]] == [0.0, 0.0]  # short rewarded every sample
    store.close()
    assert (tmp_path / "t" / "checkpoints" / "step-000002" / "state.pt").exists()


def test_warn_goes_on_and_says_so_at_the_first_step(tiny_assets, tmp_path, rewards_on_path, service_down):
    cfg = load_train_config(write_config(tiny_assets, tmp_path, **{
        "optim.steps": 3, "data.eval": None, "algorithm.max_steps_without_reward": 1,
        "algorithm.component_without_reward": "warn",
        "rewards": [{"name": "short", "function": "tests.reward_functions:short"}, {"name": "down", "function": "tests.reward_functions:down"}],
    }))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert Trainer(cfg).train()["status"] == "finished"
    told = [str(w.message) for w in caught if "reward component 'down'" in str(w.message)]
    assert len(told) == 1 and told[0].startswith("reward component 'down' gave no sample a finite score in step 1")


def test_reward_functions_written_as_trls_docs_write_them_train(tiny_assets, tmp_path, rewards_on_path):
    """completion_ids and trainer_state reach the functions: each scores every sample (each failed every one)."""
    names = ["by_tokens", "ramp", "repetition"]
    cfg = load_train_config(write_config(tiny_assets, tmp_path, **{
        "optim.steps": 3, "data.eval": None, "rewards": [{"name": n, "function": f"tests.reward_functions:{n}"} for n in names],
    }))
    assert Trainer(cfg).train()["status"] == "finished"
    store = RunStore.open(tmp_path / "t")
    metrics = store.metrics([f"grader/{n}/abstain_rate" for n in names] + [f"reward/{n}" for n in names])
    for n in names:
        assert [v for _, v in metrics[f"grader/{n}/abstain_rate"]] == [0.0, 0.0, 0.0], n
        assert all(math.isfinite(v) for _, v in metrics[f"reward/{n}"]), n
    sample = store.groups(step=3, with_samples=True)[0].samples[0]
    assert sample.scores["by_tokens"] == pytest.approx(-sample.completion_tokens / 10)
    content = sample.text.split("<|im_end|>")[0]
    assert sample.scores["ramp"] == pytest.approx(2 / 3 - len(content) / 10)  # global_step 2 of max_steps 3
    store.close()


def test_a_function_giving_every_sample_one_score_is_warned_about_at_the_first_step(tiny_assets, tmp_path,
                                                                                   rewards_on_path):
    cfg = load_train_config(write_config(tiny_assets, tmp_path, **{
        "optim.steps": 2, "data.eval": None, "rewards": [{"name": "short", "function": "tests.reward_functions:short"},
                                                         {"name": "strings", "function": "tests.reward_functions:as_strings"}],
    }))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Trainer(cfg).train()
    told = [str(w.message) for w in caught if "same score" in str(w.message)]
    assert told == ["reward function 'strings' gave every sample it scored in step 1 the same score (-19): it cannot "
                    "tell completions apart, so it adds nothing to the advantages. Check what it reads: here "
                    'completions are lists of chat messages, [{"role": "assistant", "content": TEXT}] (TRL\'s '
                    'conversational format): read completion[0]["content"].']


def test_a_huge_finite_reward_is_a_grader_error_not_a_crash(tiny_assets, tmp_path, rewards_on_path):
    """A reward function returning 1e308 crashed the step (OverflowError in the mean of the step's rewards); now
    each such score is a grader error, counted in the component's error rate and shown with the sample."""
    cfg = load_train_config(write_config(tiny_assets, tmp_path, **{
        "optim.steps": 2, "data.eval": None, "rewards": [{"name": "huge", "function": "tests.reward_functions:huge"}],
    }))
    assert Trainer(cfg).train()["status"] == "finished"
    store = RunStore.open(tmp_path / "t")
    metrics = store.metrics(["reward", "invalid_rate", "grader/huge/error_rate", "reward/huge"])
    assert [v for _, v in metrics["grader/huge/error_rate"]] == [0.5, 0.5]  # every other sample
    assert [v for _, v in metrics["invalid_rate"]] == [0.5, 0.5]
    assert all(math.isfinite(v) and abs(v) < 1e3 for name in ("reward", "reward/huge") for _, v in metrics[name])
    samples = store.groups(step=2, with_samples=True)[0].samples
    assert [s.reward is None for s in samples] == [False, True, False, True]
    assert samples[1].errors["huge"].startswith("score 1e+308 is past the reward limit of ±1e+15")
    store.close()


def test_an_eval_grader_that_abstains_on_every_sample_scores_nothing(tiny_assets, tmp_path, rewards_on_path):
    """The eval grader skips every row (numeric with a reference without a number): pass@1 was stored and printed
    as 0.000, as if every answer were wrong; now it is null, printed as n/a, and `kitae runs show` shows it."""
    from kitae.cli.train import eval_line

    cfg = load_train_config(write_config(tiny_assets, tmp_path, **{
        "optim.steps": 1, "eval.every": 1, "eval.grader": {"type": "numeric", "reference": "none"},
    }))
    printed = []
    trainer = Trainer(cfg)
    trainer.on_eval = lambda step, metrics, seconds: printed.append(eval_line(step, metrics))
    assert trainer.train()["status"] == "finished"
    assert printed and all("pass@1 n/a (the eval grader abstained on every sample)" in line for line in printed)
    store = RunStore.open(tmp_path / "t")
    evals = store.evals()
    assert evals and all(e.metrics["pass@1"] is None and e.metrics["abstain_rate"] == 1.0 for e in evals)
    store.close()
    shown = subprocess.run([sys.executable, "-m", "kitae", "runs", "show", str(tmp_path / "t")],
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert "evals (" in shown.stdout and "Traceback" not in shown.stderr
    from kitae.web.api import Query, dispatch  # the run page's API: the null eval reaches the page as null

    page = dispatch(tmp_path, "GET", "/runs/t/metrics", Query(""))
    assert page["evals"]["eval/pass@1"] and all(v is None for _, v in page["evals"]["eval/pass@1"])
    listed = dispatch(tmp_path, "GET", "/runs/t/evals", Query(""))["evals"]
    assert all(e["score"] is None and e["metrics"]["pass@1"] is None for e in listed)
    assert dispatch(tmp_path, "GET", "/runs", Query(""))["runs"][0]["eval_score"] is None
