"""From rollouts to training tensors, and per-token log-probs of a policy on them.

Sequences are prompt + completion, right-padded. Position t of the shifted layout predicts token t+1, so a
completion token at index p of its sequence lives at column p-1 of the [B, L-1] tensors below.
Rows of a vision-language model carry their prompt's image tensors (``image_inputs``), fed with the ids.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kitae.rollout.base import Completion
from kitae.rollout.hf import batch_image_inputs


@dataclass
class TrainBatch:
    input_ids: torch.Tensor  # [B, L] right-padded prompt+completion
    attention_mask: torch.Tensor  # [B, L]
    mask: torch.Tensor  # [B, L-1] 1.0 where the target token is a completion token that counts
    old_logp: torch.Tensor  # [B, L-1] sampling policy's log-probs at those positions (0 elsewhere)
    advantages: torch.Tensor  # [B]
    ref_logp: torch.Tensor | None = None  # [B, L-1] reference policy's log-probs, when KL is on
    is_weight: torch.Tensor | None = None  # [B, L-1] server engine: truncated importance weights of the sampler
    # vision-language models: per row, its prompt's image tensors (Completion.image_inputs; None for a text row)
    image_inputs: list[dict[str, torch.Tensor] | None] | None = None

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def select(self, idx: slice | torch.Tensor) -> "TrainBatch":
        ref = self.ref_logp[idx] if self.ref_logp is not None else None
        weight = self.is_weight[idx] if self.is_weight is not None else None
        return TrainBatch(
            self.input_ids[idx], self.attention_mask[idx], self.mask[idx], self.old_logp[idx], self.advantages[idx], ref,
            weight, _select_rows(self.image_inputs, idx),
        )

    def model_inputs(self) -> dict[str, torch.Tensor]:
        """The image tensors of the rows, as the model takes them with ``input_ids`` (none for text)."""
        if self.image_inputs is None:
            return {}
        return batch_image_inputs(self.image_inputs, self.input_ids.device)


def _select_rows(rows: list | None, idx: slice | torch.Tensor) -> list | None:
    if rows is None:
        return None
    if isinstance(idx, slice):
        return rows[idx]
    return [rows[i] for i in torch.as_tensor(idx).reshape(-1).tolist()]


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
    images = [c.image_inputs for c in completions] if any(c.image_inputs for c in completions) else None
    return TrainBatch(ids, attn, mask, old, torch.tensor(advantages, dtype=torch.float32), image_inputs=images)


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
                    logits_to_keep=keep, **batch.model_inputs())
    except TypeError:  # a model without logits_to_keep: all positions
        out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, **batch.model_inputs())
    logits = out.logits[:, :-1].float()  # [B, K, V]
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    K = logits.shape[1]
    targets = batch.input_ids[:, L - K :]  # [B, K]: the token each kept position predicts
    part = logits.gather(-1, targets[..., None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)  # [B, K]
    logp = torch.cat([part.new_zeros(part.shape[0], L - 1 - K), part], dim=1)  # [B, L-1]
    return logp, logits
