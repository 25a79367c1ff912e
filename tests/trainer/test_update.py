"""The trainer's policy update does less work for the same step: rows that cannot change the gradient stay out
of the forward/backward, and rows of similar length share a micro-batch trimmed to its longest row. Each test
compares against the update that runs every row in one padded batch."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from kitae.algorithms import LossInputs, LossSettings, Normalizer, policy_loss
from kitae.trainer.batch import token_logps
from kitae.trainer.config import load_train_config
from kitae.trainer.loop import Trainer
from tests.plugins.tiny_run import write_config
from tests.trainer.grad_probe import LOSSES, full_batch

ZERO = (1, 4, 5)  # rows given advantage 0; row 6 has no counted token (grad_probe.MASKED)


@pytest.fixture
def trainer(tiny_assets, tmp_path, rewards_on_path):
    over = {"optim.micro_batch_size": 8, "optim.max_grad_norm": 1e9, "data.eval": None}
    return Trainer(load_train_config(write_config(tiny_assets, tmp_path, **over)))


def use_loss(trainer: Trainer, loss: str, **settings) -> None:
    """Switch the trainer to `loss` with the `settings` given that it takes (gspo and kimi have no aggregation) and
    its own defaults for the rest."""
    takes = {f.name for f in dataclasses.fields(LossSettings.settings_class(loss, ""))}
    given = {k: v for k, v in settings.items() if k in takes}
    settings = LossSettings.read({"type": loss, **given}, "")
    trainer.cfg.algorithm = dataclasses.replace(trainer.cfg.algorithm, loss=settings)


def update(trainer: Trainer, batch, loss: str, skip: bool, **algorithm) -> tuple[list[torch.Tensor], dict]:
    """The gradient `update.optimize` would step with (the optimizer does not step) and its metrics."""
    grads: list[list[torch.Tensor]] = []
    trainer.optimizer.step = lambda *a, **k: grads.append([p.grad.detach().clone() for p in trainer.model.parameters()])
    use_loss(trainer, loss, **algorithm)
    trainer.cfg.optim.skip_zero_advantage = skip
    metrics = trainer.update.optimize(batch, trainer.loss_config())
    return grads.pop(), metrics


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("aggregation", ["seq_mean_token_mean", "token_mean", "seq_sum_constant"])
def test_skipping_zero_advantage_rows_gives_the_full_batch_gradient(trainer, loss, aggregation):
    batch = full_batch(trainer, ZERO)
    want, full = update(trainer, batch, loss, skip=False, aggregation=aggregation)
    got, skipped = update(trainer, batch, loss, skip=True, aggregation=aggregation)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, atol=1e-6, rtol=1e-5)
    assert skipped["loss"] == pytest.approx(full["loss"], abs=1e-6)
    assert max(float(w.abs().max()) for w in want) > 1e-3  # a gradient worth comparing
    assert full["skipped_rows"] == 0
    # kimi's (A - tau delta)^2 pulls toward the sampling policy at A = 0 too: only the masked row goes
    assert skipped["skipped_rows"] == (1 if loss == "kimi" else len(ZERO) + 1)


def test_with_kl_in_the_loss_zero_advantage_rows_stay(trainer):
    batch = full_batch(trainer, ZERO)
    batch.ref_logp = batch.old_logp - 0.1 * batch.mask  # a reference policy the current one has moved from
    trainer.kl_ctl.value = 0.5
    trainer.cfg.algorithm.kl.coef = 0.5
    want, _ = update(trainer, batch, "grpo", skip=False)
    got, metrics = update(trainer, batch, "grpo", skip=True)
    assert trainer.loss_config().kl_coef == 0.5
    assert metrics["skipped_rows"] == 1  # the masked row only: the KL term has a gradient on the others
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, atol=1e-6, rtol=1e-5)


def test_a_batch_with_nothing_to_learn_still_steps_the_optimizer_as_the_full_batch_would(trainer):
    """No forward at all, but AdamW's momentum from the step before still moves the weights, exactly as after a
    backward whose gradient is all zero."""
    learn, nothing = full_batch(trainer), full_batch(trainer, tuple(range(8)))
    start = [p.detach().clone() for p in trainer.model.parameters()]
    after = []
    for skip in (False, True):
        with torch.no_grad():
            for p, p0 in zip(trainer.model.parameters(), start):
                p.copy_(p0)
        trainer.optimizer.state.clear()
        trainer.cfg.optim.skip_zero_advantage = skip
        trainer.update.optimize(learn, trainer.loss_config())
        metrics = trainer.update.optimize(nothing, trainer.loss_config())
        after.append(([p.detach().clone() for p in trainer.model.parameters()], metrics))
    (full, full_metrics), (skipped, skipped_metrics) = after
    assert full_metrics["skipped_rows"] == 0 and skipped_metrics["skipped_rows"] == 8
    assert skipped_metrics["grad_norm"] == full_metrics["grad_norm"] == 0.0
    for p_skip, p_full, p0 in zip(skipped, full, start, strict=True):
        torch.testing.assert_close(p_skip, p_full, atol=1e-6, rtol=0)  # without the zero step: ~lr apart
    assert any(not torch.equal(p, p0) for p, p0 in zip(skipped, start))  # the weights did move


@pytest.mark.parametrize("loss", ["grpo", "dr_grpo", "gspo"])
@pytest.mark.parametrize("micro_batch_size", [8, 3])
def test_packed_micro_batches_give_the_one_padded_batch_gradient_with_less_padding(trainer, loss, micro_batch_size):
    """The trainer packs each prompt's samples into one sequence (their common prefix once) and groups
    sequences of similar length; against all 8 rows in one forward, padded to the longest (the update before
    packing), computed here directly."""
    batch = full_batch(trainer)
    use_loss(trainer, loss)
    logp, _ = token_logps(trainer.model, batch, trainer.cfg.sampling.temperature)
    inp = LossInputs(logp, batch.old_logp, batch.advantages, batch.mask)
    policy_loss(loss, inp, trainer.loss_config(), Normalizer.from_masks([batch.mask]))[0].backward()
    want = [p.grad.clone() for p in trainer.model.parameters()]
    trainer.model.zero_grad(set_to_none=True)
    trainer.cfg.optim.micro_batch_size = micro_batch_size
    got, metrics = update(trainer, batch, loss, skip=False)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, atol=1e-6, rtol=1e-5)
    chunks = trainer.update.plan(batch, trainer.loss_config()).micro_batches
    computed, padding = (sum(mb.padded_tokens()[k] for mb in chunks) for k in (0, 1))
    assert computed < batch.input_ids.numel()
    # 69 tokens; each family's shared prefix (5 and 6 tokens) once: families of 4 rows, or of 3 and 1
    assert computed - padding == {8: 69 - 3 * 5 - 3 * 6, 3: 69 - 2 * 5 - 2 * 6}[micro_batch_size]
    assert metrics["pad_frac"] == pytest.approx(padding / computed)


def poison_gradient(trainer: Trainer, value: float):
    """A backward hook that writes `value` into one element of the first weight's gradient (a NaN or inf as a bad
    batch makes it); returns the hook's handle."""
    param = next(p for p in trainer.model.parameters() if p.requires_grad)

    def hook(grad: torch.Tensor) -> torch.Tensor:
        grad = grad.clone()
        grad.view(-1)[0] = value
        return grad

    return param.register_hook(hook)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_a_step_with_a_non_finite_gradient_is_skipped_and_counted(trainer, bad):
    """The optimizer does not step: the weights and the optimizer's state are bit-identical, the gradient is
    cleared, the step is counted; the next step with a finite gradient trains as usual."""
    batch = full_batch(trainer)
    trainer.update.optimize(batch, trainer.loss_config())  # a first step: AdamW has momentum to apply
    weights = [p.detach().clone() for p in trainer.model.parameters()]
    moments = [s["exp_avg"].clone() for s in trainer.optimizer.state.values()]
    handle = poison_gradient(trainer, bad)
    try:
        metrics = trainer.update.optimize(batch, trainer.loss_config())
    finally:
        handle.remove()
    for p, w in zip(trainer.model.parameters(), weights, strict=True):
        assert torch.equal(p, w)
    for s, m in zip(trainer.optimizer.state.values(), moments, strict=True):
        assert torch.equal(s["exp_avg"], m)
    assert all(p.grad is None for p in trainer.model.parameters())
    assert metrics["skipped_steps"] == 1.0 and trainer.update.skipped_steps == 1
    assert not math.isfinite(metrics["grad_norm"])
    metrics = trainer.update.optimize(batch, trainer.loss_config())
    assert metrics["skipped_steps"] == 0.0 and trainer.update.skipped_steps == 1
    assert math.isfinite(metrics["grad_norm"]) and metrics["grad_norm"] > 0
    assert any(not torch.equal(p, w) for p, w in zip(trainer.model.parameters(), weights))


def test_a_skipped_step_is_logged_and_recorded_in_the_run_store(trainer):
    handle = poison_gradient(trainer, float("nan"))
    try:
        metrics = trainer.train_step(1)
    finally:
        handle.remove()
    assert metrics["skipped_steps"] == 1.0
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())
    events = [e for e in trainer.store.events() if e["kind"] == "step_skipped"]
    assert [e["step"] for e in events] == [1] and "not finite" in events[0]["message"]
    assert events[0]["data"]["skipped_steps"] == 1
    assert trainer.store.metrics(["skipped_steps"]) == {"skipped_steps": [(1, 1.0)]}
