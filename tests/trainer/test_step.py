"""The stages of one training step, each by itself: the training batch's masks (overlong filtering, earlier
segments of partial rollouts), the advantages with the KL in the reward (hand-computed), the KL controller the
config asks for, and the loss's KL weight."""

from __future__ import annotations

import math

import pytest
import torch

from kitae.algorithms.advantages import AdvantageSettings
from kitae.algorithms.kl import AdaptiveKLController, FixedKLController
from kitae.algorithms.losses import truncation_mask
from kitae.errors import ConfigError
from kitae.graders.base import Grade
from kitae.rollout.base import Completion
from kitae.scoring.components import GroupScores
from kitae.trainer.advantages import batch_advantages
from kitae.trainer.batch import build_batch
from kitae.trainer.config import AdaptiveKL, AlgorithmConfig, KLConfig, PartialRolloutConfig, load_train_config
from kitae.trainer.loop import Trainer
from kitae.trainer.setup import make_kl_controller
from tests.plugins.tiny_run import write_config

LN2 = math.log(2)


@pytest.fixture(scope="module")
def trainer(tiny_assets, tmp_path_factory):
    over = {"data.eval": None, "rewards": [{"name": "correct", "grader": {"type": "answer"}}]}
    return Trainer(load_train_config(write_config(tiny_assets, tmp_path_factory.mktemp("step"), **over)))


def completion(n: int, finish: str, earlier: int = 0) -> Completion:
    return Completion("", [1, 2, 3], list(range(4, 4 + n)), [-0.5] * n, finish, earlier_tokens=earlier)


# ---- the training batch -----------------------------------------------------------------------------------
@pytest.mark.parametrize("mask_truncated, counted", [
    (False, [3, 3, 3]),  # every completion token counts
    (True, [3, 0, 3]),  # DAPO overlong filtering: the sample cut at max length leaves the loss; "repeat" stays
])
def test_the_training_batch_leaves_truncated_samples_out_of_the_loss_when_asked(trainer, mask_truncated, counted):
    trainer.cfg.algorithm.mask_truncated = mask_truncated
    trainer.cfg.sampling.partial = None
    batch = trainer.update.batch_before_advantages([completion(3, "stop"), completion(3, "length"),
                                                    completion(3, "repeat")])
    assert batch.mask.sum(dim=-1).tolist() == counted
    assert batch.attention_mask.sum(dim=-1).tolist() == [6, 6, 6]  # it stays in the input
    assert batch.advantages.tolist() == [0.0, 0.0, 0.0]  # set by the advantages stage


@pytest.mark.parametrize("old_segments, mask", [
    ("exclude", [0, 0, 0, 0, 1, 1]),  # the 2 tokens of earlier segments leave the loss
    ("importance", [0, 0, 1, 1, 1, 1]),  # they stay, with the log-probs of the policy that sampled them
])
def test_the_training_batch_of_partial_rollouts_and_earlier_segments(trainer, old_segments, mask):
    trainer.cfg.algorithm.mask_truncated = False
    trainer.cfg.sampling.partial = PartialRolloutConfig(segment_tokens=2, old_segments=old_segments)
    try:
        batch = trainer.update.batch_before_advantages([completion(4, "stop", earlier=2)])
    finally:
        trainer.cfg.sampling.partial = None
    assert batch.mask.tolist() == [mask]  # columns 2..5 predict the 4 completion tokens
    assert batch.old_logp.tolist() == [[0, 0, -0.5, -0.5, -0.5, -0.5]]


@pytest.mark.parametrize("off_policy", [False, True])
def test_prepare_returns_the_finished_batch(trainer, off_policy):
    """One call gives every field the update reads: the advantages of the groups (grpo, rewards 1 and 0: +-1/sqrt 2
    over an unbiased std), no reference without a KL weight, and off-policy samples (a server's, async's) with the
    trainer's own old log-probs in place of the sampler's and the mismatch metrics."""
    trainer.cfg.algorithm.mask_truncated = False
    trainer.cfg.sampling.partial = None
    scores = [GroupScores({"correct": [Grade(1.0), Grade(0.0)]}, [1.0, 0.0])]
    trainer.update.off_policy = off_policy
    try:
        batch, mismatch = trainer.update.prepare([completion(3, "stop"), completion(3, "stop")], scores, 0.0)
    finally:
        trainer.update.off_policy = False
    expected = 0.5 / (math.sqrt(0.5) + 1e-4)
    assert batch.advantages.tolist() == pytest.approx([expected, -expected])
    assert batch.ref_logp is None  # the KL weight is 0: no reference
    sampler = (batch.old_logp[batch.mask > 0] == -0.5).all()
    assert bool(sampler) == (not off_policy)
    assert bool(mismatch) == off_policy


# ---- advantages -------------------------------------------------------------------------------------------
DR_GRPO = AdvantageSettings.read("dr_grpo", "algorithm.advantage")
# One group of two samples, both rewarded 1, each of two tokens sampled at p = 0.5. The reference gives sample 0's
# tokens p = 0.25: per token k1 = log(0.5 / 0.25) = ln 2, so KL(sample 0) = 2 ln 2 and KL(sample 1) = 0.
@pytest.mark.parametrize("where, masked, has_ref, advantages", [
    ("reward", False, True, [-LN2 / 2, LN2 / 2]),  # rewards 1 - 0.5 * 2 ln 2 and 1; dr_grpo: r - mean
    ("reward", True, True, [0.0, 0.0]),  # sample 0 out of the loss (truncated): its tokens add no KL
    ("loss", False, True, [0.0, 0.0]),  # the KL goes into the loss instead: rewards unchanged
    ("reward", False, False, [0.0, 0.0]),  # no reference log-probs (KL weight 0): no KL
])
def test_advantages_with_the_kl_in_the_reward(where, masked, has_ref, advantages):
    samples = [Completion("", [1, 2], [3, 4], [math.log(0.5)] * 2, "length"),
               Completion("", [1, 2], [3, 5], [math.log(0.5)] * 2, "stop")]
    batch = build_batch(samples, [0.0, 0.0], pad_id=0)  # [2, 4]; columns 1, 2 predict the completions
    if masked:
        batch.mask = truncation_mask([c.finish_reason for c in samples], batch.mask)
    if has_ref:
        batch.ref_logp = batch.old_logp.clone()
        batch.ref_logp[0, 1:3] = math.log(0.25)
    algorithm = AlgorithmConfig(advantage=DR_GRPO, kl=KLConfig(coef=0.5, estimator="k1", where=where))
    scores = [GroupScores({"r": [Grade(1.0), Grade(1.0)]}, [1.0, 1.0])]
    got = batch_advantages(scores, batch, algorithm, kl_coef=0.5)
    assert got.shape == (2,)
    assert got.tolist() == pytest.approx(advantages, abs=1e-6)


def test_advantages_mask_invalid_rewards():
    batch = build_batch([Completion("", [1], [2], [0.0], "stop")] * 3, [0.0] * 3, pad_id=0)
    scores = [GroupScores({"r": [Grade(1.0), Grade(None), Grade(0.0)]}, [1.0, None, 0.0])]
    got = batch_advantages(scores, batch, AlgorithmConfig(advantage=DR_GRPO), kl_coef=0.0)
    assert got.tolist() == pytest.approx([0.5, 0.0, -0.5])  # the abstained sample: out of the mean, advantage 0


# ---- the KL coefficient -----------------------------------------------------------------------------------
@pytest.mark.parametrize("kl, cls, after", [
    (KLConfig(coef=0.1), FixedKLController, 0.1),  # fixed: update does nothing
    (KLConfig(coef=0.1, adaptive=AdaptiveKL(target=1.0, horizon=100)), AdaptiveKLController, 0.102),  # e = 0.2
])
def test_the_kl_controller_the_config_asks_for(kl, cls, after):
    ctl = make_kl_controller(kl)
    assert type(ctl) is cls and ctl.value == 0.1
    ctl.update(1.5, 10)
    assert ctl.value == pytest.approx(after)


def test_a_bad_adaptive_target_names_its_key():
    with pytest.raises(ConfigError, match="algorithm.kl.adaptive.target"):
        make_kl_controller(KLConfig(coef=0.1, adaptive=AdaptiveKL(target=0.0)))


@pytest.mark.parametrize("where, in_loss", [("loss", 0.3), ("reward", 0.0)])
def test_the_loss_has_the_controllers_kl_weight_only_with_the_kl_in_the_loss(trainer, where, in_loss):
    trainer.cfg.algorithm.kl.where = where
    trainer.kl_ctl.value = 0.3
    try:
        assert trainer.loss_config().kl_coef == in_loss
    finally:
        trainer.cfg.algorithm.kl.where = "loss"
        trainer.kl_ctl.value = 0.0


def test_the_batch_tensors_move_with_their_images():
    """TrainBatch.to: the rows of a group share one dict of image tensors, still shared after the move."""
    images = {"pixel_values": torch.ones(1, 3)}
    samples = [Completion("", [1], [2], [0.0], "stop", image_inputs=images)] * 2
    moved = build_batch(samples, [0.0, 0.0], pad_id=0).to("cpu")
    assert moved.image_inputs[0] is moved.image_inputs[1]
    assert torch.equal(moved.image_inputs[0]["pixel_values"], images["pixel_values"])
