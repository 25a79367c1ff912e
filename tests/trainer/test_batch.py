"""The policy-update batch: right-padded rows, and log-probs computed only where tokens count."""

from __future__ import annotations

import pytest
import torch

from kitae.algorithms import masked_entropy
from kitae.rollout.base import Completion
from kitae.algorithms import truncation_mask
from kitae.trainer.batch import (
    build_batch,
    mask_earlier_segments,
    micro_batch_rows,
    micro_batches,
    pack,
    packed_logps,
    plan_families,
    plan_micro_batches,
    token_logps,
)
from tests.tiny import tiny_llama


def completion(prompt: list[int], tokens: list[int]) -> Completion:
    return Completion("", prompt, tokens, [0.0] * len(tokens), "stop")


def full_forward_logps(model, batch) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs [B, L-1] and logits [B, L-1, V] from a plain forward over every position."""
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1].float()
    targets = batch.input_ids[:, 1:]
    return logits.gather(-1, targets[..., None]).squeeze(-1) - torch.logsumexp(logits, -1), logits


def test_logps_match_a_full_forward_where_tokens_count():
    model = tiny_llama(64).eval()
    rows = [completion([1, 2, 3, 4, 5, 6], [7, 8]), completion([1, 2, 3, 4], [9, 10, 11, 12]),
            completion([5, 6, 7, 8, 9], [])]  # prompts of 6, 4 and 5 tokens; the last has no completion
    batch = build_batch(rows, [0.0] * 3, pad_id=0)
    logp, entropy = token_logps(model, batch)
    want, want_logits = full_forward_logps(model, batch)
    assert logp.shape == entropy.shape == want.shape == (3, 7)
    torch.testing.assert_close(logp * batch.mask, want * batch.mask, atol=1e-5, rtol=1e-5)
    # the first counted token is row 1's first completion token, predicted at position 3: nothing left of it
    assert torch.all(logp[:, :3] == 0) and torch.all(entropy[:, :3] == 0)  # prompt-only columns (masked out anyway)
    want_entropy = torch.logsumexp(want_logits, -1) - (want_logits.softmax(-1) * want_logits).sum(-1)  # [B, L-1]
    torch.testing.assert_close(entropy[:, 3:], want_entropy[:, 3:], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close((entropy * batch.mask).sum() / batch.mask.sum(), masked_entropy(want_logits, batch.mask),
                               atol=1e-5, rtol=1e-5)


def test_gradients_match_a_full_forward():
    model = tiny_llama(64)
    rows = [completion([1, 2, 3], [4, 5, 6]), completion([1, 2, 3, 4, 5], [6, 7])]
    batch = build_batch(rows, [0.0] * 2, pad_id=0)
    (token_logps(model, batch)[0] * batch.mask).sum().backward()
    kept = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    (full_forward_logps(model, batch)[0] * batch.mask).sum().backward()
    for got, want in zip(kept, (p.grad for p in model.parameters())):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_temperature_scales_the_logits():
    model = tiny_llama(64).eval()
    batch = build_batch([completion([1, 2], [3, 4])], [0.0], pad_id=0)
    logits = model(input_ids=batch.input_ids).logits[:, :-1] / 2.0
    want = logits.gather(-1, batch.input_ids[:, 1:, None]).squeeze(-1) - torch.logsumexp(logits, -1)
    torch.testing.assert_close(token_logps(model, batch, temperature=2.0)[0][:, 1:], want[:, 1:])


# ---- micro-batches of similar length ------------------------------------------------------------------------
@pytest.mark.parametrize("lengths, max_rows, overhead, want", [
    ([10, 50, 12, 48], 4, 8, [[1, 3], [2, 0]]),  # 2 x 50 + 2 x 12 + 2 x 8 = 140 < 4 x 50 + 8 = 208
    ([10, 50, 12, 48], 4, 100, [[1, 3, 2, 0]]),  # splitting costs more than the 76 padded positions it saves
    ([7, 7, 7, 7, 7], 2, 1, [[0], [1, 2], [3, 4]]),  # equal lengths: only max_rows cuts
    ([30, 5, 29, 6, 28], 8, 10, [[0, 2, 4], [3, 1]]),  # longest first, sorted within a run
    ([], 4, 8, []),
])
def test_plan_micro_batches(lengths, max_rows, overhead, want):
    assert plan_micro_batches(lengths, max_rows, overhead) == want


def test_micro_batches_keep_every_row_once_trimmed_to_their_longest():
    rows = [completion([1] * p, [2] * t) for p, t in [(3, 9), (5, 1), (2, 10), (4, 2), (3, 0)]]
    batch = build_batch(rows, [0.5, -0.5, 1.0, -1.0, 0.0], pad_id=0)
    batch.ref_logp = torch.randn(batch.mask.shape)
    parts = micro_batches(batch, max_rows=2, rows=[0, 1, 2, 3])  # row 4 left out
    assert sorted(float(a) for mb in parts for a in mb.advantages) == [-1.0, -0.5, 0.5, 1.0]
    for mb in parts:
        width = int(mb.attention_mask.sum(-1).max())
        assert mb.input_ids.shape[1] == width and mb.mask.shape[1] == mb.ref_logp.shape[1] == width - 1
    assert [mb.input_ids.shape[1] for mb in parts] == [12, 6]  # (12, 12) and (6, 6): no padding left
    assert sum(mb.padded_tokens()[1] for mb in parts) == 0 < batch.padded_tokens()[1]


# ---- packing: the samples of one prompt in one sequence, their common prefix once --------------------------
def group_batch():
    prompt = [1, 2, 3, 4, 5]
    rows = [completion(prompt, t) for t in ([6, 7, 8], [6, 7, 9, 10], [6], [6, 7, 8])]  # all share 6: prefix 6
    rows += [completion([1, 2, 9], t) for t in ([3, 4], [5])]  # another prompt
    return build_batch(rows, [0.0] * 6, pad_id=0)


def test_packed_logps_equal_each_row_alone():
    model = tiny_llama(64).eval()
    batch = group_batch()
    packed = pack(batch, [[0, 1, 2, 3], [4, 5]])
    # [1..5 6] + [7 8] + [7 9 10] + [] + [7 8]; [1 2 9] + [3 4] + [5]: 12 and 6 positions instead of 32
    assert packed.input_ids[0].tolist() == [1, 2, 3, 4, 5, 6, 7, 8, 7, 9, 10, 7, 8]
    assert packed.position_ids[0].tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 6, 7, 8, 6, 7]
    assert packed.padded_tokens() == (26, 26 - 19)
    logp, entropy = packed_logps(model, packed)
    want, want_entropy = token_logps(model, batch)
    mask = packed.rows.mask
    torch.testing.assert_close(logp * mask, want[:, : logp.shape[1]] * mask, atol=1e-5, rtol=0)
    torch.testing.assert_close(entropy * mask, want_entropy[:, : logp.shape[1]] * mask, atol=1e-5, rtol=0)
    assert torch.all(entropy[mask == 0] == 0)  # computed at the counted tokens only


def test_a_packed_row_never_sees_the_other_rows():
    model = tiny_llama(64).eval()
    batch = group_batch()
    before, _ = packed_logps(model, pack(batch, [[0, 1, 2, 3]]))
    batch.input_ids[1, 7:9] = torch.tensor([11, 12])  # row 1's own tokens change
    after, _ = packed_logps(model, pack(batch, [[0, 1, 2, 3]]))
    torch.testing.assert_close(after[[0, 2, 3]], before[[0, 2, 3]], atol=1e-6, rtol=0)
    assert not torch.allclose(after[1], before[1])


def test_families_pack_only_where_that_costs_less():
    batch = group_batch()
    assert plan_families(batch, range(6), group_size=4, max_rows=8) == [[0, 1, 2, 3], [4, 5]]
    assert plan_families(batch, range(6), group_size=4, max_rows=3) == [[0, 1, 2], [3], [4, 5]]
    # a one-token prompt before 8 tokens each: 33 positions packed instead of 36, but with attention that dear
    # one sequence of 33 costs more (33 + 33^2) than four of 9 (4 x (9 + 9^2))
    long_tails = build_batch([completion([1], [2 + k] * 8) for k in range(4)], [0.0] * 4, pad_id=0)
    assert plan_families(long_tails, range(4), group_size=4, max_rows=8) == [[0, 1, 2, 3]]
    assert plan_families(long_tails, range(4), group_size=4, max_rows=8, attention=1.0) == [[0], [1], [2], [3]]


# ---- an agent's episodes: the loss mask survives every reshaping of the batch ------------------------------
def episode(prompt: list[int], mask: list[int]) -> Completion:
    tokens = [20 + i for i in range(len(mask))]
    return Completion("", prompt, tokens, [-1.0 * m for m in mask], "stop", loss_mask=mask)


def episode_batch():
    rows = [episode([1, 2, 3], [1, 1, 0, 0, 0, 1]), episode([1, 2, 3], [1, 0, 0, 1, 1, 1, 1, 0, 1]),
            completion([1, 2, 3], [7, 8]), episode([4, 5], [0, 1])]  # a one-turn row has no mask: all trained
    return build_batch(rows, [1.0, -1.0, 0.5, 0.0], pad_id=0), rows


def row_mask(batch, i: int, prompt_len: int, n: int) -> list[int]:
    return [int(x) for x in batch.mask[i, prompt_len - 1 : prompt_len - 1 + n].tolist()]


def test_build_batch_puts_the_loss_mask_in_and_nothing_else():
    batch, rows = episode_batch()
    for i, c in enumerate(rows):
        want = c.loss_mask or [1] * len(c.completion_ids)
        assert row_mask(batch, i, len(c.prompt_ids), len(c.completion_ids)) == want
        assert int(batch.mask[i].sum()) == c.sampled_tokens  # no prompt or padding column counts
    assert torch.all(batch.old_logp[batch.mask == 0] == 0.0)  # tool tokens carry log-prob 0.0


def test_micro_batches_and_trimming_keep_each_rows_mask():
    batch, rows = episode_batch()
    parts = micro_batch_rows(batch, max_rows=2)
    for run, mb in zip(parts, micro_batches(batch, max_rows=2)):
        for k, i in enumerate(run):
            c = rows[i]
            assert row_mask(mb, k, len(c.prompt_ids), len(c.completion_ids)) == (c.loss_mask or [1] * 2)
            assert mb.mask[k].sum() == batch.mask[i].sum()
    assert sorted(i for run in parts for i in run) == [0, 1, 2, 3]


def test_packing_counts_only_the_sampled_tokens_of_each_row():
    batch, rows = episode_batch()
    packed = pack(batch, [[0, 1, 2], [3]])  # rows 0 and 1 share the prompt and their first sampled token
    assert torch.equal(packed.rows.mask, batch.select(torch.tensor([0, 1, 2, 3])).trimmed().mask)
    counted = {(int(r), int(c)) for r, c in zip(*packed.cols)}
    assert counted == {(r, int(c)) for r, c in packed.rows.mask.nonzero().tolist()}
    assert len(packed.targets) == sum(c.sampled_tokens for c in rows)


def test_truncation_and_earlier_segments_never_bring_tool_tokens_back():
    batch, rows = episode_batch()
    cut = truncation_mask(["stop", "length", "stop", "stop"], batch.mask)
    assert int(cut[1].sum()) == 0 and torch.equal(cut[0], batch.mask[0])
    rows[0].earlier_tokens = 3  # partial rollouts: the first three tokens were sampled in an earlier segment
    mask_earlier_segments(batch, rows)
    assert row_mask(batch, 0, 3, 6) == [0, 0, 0, 0, 0, 1]
