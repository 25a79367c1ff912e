"""From rollouts to training tensors, and per-token log-probs of a policy on them.

Sequences are prompt + completion, right-padded. Position t of the shifted layout predicts token t+1, so a
completion token at index p of its sequence lives at column p-1 of the [B, L-1] tensors below.
Rows of a vision-language model carry their prompt's image tensors (``image_inputs``), fed with the ids.
An agent's episode (kitae.rollout.trajectory) is one row: every token after the prompt is in the ids (context),
and ``mask`` is its loss mask, so tool results and template tokens are never a target; lengths that size the
tensors and plan the micro-batches count every token, the loss counts the masked ones.

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
from kitae.rollout.hf import batch_image_inputs
from kitae.trainer.logprobs import DEFAULT_CHUNK_SIZE, chosen_logps, hidden_or_logits, logits_logps


@dataclass
class TrainBatch:
    input_ids: torch.Tensor  # [B, L] right-padded prompt+completion
    attention_mask: torch.Tensor  # [B, L]
    mask: torch.Tensor  # [B, L-1] 1.0 where the target token is a completion token that counts
    old_logp: torch.Tensor  # [B, L-1] sampling policy's log-probs of the completion tokens (0 elsewhere; they
    # count only where mask is 1)
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

    def trimmed(self) -> "TrainBatch":
        """The same rows without the padding columns right of the longest row (the rows are right-padded)."""
        attended = self.attention_mask.any(dim=0).nonzero()
        L = self.input_ids.shape[1]
        width = min(L, max(2, int(attended[-1]) + 1 if len(attended) else 2))
        if width == L:
            return self

        def cut(t):  # [B, L] and [B, L-1] columns; [B] and the rows' image tensors stay
            return t if not isinstance(t, torch.Tensor) or t.dim() < 2 else t[:, : width - (L - t.shape[1])]

        return TrainBatch(*(cut(getattr(self, f.name)) for f in dataclasses.fields(self)))

    def padded_tokens(self) -> tuple[int, int]:
        """(positions the forward computes, those of them that are padding)."""
        total = self.input_ids.numel()
        return total, total - int(self.attention_mask.sum())

    def to(self, device) -> "TrainBatch":
        """The same rows on ``device``; the rows of a group share one dict of image tensors, moved once."""
        out = TrainBatch(*(t.to(device) if t is not None else None for t in (
            self.input_ids, self.attention_mask, self.mask, self.old_logp, self.advantages, self.ref_logp,
            self.is_weight)))
        if self.image_inputs is not None:
            moved = {id(x): {k: v.to(device) for k, v in x.items()} for x in self.image_inputs if x is not None}
            out.image_inputs = [moved[id(x)] if x is not None else None for x in self.image_inputs]
        return out


def _select_rows(rows: list | None, idx: slice | torch.Tensor) -> list | None:
    if rows is None:
        return None
    if isinstance(idx, slice):
        return rows[idx]
    idx = torch.as_tensor(idx)
    if idx.dtype == torch.bool:  # a row mask
        idx = idx.nonzero()
    return [rows[i] for i in idx.reshape(-1).tolist()]


def build_batch(completions: list[Completion], advantages: list[float], pad_id: int) -> TrainBatch:
    """Tensors for the policy update: every completion token counts (``mask``), with the sampler's log-probs.
    Callers take tokens out of the loss by zeroing the mask: truncated samples
    (:func:`kitae.algorithms.losses.truncation_mask`), earlier segments (:func:`mask_earlier_segments`)."""
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
        if t:  # an episode's tool results and template tokens (loss_mask 0) stay context, never trained
            mask[i, p - 1 : p - 1 + t] = 1.0 if c.loss_mask is None else torch.tensor(c.loss_mask, dtype=torch.float32)
            old[i, p - 1 : p - 1 + t] = torch.tensor(c.logprobs)
    images = [c.image_inputs for c in completions] if any(c.image_inputs for c in completions) else None
    return TrainBatch(ids, attn, mask, old, torch.tensor(advantages, dtype=torch.float32), image_inputs=images)


def mask_earlier_segments(batch: TrainBatch, completions: list[Completion]) -> None:
    """Partial rollouts, ``old_segments: exclude``: tokens sampled before a trajectory's last segment leave the
    loss (they stay in the input as context)."""
    for i, c in enumerate(completions):
        p = len(c.prompt_ids)
        batch.mask[i, p - 1 : p - 1 + c.earlier_tokens] = 0.0  # [L-1] columns of those tokens


# What one more micro-batch costs, in positions: its own forward and backward calls (measured in
# docs/performance.md); :func:`plan_micro_batches` splits a batch only where that saves more padding.
MICRO_BATCH_OVERHEAD_TOKENS = 32


def plan_micro_batches(
    lengths: Sequence[int], max_rows: int, overhead_tokens: int = MICRO_BATCH_OVERHEAD_TOKENS,
    sizes: Sequence[int] | None = None, attention: float = 0.0,
) -> list[list[int]]:
    """Indices of each micro-batch: the units (rows, or packed families of ``sizes`` rows) sorted by length,
    longest first, cut into runs of at most ``max_rows`` rows so that the computed positions (each run's units x
    its longest, plus ``attention`` x length^2 for the attention of each position to every other) plus
    ``overhead_tokens`` per run are fewest (dynamic programming over the cut points).

    >>> plan_micro_batches([10, 50, 12, 48], max_rows=4, overhead_tokens=8)  # 2 x 50 + 2 x 12 + 16 < 4 x 50 + 8
    [[1, 3], [2, 0]]
    """
    sizes = sizes or [1] * len(lengths)
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    width = [lengths[i] + attention * lengths[i] ** 2 for i in order]  # of a run that starts at sorted unit i
    best, cut = [0.0] * (len(order) + 1), [0] * (len(order) + 1)
    for end in range(1, len(order) + 1):
        options, rows = [], 0
        for start in range(end - 1, -1, -1):
            rows += sizes[order[start]]
            if rows > max_rows and start < end - 1:
                break
            options.append((best[start] + width[start] * (end - start) + overhead_tokens, start))
        best[end], cut[end] = min(options)
    runs, end = [], len(order)
    while end > 0:
        runs.append(order[cut[end]:end])
        end = cut[end]
    return runs[::-1]


def attention_weight(config) -> float:
    """Cost of one query-key pair of attention in positions of the rest of the model: a transformer layer spends
    about 2 (4 d^2 + 3 d i) FLOPs per position on its projections and MLP and 4 d per query-key pair, so a
    sequence of P positions costs about P + P^2 x 2 / (4 d + 3 i) positions (d hidden, i MLP width); 0 when the
    config does not say."""
    d, i = getattr(config, "hidden_size", None), getattr(config, "intermediate_size", None)
    return 2 / (4 * d + 3 * i) if d and i else 0.0


def plan_families(batch: "TrainBatch", rows: Sequence[int], group_size: int, max_rows: int,
                  attention: float = 0.0) -> list[list[int]]:
    """The given rows, grouped into families to pack (:func:`pack`): the rows of each group of ``group_size``
    consecutive rows (the samples of one prompt), at most ``max_rows`` to a family, packed together where that
    costs fewer positions (attention included, see :func:`plan_micro_batches`) than running them alone."""
    lens = batch.attention_mask.sum(dim=-1).tolist()
    ids = batch.input_ids.tolist()
    cost = lambda n: n + attention * n * n  # noqa: E731
    by_group: dict[tuple[int, int], list[int]] = {}
    for r in rows:  # a family shares its prompt's pictures too: one set of image tensors per packed sequence
        pictures = id(batch.image_inputs[r]) if batch.image_inputs is not None else 0
        by_group.setdefault((r // group_size, pictures), []).append(r)
    families = []
    for members in by_group.values():
        for start in range(0, len(members), max_rows):
            fam = members[start : start + max_rows]
            seqs = [ids[r][: lens[r]] for r in fam]
            if len(fam) > 1 and cost(packed_length(seqs)) < sum(cost(len(x)) for x in seqs):
                families.append(fam)
            else:
                families += [[r] for r in fam]
    return families


def packed_micro_batches(batch: "TrainBatch", rows: Sequence[int], group_size: int, max_rows: int,
                         attention: float = 0.0) -> list["PackedBatch"]:
    """``rows`` of ``batch`` as packed micro-batches: families (:func:`plan_families`) of similar packed length
    together (:func:`plan_micro_batches`), at most ``max_rows`` rows each."""
    families = plan_families(batch, rows, group_size, max_rows, attention)
    lens = batch.attention_mask.sum(dim=-1).tolist()
    ids = batch.input_ids.tolist()
    lengths = [packed_length([ids[r][: lens[r]] for r in fam]) for fam in families]
    runs = plan_micro_batches(lengths, max_rows, sizes=[len(f) for f in families], attention=attention)
    return [pack(batch, [families[i] for i in run]) for run in runs]


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


# ---- a group's shared prefix computed once ----------------------------------------------------------------
@dataclass
class PackedBatch:
    """Rows of a TrainBatch packed by family: the rows of one family (samples of one prompt) share their longest
    common prefix (the prompt, and any first tokens they all sampled alike), which is computed once; each row's
    remaining tokens follow it in the same sequence and attend to the shared part and to themselves only (a
    block mask), at their own positions. One forward computes every row's log-probs.

    Example: rows [p p a b] and [p p c] (prefix 2) pack into [p p a b c] with positions [0 1 2 3 2]; `c` sees
    `p p c`, never `a b`."""

    rows: TrainBatch  # the b packed rows, as the loss sees them ([b, L-1] masks and log-probs)
    input_ids: torch.Tensor  # [F, P] one packed sequence per family
    position_ids: torch.Tensor  # [F, P]
    attention_mask: torch.Tensor  # [F, 1, P, P] bool: query (dim 2) may attend to key (dim 3)
    where: tuple[torch.Tensor, torch.Tensor]  # ([N], [N]) family and packed position predicting each counted token
    cols: tuple[torch.Tensor, torch.Tensor]  # ([N], [N]) that token's row and column in rows' [b, L-1] tensors
    targets: torch.Tensor  # [N] the token predicted
    real: int  # positions that hold a token (the rest is padding)
    index: list[int]  # [b] each packed row's index in the batch it was packed from
    # vision-language models: per family, its prompt's image tensors (their tokens are in the shared prefix once)
    image_inputs: list[dict[str, torch.Tensor] | None] | None = None

    def padded_tokens(self) -> tuple[int, int]:
        """(positions the forward computes, those of them that are padding)."""
        return self.input_ids.numel(), self.input_ids.numel() - self.real


def common_prefix(seqs: Sequence[Sequence[int]]) -> int:
    """Length of the longest prefix every sequence starts with.

    >>> common_prefix([[1, 2, 3], [1, 2, 4, 5], [1, 2]])
    2
    """
    n = min((len(s) for s in seqs), default=0)
    first = seqs[0] if seqs else []
    for i in range(n):
        if any(s[i] != first[i] for s in seqs):
            return i
    return n


def packed_length(seqs: Sequence[Sequence[int]]) -> int:
    """Positions of `seqs` packed with their common prefix once.

    >>> packed_length([[1, 2, 3], [1, 2, 4, 5]])  # 2 shared + 1 + 2
    5
    """
    s = common_prefix(seqs)
    return s + sum(len(x) - s for x in seqs)


def pack(batch: TrainBatch, families: Sequence[Sequence[int]]) -> PackedBatch:
    """Pack ``batch``'s rows family by family (each family a list of row indices) into one sequence each."""
    rows = [i for fam in families for i in fam]
    lens = batch.attention_mask.sum(dim=-1).tolist()
    ids = batch.input_ids.tolist()
    counted = [m.nonzero().flatten().tolist() for m in batch.mask[rows]]  # counted columns of each packed row
    seqs, where, cols, targets = [], [], [], []
    r = 0  # index of the row in the packed rows
    for f, fam in enumerate(families):
        toks = [ids[i][: lens[i]] for i in fam]
        s = common_prefix(toks)
        tok, pos, seg = list(toks[0][:s]), list(range(s)), [-1] * s
        for k, (i, t) in enumerate(zip(fam, toks)):
            start = len(tok)
            tok += t[s:]
            pos += range(s, len(t))
            seg += [k] * (len(t) - s)
            for c in counted[r]:  # column c predicts token c + 1 from position c
                where.append((f, c if c < s else start + c - s))
                cols.append((r, c))
                targets.append(t[c + 1])
            r += 1
        seqs.append((tok, pos, seg))
    width = max(len(t) for t, _, _ in seqs)
    F = len(seqs)
    input_ids = torch.zeros((F, width), dtype=torch.long)
    position_ids = torch.full((F, width), -1, dtype=torch.long)
    segment = torch.full((F, width), -2, dtype=torch.long)  # -1 shared prefix, k row k's tokens, -2 padding
    for f, (tok, pos, seg) in enumerate(seqs):
        input_ids[f, : len(tok)] = torch.tensor(tok)
        position_ids[f, : len(pos)] = torch.tensor(pos)
        segment[f, : len(seg)] = torch.tensor(seg)
    causal = torch.ones(width, width, dtype=torch.bool).tril()  # [P, P]
    same = (segment[:, None, :] == -1) | (segment[:, None, :] == segment[:, :, None])  # [F, P(query), P(key)]
    mask = (causal & same).unsqueeze(1)  # [F, 1, P, P]; padding sees padding, real tokens never see it
    dev = batch.input_ids.device
    w, c = torch.tensor(where).reshape(-1, 2), torch.tensor(cols).reshape(-1, 2)
    sub = batch.select(torch.tensor(rows, device=dev)).trimmed()
    return PackedBatch(sub, input_ids.to(dev), position_ids.clamp(min=0).to(dev), mask.to(dev),
                       (w[:, 0].to(dev), w[:, 1].to(dev)), (c[:, 0].to(dev), c[:, 1].to(dev)),
                       torch.tensor(targets, dtype=torch.long).to(dev), sum(len(t) for t, _, _ in seqs), rows,
                       [batch.image_inputs[fam[0]] for fam in families] if batch.image_inputs is not None else None)


def packed_logps(model, pb: PackedBatch, temperature: float = 1.0,
                 chunk_size: int = DEFAULT_CHUNK_SIZE) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probs [b, L-1] of the packed rows, entropies [b, L-1], in their TrainBatch columns (0 where not
    counted)), from one forward over the packed sequences; the output layer and the log-softmax run on the
    counted positions only, ``chunk_size`` at a time (kitae.trainer.logprobs)."""
    P = pb.input_ids.shape[1]
    fam, pos = pb.where
    first = int(pos.min()) if len(pos) else P - 1
    images = batch_image_inputs(pb.image_inputs, pb.input_ids.device) if pb.image_inputs is not None else {}
    hidden, logits = hidden_or_logits(model, dict(
        input_ids=pb.input_ids, attention_mask=pb.attention_mask, position_ids=pb.position_ids, use_cache=False,
        logits_to_keep=P - first, **images))
    if hidden is not None:
        part, entropy = chosen_logps(model, hidden[fam, pos - first], pb.targets, temperature, chunk_size)  # [N]
    else:
        part, entropy = logits_logps(logits[fam, pos - first], pb.targets, temperature, chunk_size)  # [N]
    logp = part.new_zeros(pb.rows.mask.shape).index_put(pb.cols, part)  # [b, L-1]
    return logp, entropy.new_zeros(pb.rows.mask.shape).index_put(pb.cols, entropy)


def token_logps(model, batch: TrainBatch, temperature: float = 1.0,
                chunk_size: int = DEFAULT_CHUNK_SIZE) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probs [B, L-1] of each next token under logits / T, entropies [B, L-1] of those distributions).

    The temperature matches the rollout engine's log-probs, so old and new form a proper ratio. Only positions
    from the first counted token on are computed (``logits_to_keep``, as TRL does): the prompt-only columns to
    the left cost no LM-head activations and are 0 in both outputs (the mask drops them anyway). The output layer
    and the log-softmax run ``chunk_size`` positions at a time (kitae.trainer.logprobs), never on the whole
    micro-batch's [B, K, V] logits. No KV cache is built (``use_cache=False``).
    """
    L = batch.input_ids.shape[1]
    counted = batch.mask.any(0).nonzero()
    start = int(counted[0]) if len(counted) else L - 2  # the first position that predicts a counted token
    keep = L - start  # positions start .. L-1; the last one (predicting past the end) is dropped below
    inputs = dict(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False,
                  logits_to_keep=keep, **batch.model_inputs())
    try:
        hidden, logits = hidden_or_logits(model, inputs)
    except TypeError:  # a model without logits_to_keep: all positions
        inputs.pop("use_cache"), inputs.pop("logits_to_keep")
        hidden, logits = hidden_or_logits(model, inputs)
    states = hidden if hidden is not None else logits
    K = states.shape[1] - 1  # [B, K+1, .] -> the K positions that predict a token of the row
    targets = batch.input_ids[:, L - K :].reshape(-1)  # [B*K]: the token each kept position predicts
    flat = states[:, :-1].reshape(-1, states.shape[-1])  # [B*K, H] hidden states or [B*K, V] logits
    if hidden is not None:
        part, entropy = chosen_logps(model, flat, targets, temperature, chunk_size)  # [B*K]
    else:
        part, entropy = logits_logps(flat, targets, temperature, chunk_size)  # [B*K]
    left = part.new_zeros(len(batch), L - 1 - K)  # [B, L-1-K] prompt-only columns
    return (torch.cat([left, part.reshape(-1, K)], dim=1),  # [B, L-1]
            torch.cat([left, entropy.reshape(-1, K)], dim=1))
