"""From rollouts to training tensors, and per-token log-probs of a policy on them.

Sequences are prompt + completion, right-padded. Position t of the shifted layout predicts token t+1, so a
completion token at index p of its sequence lives at column p-1 of the [B, L-1] tensors below.

The update runs over micro-batches of rows of similar length (:func:`micro_batches`), each cut to its own
longest row, so short samples do not pay for the long ones' padding; with the optimizer-batch Normalizer the
gradient is the same however the rows are grouped (kitae.algorithms.losses).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

import torch

from kitae.rollout.base import Completion


@dataclass
class TrainBatch:
    input_ids: torch.Tensor  # [B, L] right-padded prompt+completion
    attention_mask: torch.Tensor  # [B, L]
    mask: torch.Tensor  # [B, L-1] 1.0 where the target token is a completion token that counts
    old_logp: torch.Tensor  # [B, L-1] sampling policy's log-probs at those positions (0 elsewhere)
    advantages: torch.Tensor  # [B]
    ref_logp: torch.Tensor | None = None  # [B, L-1] reference policy's log-probs, when KL is on

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def select(self, idx: slice | torch.Tensor) -> "TrainBatch":
        ref = self.ref_logp[idx] if self.ref_logp is not None else None
        return TrainBatch(
            self.input_ids[idx], self.attention_mask[idx], self.mask[idx], self.old_logp[idx], self.advantages[idx], ref
        )

    def trimmed(self) -> "TrainBatch":
        """The same rows without the padding columns right of the longest row (the rows are right-padded)."""
        attended = self.attention_mask.any(dim=0).nonzero()
        L = self.input_ids.shape[1]
        width = min(L, max(2, int(attended[-1]) + 1 if len(attended) else 2))
        if width == L:
            return self

        def cut(t: torch.Tensor | None) -> torch.Tensor | None:  # [B, L] and [B, L-1] columns; [B] stays
            return t if t is None or t.dim() < 2 else t[:, : width - (L - t.shape[1])]

        return TrainBatch(*(cut(getattr(self, f.name)) for f in dataclasses.fields(self)))

    def padded_tokens(self) -> tuple[int, int]:
        """(positions the forward computes, those of them that are padding)."""
        total = self.input_ids.numel()
        return total, total - int(self.attention_mask.sum())


def build_batch(completions: list[Completion], advantages: list[float], pad_id: int, counted: list[bool]) -> TrainBatch:
    """Tensors for the policy update. `counted[i]` False drops sample i from the loss (e.g. truncated)."""
    width = max(len(c.prompt_ids) + len(c.completion_ids) for c in completions)
    B = len(completions)
    ids = torch.full((B, width), pad_id, dtype=torch.long)
    attn = torch.zeros((B, width), dtype=torch.long)
    mask = torch.zeros((B, width - 1))
    old = torch.zeros((B, width - 1))
    for i, c in enumerate(completions):
        p, t = len(c.prompt_ids), len(c.completion_ids)
        ids[i, : p + t] = torch.tensor(c.prompt_ids + c.completion_ids)
        attn[i, : p + t] = 1
        if counted[i] and t:
            mask[i, p - 1 : p - 1 + t] = 1.0
            old[i, p - 1 : p - 1 + t] = torch.tensor(c.logprobs)
    return TrainBatch(ids, attn, mask, old, torch.tensor(advantages, dtype=torch.float32))


# What one more micro-batch costs, in padded tokens: its own forward and backward calls (measured in
# docs/performance.md); :func:`plan_micro_batches` splits a batch only where that saves more padding.
MICRO_BATCH_OVERHEAD_TOKENS = 32


def plan_micro_batches(
    lengths: Sequence[int], max_rows: int, overhead_tokens: int = MICRO_BATCH_OVERHEAD_TOKENS
) -> list[list[int]]:
    """Row indices of each micro-batch: the rows sorted by length, longest first, cut into runs of at most
    ``max_rows`` so that the computed positions (each run's rows x its longest row) plus ``overhead_tokens`` per
    run are fewest (dynamic programming over the cut points).

    >>> plan_micro_batches([10, 50, 12, 48], max_rows=4, overhead_tokens=8)  # 2 x 50 + 2 x 12 + 16 < 4 x 50 + 8
    [[1, 3], [2, 0]]
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    longest = [lengths[i] for i in order]  # longest[i]: the width of a run that starts at sorted row i
    best, cut = [0] + [0] * len(order), [0] * (len(order) + 1)
    for end in range(1, len(order) + 1):
        options = ((best[s] + longest[s] * (end - s) + overhead_tokens, s) for s in range(max(0, end - max_rows), end))
        best[end], cut[end] = min(options)
    runs, end = [], len(order)
    while end > 0:
        runs.append(order[cut[end]:end])
        end = cut[end]
    return runs[::-1]


def micro_batch_rows(batch: "TrainBatch", max_rows: int, rows: Sequence[int] | None = None) -> list[list[int]]:
    """Row indices of ``batch`` (or of its ``rows`` only) per micro-batch: :func:`plan_micro_batches` over
    the rows' lengths (prompt + completion)."""
    rows = list(range(len(batch))) if rows is None else list(rows)
    lengths = batch.attention_mask[rows].sum(dim=-1).tolist() if rows else []
    return [[rows[i] for i in run] for run in plan_micro_batches(lengths, max_rows)]


def micro_batches(batch: "TrainBatch", max_rows: int, rows: Sequence[int] | None = None) -> list["TrainBatch"]:
    """``batch`` (or only its ``rows``) as micro-batches of similar-length rows, each trimmed to its longest."""
    return [batch.select(torch.tensor(r, device=batch.input_ids.device)).trimmed()
            for r in micro_batch_rows(batch, max_rows, rows)]


def token_logps(model, batch: TrainBatch, temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probs [B, L-1] of each next token under logits / T, logits [B, K, V] of the last K of those positions).

    The temperature matches the rollout engine's log-probs, so old and new form a proper ratio. Only positions
    from the first counted token on get logits (``logits_to_keep``, as TRL does): the prompt-only columns to
    the left cost no LM-head activations and are 0 in the log-probs (the mask drops them anyway). Callers
    align the logits with ``mask[:, -K:]``. No KV cache is built (``use_cache=False``).
    """
    L = batch.input_ids.shape[1]
    counted = batch.mask.any(0).nonzero()
    start = int(counted[0]) if len(counted) else L - 2  # the first position that predicts a counted token
    keep = L - start  # positions start .. L-1; the last one (predicting past the end) is dropped below
    try:
        out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False,
                    logits_to_keep=keep)
    except TypeError:  # a model without logits_to_keep: all positions
        out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask)
    logits = out.logits[:, :-1].float()  # [B, K, V]
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    K = logits.shape[1]
    targets = batch.input_ids[:, L - K :]  # [B, K]: the token each kept position predicts
    part = logits.gather(-1, targets[..., None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)  # [B, K]
    logp = torch.cat([part.new_zeros(part.shape[0], L - 1 - K), part], dim=1)  # [B, L-1]
    return logp, logits
