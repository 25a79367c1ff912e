"""The learning-rate schedule (kitae.trainer.setup.lr_factor): its value at every step, as the trainer's scheduler
steps, across a resume from a checkpoint and with a new lr or schedule on resume; and why it is not
transformers' ``get_scheduler`` (whose warm-up starts at lr 0, one optimizer step later than ours)."""

from __future__ import annotations

import math

import pytest
import torch

from kitae.trainer.config import OptimConfig
from kitae.trainer.setup import apply_optim_config, lr_factor, make_optimizer

C = 0.5 + 0.25 * math.sqrt(2)  # 0.5 (1 + cos(pi / 4))
S = 0.5 - 0.25 * math.sqrt(2)  # 0.5 (1 + cos(3 pi / 4))

# optim.steps 6; the factor after 0, 1, ..., 6 scheduler steps (optimizer step k runs with the one after k - 1)
TABLE = [
    ("constant", 0, [1, 1, 1, 1, 1, 1, 1]),
    ("constant", 2, [1 / 2, 1, 1, 1, 1, 1, 1]),  # warm-up: 1/2, then the full lr from the second step on
    ("linear", 0, [1, 5 / 6, 4 / 6, 3 / 6, 2 / 6, 1 / 6, 0]),
    ("linear", 2, [1 / 2, 1, 1, 3 / 4, 2 / 4, 1 / 4, 0]),  # to 0 over the 4 steps after the warm-up
    ("cosine", 0, [1, 0.5 + 0.5 * math.cos(math.pi / 6), 0.75, 0.5, 0.25, 0.5 - 0.5 * math.cos(math.pi / 6), 0]),
    ("cosine", 2, [1 / 2, 1, 1, C, 0.5, S, 0]),
]


def _optimizer(o: OptimConfig):
    model = torch.nn.Linear(2, 1)
    return model, *make_optimizer(model, o)


@pytest.mark.parametrize("scheduler, warmup, factors", TABLE)
def test_the_lr_at_every_step(scheduler, warmup, factors):
    o = OptimConfig(steps=6, warmup_steps=warmup, scheduler=scheduler, lr=1e-3)
    assert [lr_factor(o, s) for s in range(7)] == pytest.approx(factors, abs=1e-12)
    model, optimizer, sched = _optimizer(o)
    seen = []
    for _ in range(7):
        seen.append(optimizer.param_groups[0]["lr"])  # what the next optimizer step uses
        optimizer.step()
        sched.step()
    assert seen == [1e-3 * lr_factor(o, s) for s in range(7)]  # exactly lr x factor


@pytest.mark.parametrize("scheduler, warmup, factors", TABLE)
def test_transformers_get_scheduler_warms_up_one_step_later(scheduler, warmup, factors):
    """Why the schedule is not transformers.get_scheduler: with a warm-up its first optimizer step runs at lr 0
    (step / warmup_steps, ours (step + 1) / warmup_steps), and its linear decay, (n - k) / n, is not ours,
    1 - k / n, to the last bit; a switch would change every run that warms up."""
    from transformers import get_scheduler

    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1.0)
    name = "constant_with_warmup" if scheduler == "constant" else scheduler
    theirs = get_scheduler(name, optimizer, num_warmup_steps=warmup, num_training_steps=6)
    got = []
    for _ in range(7):
        got.append(theirs.get_last_lr()[0])
        optimizer.step()
        theirs.step()
    assert got[warmup:] == pytest.approx(factors[warmup:], abs=1e-12)  # the same after the warm-up ...
    assert got[:warmup] == [s / warmup for s in range(warmup)]  # ... one step behind during it
    if warmup:
        assert got[0] == 0 and factors[0] > 0


def test_a_scheduler_state_saved_before_resumes_the_same_schedule():
    """Checkpoints hold the scheduler's state_dict; one written when the schedule was a bound method of the
    trainer (as before kitae.trainer.setup) loads, and the lr goes on as if never interrupted."""
    o = OptimConfig(steps=6, warmup_steps=2, scheduler="cosine", lr=1e-3)

    class OldTrainer:  # the schedule as the trainer built it before: LambdaLR(optimizer, self._lr_factor)
        def _lr_factor(self, step: int) -> float:
            return lr_factor(o, step)

    model = torch.nn.Linear(2, 1)
    old_opt = torch.optim.AdamW(model.parameters(), lr=o.lr)
    old = torch.optim.lr_scheduler.LambdaLR(old_opt, OldTrainer()._lr_factor)
    for _ in range(3):
        old_opt.step()
        old.step()
    _, optimizer, sched = _optimizer(o)
    optimizer.load_state_dict(old_opt.state_dict())
    sched.load_state_dict(old.state_dict())
    apply_optim_config(optimizer, sched, o)  # as a resume does: the same config, the same values
    seen = []
    for _ in range(4):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        sched.step()
    assert seen == [1e-3 * lr_factor(o, s) for s in range(3, 7)]


def test_a_new_lr_and_schedule_on_resume_take_effect_from_the_next_step():
    """--allow-config-change with a new lr and scheduler: the restored step count, the new lr x new factor."""
    before = OptimConfig(steps=6, warmup_steps=2, scheduler="constant", lr=1e-3)
    after = OptimConfig(steps=6, warmup_steps=2, scheduler="linear", lr=5e-4)
    _, opt_a, sched_a = _optimizer(before)
    for _ in range(3):
        opt_a.step()
        sched_a.step()
    _, optimizer, sched = _optimizer(after)
    optimizer.load_state_dict(opt_a.state_dict())
    sched.load_state_dict(sched_a.state_dict())  # base_lrs [1e-3] and last_epoch 3 restored
    apply_optim_config(optimizer, sched, after)
    assert sched.base_lrs == [5e-4]
    seen = []
    for _ in range(4):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        sched.step()
    assert seen == pytest.approx([5e-4 * f for f in (3 / 4, 2 / 4, 1 / 4, 0)], abs=1e-15)
