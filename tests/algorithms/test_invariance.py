"""Gradient accumulation invariance: with the full-batch Normalizer, micro-batch losses sum to the
full-batch loss and accumulated gradients equal the full-batch gradients (every loss, every aggregation), also
when the rows that cannot change the gradient are left out (rows_without_gradient)."""

import dataclasses

import pytest
import torch

from kitae.algorithms import (
    AGGREGATIONS,
    POLICY_LOSSES,
    LossConfig,
    LossInputs,
    LossSettings,
    Normalizer,
    policy_loss,
    rows_without_gradient,
)

B, T = 8, 6
LENGTHS = [6, 1, 4, 3, 6, 2, 5, 4]  # unequal, so token and sequence means differ


def batch() -> LossInputs:
    g = torch.Generator().manual_seed(1)
    old = -3 * torch.rand(B, T, generator=g)  # [B, T]
    # ratios between e^-0.4 and e^0.4: some tokens outside 1 +- 0.2 so clipping happens
    logp = old + 0.8 * (torch.rand(B, T, generator=g) - 0.5)  # [B, T]
    ref = old + 0.2 * torch.randn(B, T, generator=g)  # [B, T]
    mask = (torch.arange(T) < torch.tensor(LENGTHS).unsqueeze(-1)).float()  # [B, T]
    logp = torch.where(mask > 0, logp, torch.full_like(logp, -float("inf")))  # padding may hold -inf
    adv = torch.tensor([1.0, -0.5, 2.0, -1.5, 0.0, 0.7, -0.2, 1.1])  # [B]
    return LossInputs(logp.requires_grad_(True), old, adv, mask, ref)


def run(name, cfg, inp, splits, per_micro_norm=False):
    """Summed loss and accumulated d loss / d logp over micro-batches of the given sizes."""
    full = Normalizer.from_masks([inp.mask])
    total, start = 0.0, 0
    for size in splits:
        sl = slice(start, start + size)
        mb = LossInputs(inp.logp[sl], inp.old_logp[sl], inp.advantages[sl], inp.mask[sl], inp.ref_logp[sl])
        norm = Normalizer.from_masks([mb.mask]) if per_micro_norm else full
        loss, _ = policy_loss(name, mb, cfg, norm)
        loss.backward()
        total += loss.item()
        start += size
    grad = inp.logp.grad.clone()
    inp.logp.grad = None
    return total, grad


def loss_cfg(name: str, aggregation: str = "seq_mean_token_mean", **run) -> LossConfig:
    """Loss `name`'s settings with `aggregation` where the loss takes one (gspo and kimi are sequence-level) and
    gspo's clip range widened to 0.05 (its paper's 3e-4 would clip nearly every sequence of this batch)."""
    takes = {f.name for f in dataclasses.fields(LossSettings.settings_class(name, ""))}
    given = {"aggregation": aggregation} if "aggregation" in takes else {}
    if name == "gspo":
        given.update(gspo_eps_low=0.05, gspo_eps_high=0.05)
    return LossConfig.for_loss(name, max_completion_length=T, **given, **run)


@pytest.mark.parametrize("name", POLICY_LOSSES.names())
@pytest.mark.parametrize("aggregation", AGGREGATIONS.names())
@pytest.mark.parametrize("splits", [[1] * 8, [4, 4], [3, 5]], ids=["8x1", "2x4", "3+5"])
def test_micro_batches_sum_to_the_full_batch(name, aggregation, splits):
    cfg = loss_cfg(name, aggregation, kl_coef=0.1)
    inp = batch()
    full_loss, full_grad = run(name, cfg, inp, [B])
    loss, grad = run(name, cfg, inp, splits)
    assert loss == pytest.approx(full_loss, abs=1e-6)
    torch.testing.assert_close(grad, full_grad, atol=1e-6, rtol=0)
    assert full_grad.abs().sum() > 0  # something was learned, so the comparison means something


@pytest.mark.parametrize("aggregation", ["seq_mean_token_mean", "token_mean", "seq_sum_constant"])
def test_per_micro_batch_normalizer_would_break_it(aggregation):
    # control: normalizing each micro-batch by its own counts does not add up (the test above can fail)
    cfg = loss_cfg("grpo", aggregation)
    inp = batch()
    full_loss, _ = run("grpo", cfg, inp, [B])
    loss, _ = run("grpo", cfg, inp, [4, 4], per_micro_norm=True)
    assert abs(loss - full_loss) > 1e-3


# ---- several processes: DDP averages the processes' gradients -------------------------------------------
def counts(norm: Normalizer) -> torch.Tensor:
    return torch.tensor([norm.num_sequences, norm.num_tokens, norm.num_rows])


def run_processes(name, cfg, inp, shares, global_counts=True):
    """Gradient d loss / d logp as DDP makes it: each simulated process normalizes its rows, backward, and the
    processes' gradients are averaged. The all-reduce of the counts is a sum over the shares' masks."""
    local = [Normalizer.from_masks([inp.mask[sl]]) for sl in shares]
    total = sum(counts(n) for n in local)
    grads = []
    for sl, norm in zip(shares, local):
        if global_counts:
            norm = norm.over_processes(lambda t: total.clone(), len(shares))
        mb = LossInputs(inp.logp[sl], inp.old_logp[sl], inp.advantages[sl], inp.mask[sl], inp.ref_logp[sl])
        loss, _ = policy_loss(name, mb, cfg, norm)
        loss.backward()
        grads.append(inp.logp.grad.clone())
        inp.logp.grad = None
    return sum(grads) / len(grads)


@pytest.mark.parametrize("name", POLICY_LOSSES.names())
@pytest.mark.parametrize("aggregation", AGGREGATIONS.names())
def test_processes_with_uneven_token_counts_give_the_full_batch_gradient(name, aggregation):
    cfg = loss_cfg(name, aggregation, kl_coef=0.1)
    inp = batch()
    inp.mask[0] = 0.0  # a row masked out entirely (a truncated sample under overlong filtering)
    _, full_grad = run(name, cfg, inp, [B])
    grad = run_processes(name, cfg, inp, [slice(0, 3), slice(3, 8)])  # 3 rows (1 masked), 5 tokens | 5 rows, 20
    torch.testing.assert_close(grad, full_grad, atol=1e-6, rtol=0)
    assert full_grad.abs().sum() > 0


@pytest.mark.parametrize("aggregation", ["seq_mean_token_mean", "token_mean", "seq_sum_constant"])
def test_per_process_counts_would_break_it(aggregation):
    # control: each process normalizing by its own counts weights a token by how the batch was split
    cfg = loss_cfg("grpo", aggregation)
    inp = batch()
    inp.mask[0] = 0.0
    _, full_grad = run("grpo", cfg, inp, [B])
    grad = run_processes("grpo", cfg, inp, [slice(0, 3), slice(3, 8)], global_counts=False)
    assert (grad - full_grad).abs().max() > 1e-3


def test_over_processes_sums_the_counts_and_records_the_process_count():
    norm = Normalizer(num_sequences=2, num_tokens=5, num_rows=3)
    seen = []

    def all_reduce_sum(t):
        seen.append(t.tolist())
        return t + torch.tensor([1, 7, 1])  # the other process: 1 sequence, 7 tokens, 1 row

    assert norm.over_processes(all_reduce_sum, 2) == Normalizer(3, 12, 4, processes=2)
    assert seen == [[2, 5, 3]]
    assert norm.over_processes(all_reduce_sum, 1) is norm  # one process: nothing to reduce


# ---- rows that cannot change the gradient stay out of the forward/backward -------------------------------
def run_rows(name, cfg, inp, rows):
    """Summed loss and d loss / d logp over the given rows only, with the Normalizer of the whole batch."""
    norm = Normalizer.from_masks([inp.mask])
    ref = inp.ref_logp[rows] if inp.ref_logp is not None else None
    sub = LossInputs(inp.logp[rows], inp.old_logp[rows], inp.advantages[rows], inp.mask[rows], ref)
    loss, _ = policy_loss(name, sub, cfg, norm)
    loss.backward()
    grad = inp.logp.grad.clone()
    inp.logp.grad = None
    return loss.item(), grad


def zero_rows_batch() -> LossInputs:
    inp = batch()
    inp.advantages[[1, 3, 6]] = 0.0  # with row 4's 0.0: half the rows have nothing to learn from
    inp.mask[2] = 0.0  # and one row has no counted token (overlong filtering)
    return inp


@pytest.mark.parametrize("name", POLICY_LOSSES.names())
@pytest.mark.parametrize("aggregation", AGGREGATIONS.names())
@pytest.mark.parametrize("kl_coef", [0.0, 0.1], ids=["no_kl", "kl_in_loss"])
def test_skipped_rows_give_the_full_batch_loss_and_gradient(name, aggregation, kl_coef):
    cfg = loss_cfg(name, aggregation, kl_coef=kl_coef)
    inp = zero_rows_batch()
    skip = rows_without_gradient(name, inp.advantages, inp.mask, cfg)
    full_loss, full_grad = run(name, cfg, inp, [B])
    loss, grad = run_rows(name, cfg, inp, (~skip).nonzero().flatten())
    assert loss == pytest.approx(full_loss, abs=1e-6)
    torch.testing.assert_close(grad, full_grad, atol=1e-6, rtol=0)
    assert full_grad.abs().sum() > 0
    zero_advantage = name != "kimi" and not kl_coef
    assert skip.tolist() == [i in ((1, 2, 3, 4, 6) if zero_advantage else (2,)) for i in range(B)]


@pytest.mark.parametrize("case", [
    ("kimi", 0.0),  # (A - tau delta)^2: at A = 0 still tau delta^2 / 2, a pull toward the sampling policy
    ("grpo", 0.1),  # the KL term has a gradient whatever the advantage
])
def test_skipping_zero_advantage_rows_would_break_kimi_and_kl_in_the_loss(case):
    # control: rows_without_gradient keeps these rows for a reason (the test above can fail)
    name, kl_coef = case
    cfg = loss_cfg(name, kl_coef=kl_coef)
    inp = zero_rows_batch()
    _, full_grad = run(name, cfg, inp, [B])
    _, grad = run_rows(name, cfg, inp, (inp.advantages != 0).nonzero().flatten())
    assert (grad - full_grad).abs().max() > 1e-3


@pytest.mark.parametrize("aggregation", AGGREGATIONS.names())
def test_a_normalizer_of_the_kept_rows_would_break_it(aggregation):
    # control: the divisors must count the skipped rows (sequences, tokens, every row for Dr. GRPO)
    cfg = loss_cfg("grpo", aggregation)
    inp = zero_rows_batch()
    _, full_grad = run("grpo", cfg, inp, [B])
    kept = (~rows_without_gradient("grpo", inp.advantages, inp.mask, cfg)).nonzero().flatten()
    sub = LossInputs(inp.logp[kept], inp.old_logp[kept], inp.advantages[kept], inp.mask[kept])
    loss, _ = policy_loss("grpo", sub, cfg, Normalizer.from_masks([sub.mask]))
    loss.backward()
    assert (inp.logp.grad - full_grad).abs().max() > 1e-3
