"""The Kimi k1.5 recipe inside the trainer: samplers told pass rates, partial rollouts, repeat penalty, optimizer
reset, the sampling policy as the mirror-descent reference, the length reward's warm-up, and resume."""

from __future__ import annotations


import pytest
import torch
from safetensors.torch import load_file

from kitae.errors import ConfigError
from kitae.rollout.base import Completion
from kitae.store import RunStore
from kitae.trainer.batch import build_batch, mask_earlier_segments
from kitae.trainer.checkpoint import latest_checkpoint, load_state
from kitae.trainer.config import load_train_config
from kitae.trainer.loop import Trainer
from tests.plugins.tiny_run import write_config

KIMI = {
    "algorithm.loss": "kimi",
    "algorithm.reset_optimizer": True,
    "data.eval": None,
    "data.sampler": {"name": "prioritized", "floor": 0.1},
    "rewards": [
        {"name": "correct", "grader": {"type": "answer"}},
        {"name": "length", "grader": {"type": "length", "unit": "chars", "warmup_steps": 4, "weight": 0.5}},
    ],
    "sampling.max_new_tokens": 9,
    "sampling.partial": {"segment_tokens": 4},
    "sampling.repeat": {"min_count": 2, "max_period": 2, "min_span": 2, "penalty": -1.0},
}


def _run(tiny_assets, root, resume=False, **over):
    trainer = Trainer(load_train_config(write_config(tiny_assets, root, **{**KIMI, **over})), resume=resume)
    trainer.train()
    return trainer


def test_kimi_run_resumes_to_the_same_weights_sampler_and_replay_buffer(tiny_assets, tmp_path):
    _run(tiny_assets, tmp_path / "a", **{"optim.steps": 5, "logging.save_every": 5})
    _run(tiny_assets, tmp_path / "b", **{"optim.steps": 2, "logging.save_every": 2})
    _run(tiny_assets, tmp_path / "b", resume=True, **{"optim.steps": 5, "logging.save_every": 5})
    (sa, pa), (sb, pb) = [latest_checkpoint(tmp_path / r / "t") for r in ("a", "b")]
    assert sa == sb == 5
    wa, wb = load_file(pa / "model" / "model.safetensors"), load_file(pb / "model" / "model.safetensors")
    assert all(torch.allclose(wa[k], wb[k], atol=1e-5) for k in wa)
    state_a, state_b = load_state(pa), load_state(pb)
    assert state_a["sampler"] == state_b["sampler"] and state_a["partial"] == state_b["partial"]
    assert state_a["sampler"]["rates"]["count"] != [0] * 16  # the sampler was told pass rates

    m = RunStore.open(tmp_path / "a" / "t").metrics()
    assert [s for s, _ in m["groups"]] == [1, 2, 3, 4, 5]
    # 9 tokens in segments of 4 (4 + 4 + 1): the first groups finish in step 3
    assert [v for _, v in m["groups"]] == [0, 0, 2, 2, 2]
    assert [v for _, v in m["partial/pending_groups"]] == [2, 4, 4, 4, 4]
    length = dict(m["reward/length"])
    assert sorted(length) == [3, 4, 5] and length[3] == 0.0  # warm-up: no length reward before step 4
    assert length[4] < 0 and length[5] < 0  # mostly wrong answers: the longer ones are penalized
    repeat = dict(m["reward/repeat"])
    assert all(v == pytest.approx(-dict(m["repeat_rate"])[s]) for s, v in repeat.items())


@pytest.mark.parametrize("reset, adam_steps", [(True, 1), (False, 3)])
def test_optimizer_reset_and_the_sampling_policy_as_reference(tiny_assets, tmp_path, reset, adam_steps):
    """Kimi mirror descent: a fresh optimizer each iteration; with mu 1 the ratio to the reference (the engine's
    log-probs of the sampling policy) is exactly 1 before the update."""
    cfg = load_train_config(write_config(tiny_assets, tmp_path, **{
        **KIMI, "sampling.partial": None, "algorithm.reset_optimizer": reset, "optim.steps": 3,
        "logging.save_every": 100, "data.sampler": {"name": "uniform"},
    }))
    trainer = Trainer(cfg)
    trainer.train()
    steps = {int(s["step"]) for s in trainer.optimizer.state.values()}
    assert steps == {adam_steps}
    ratios = [v for _, v in RunStore.open(tmp_path / "t").metrics()["ratio_mean"]]
    assert ratios == pytest.approx([1.0] * 3, abs=1e-4)


def test_earlier_segments_leave_the_loss_but_stay_in_the_input():
    c = Completion("", [1, 2, 3], [4, 5, 6, 7, 8], [-1.0] * 5, "stop", earlier_tokens=2)
    batch = build_batch([c], [0.0], 0)
    mask_earlier_segments(batch, [c])
    # columns p-1 .. p+3 (= 2..6) predict the 5 completion tokens; the first two were sampled earlier
    assert batch.mask.tolist() == [[0, 0, 0, 0, 1, 1, 1]]
    assert batch.input_ids.tolist() == [[1, 2, 3, 4, 5, 6, 7, 8]]


@pytest.mark.parametrize(
    "over, message",
    [
        ({"rewards": [{"name": "short", "grader": {"type": "answer"}}]}, "data.sampler.correct: the prioritized"),
        ({"data.sampler": {"name": "prioritized", "correct": "corect"}}, "did you mean 'correct'?"),
        ({"algorithm.dynamic_sampling": {"enabled": True}}, "sampling.partial: partial rollouts do not combine"),
        ({"sampling.repeat": {"penalty": -1}, "rewards": [{"name": "repeat", "grader": {"type": "answer"}}],
          "data.sampler": {"name": "uniform"}}, "sampling.repeat.penalty: adds a reward component named 'repeat'"),
    ],
)
def test_config_errors_name_the_key(tiny_assets, tmp_path, over, message):
    with pytest.raises(ConfigError) as err:
        Trainer(load_train_config(write_config(tiny_assets, tmp_path, **{**KIMI, **over})))
    assert message in str(err.value)
