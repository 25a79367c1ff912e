"""The policy update: a step's completions as a training batch, the log-probs the loss compares, and ``mu``
optimizer steps over the batch.

:meth:`PolicyUpdate.prepare` turns a step's graded groups into the finished batch, in this order:

- :meth:`PolicyUpdate.batch_before_advantages`: prompt + completion ids and the sampler's log-probs as tensors on
  the device (kitae.trainer.batch), advantages 0 until the advantages stage sets them. ``algorithm.mask_truncated``
  takes truncated samples out of the loss (DAPO overlong filtering, kitae.algorithms.losses.truncation_mask); with
  partial rollouts and ``old_segments: exclude``, tokens sampled in earlier segments leave it too.
- :meth:`PolicyUpdate.correct_mismatch` (server engine, kitae.algorithms.mismatch): the trainer's own log-probs
  become the ratio's old log-probs; the server's give truncated importance weights.
- :meth:`PolicyUpdate.reference_logps`: the KL's reference (the reference model, or for LoRA the base model with
  the adapter off).
- the advantages (kitae.trainer.advantages): total rewards, less the KL with ``algorithm.kl.where: reward``,
  turned into group-relative advantages.

Then:

- :meth:`PolicyUpdate.optimize`: the :class:`UpdatePlan` (the Normalizer of the whole batch over all
  processes; micro-batches of the rows that can change the gradient), then ``mu`` passes, each accumulating
  gradients over the micro-batches, clipping them and stepping the optimizer.

Numerical guard (as verl has it): a pass whose gradient norm is NaN or infinite does not step the optimizer; its
gradient is dropped, the weights and the optimizer's state stay exactly as they were, and the pass is counted
(``skipped_steps`` in the step's metrics, :attr:`PolicyUpdate.skipped_steps` over the update's life). The norm is
that of the gradient DDP averaged, so every process skips alike. With fp16 mixed precision accelerate's loss
scaler does the skipping (and lowers its scale); the pass is counted the same way. The loss clamps the log-ratio
too (kitae.algorithms.losses), so one bad batch cannot turn the weights into NaN.

Precision (kitae.trainer.setup.precision): with mixed precision the prepared model's forward runs under
accelerate's autocast; the reference model's forward is put under the same autocast here.
"""

from __future__ import annotations

import math
import statistics
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from kitae.algorithms.losses import (
    LossConfig,
    LossInputs,
    Normalizer,
    policy_loss,
    rows_without_gradient,
    truncation_mask,
)
from kitae.algorithms.mismatch import mismatch_metrics, tis_weight
from kitae.rollout.base import Completion
from kitae.scoring.components import GroupScores
from kitae.trainer.advantages import batch_advantages
from kitae.trainer.batch import (
    PackedBatch,
    TrainBatch,
    attention_weight,
    build_batch,
    mask_earlier_segments,
    micro_batch_rows,
    packed_logps,
    packed_micro_batches,
    token_logps,
)
from kitae.trainer import sharded
from kitae.trainer.config import TrainConfig

# The reference model of a LoRA run: the base model under the adapter, with the adapter switched off.
BASE_UNDER_ADAPTER = "adapter-disabled"


@dataclass
class UpdatePlan:
    """What one optimizer pass runs."""

    norm: Normalizer  # counts of the whole batch (every row, skipped or not) over all processes
    micro_batches: list[PackedBatch | TrainBatch]  # of the rows that can change the gradient
    stats: dict[str, float]  # skipped_rows; pad_frac, the padding share of the positions the forward computes

    def counted_tokens(self) -> float:
        """Tokens the micro-batches count in the loss (at least 1): the weight of a micro-batch's metrics."""
        return max(1.0, sum(float(mb.rows.mask.sum() if isinstance(mb, PackedBatch) else mb.mask.sum())
                            for mb in self.micro_batches))


class PolicyUpdate:
    """The policy's update from training batches: ``model`` (as accelerate prepared it), its ``optimizer``, and
    the reference for the KL (None without one)."""

    def __init__(self, cfg: TrainConfig, acc, model, optimizer, ref_model, pad_id: int, off_policy: bool):
        self.cfg, self.acc, self.model, self.optimizer, self.ref_model = cfg, acc, model, optimizer, ref_model
        self.pad_id = pad_id
        self.skipped_steps = 0  # optimizer steps skipped for a gradient norm that was not finite
        # the sampler's log-probs are not the trainer's (a server's kernels, or async's older weights): corrected
        self.off_policy = off_policy
        # sampling.async with mu 1: the update's own forward gives the old log-probs (see _correct_in_pass)
        self.in_pass_correction = cfg.sampling.async_ and cfg.algorithm.mu == 1

    @property
    def policy(self):
        return self.acc.unwrap_model(self.model)

    # ---- the batch and the log-probs it is compared with ---------------------------------------------------
    def prepare(self, completions: list[Completion], scores: list[GroupScores],
                kl_coef: float) -> tuple[TrainBatch, dict[str, float]]:
        """The step's finished training batch on the device (ids, mask, old and reference log-probs, TIS weights,
        advantages [B]) from its completions and their groups' ``scores`` (group by group), and the mismatch
        metrics (empty unless the samples are off-policy and corrected here). ``kl_coef``: the KL controller's
        value, for a KL in the reward."""
        batch = self.batch_before_advantages(completions)  # [B, L] on the device
        mismatch = self.correct_mismatch(batch) if self.off_policy and not self.in_pass_correction else {}
        if self.ref_model is not None:
            batch.ref_logp = self.reference_logps(batch)  # [B, L-1]
        advantages = batch_advantages(scores, batch, self.cfg.algorithm, kl_coef)  # [B] on the CPU
        batch.advantages = advantages.to(self.acc.device)
        return batch, mismatch

    def batch_before_advantages(self, completions: list[Completion]) -> TrainBatch:
        """The completions as tensors on the device ([B, L] ids, [B, L-1] mask and sampler log-probs) with
        advantages 0: :meth:`prepare` sets them (they need the batch's reference log-probs for a KL in the reward);
        truncated samples and earlier segments out of the mask as the config says."""
        batch = build_batch(completions, [0.0] * len(completions), self.pad_id)
        if self.cfg.algorithm.mask_truncated:  # DAPO overlong filtering
            batch.mask = truncation_mask([c.finish_reason for c in completions], batch.mask)
        pc = self.cfg.sampling.partial
        if pc is not None and pc.old_segments == "exclude":
            mask_earlier_segments(batch, completions)
        return batch.to(self.acc.device)

    @torch.no_grad()
    def correct_mismatch(self, batch: TrainBatch) -> dict[str, float]:
        """Server samples (kitae.algorithms.mismatch): the trainer's own log-probs of the sampled tokens, before
        the update and in micro-batches as :meth:`optimize` runs them (every row here; the update may leave some
        out), become the ratio's old log-probs; the server's give the truncated importance weights
        (``algorithm.tis_cap``). Returns the mismatch metrics."""
        cap = self.cfg.algorithm.tis_cap
        self.model.train()  # as in optimize: at the first pass the ratio is 1
        own = torch.zeros_like(batch.old_logp)  # [B, L-1]
        chunks = self.micro_batches(batch, list(range(len(batch))))
        for rows, mb in chunks:
            logp = self.logps(mb)[0]  # [b, w-1] of the micro-batch's trimmed rows
            own[rows, : logp.shape[1]] = logp
        for _ in range(sharded.passes_short(self.acc, len(chunks))):  # FSDP: as many forwards as every process
            self.logps(chunks[-1][1])
        metrics = mismatch_metrics(own, batch.old_logp, batch.mask, cap)
        batch.is_weight = tis_weight(own, batch.old_logp, batch.mask, cap) if cap is not None else None
        batch.old_logp = own
        return metrics

    @torch.no_grad()
    def reference_logps(self, batch: TrainBatch) -> torch.Tensor:
        """Log-probs [B, L-1] of the batch's tokens under the reference policy."""
        temp, chunk = self.cfg.sampling.temperature, self.cfg.optim.logprob_chunk_size
        out = torch.zeros_like(batch.old_logp)  # [B, L-1]
        runs = micro_batch_rows(batch, self.cfg.optim.micro_batch_size)
        if self.ref_model == BASE_UNDER_ADAPTER:  # FSDP: the policy's forwards, as many as every process runs
            runs += runs[-1:] * sharded.passes_short(self.acc, len(runs))
        for rows in runs:
            mb = batch.select(torch.tensor(rows, device=out.device)).trimmed()
            if self.ref_model == BASE_UNDER_ADAPTER:
                with self.policy.disable_adapter(), self.acc.autocast():  # autocast: as in logps
                    logp = token_logps(self.model, mb, temp, chunk)[0]
            else:  # under the policy's autocast (accelerate wraps only the prepared model's forward)
                with self.acc.autocast():
                    logp = token_logps(self.ref_model, mb, temp, chunk)[0]
            out[rows, : logp.shape[1]] = logp  # [b, w-1] of the trimmed rows
        return out

    def logps(self, mb: PackedBatch | TrainBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probs [b, L-1] of the micro-batch's rows under the policy, and the entropies [b, L-1] of the
        distributions they come from (0 where not computed; the mask picks the counted ones)."""
        temp, chunk = self.cfg.sampling.temperature, self.cfg.optim.logprob_chunk_size
        with self.acc.autocast():  # the output layer runs after the prepared forward, under its precision too
            if isinstance(mb, PackedBatch):
                return packed_logps(self.model, mb, temp, chunk)
            return token_logps(self.model, mb, temp, chunk)

    # ---- the optimizer steps -------------------------------------------------------------------------------
    def optimize(self, batch: TrainBatch, loss_cfg: LossConfig) -> dict[str, float]:
        """``algorithm.mu`` optimizer steps over the batch, each accumulating gradients over the micro-batches
        of :meth:`plan`. Returns the loss, the loss's metrics (token-weighted means over the trained rows and
        the passes), the entropy, ``grad_norm`` (mean over the passes; not finite when a pass's was not),
        ``skipped_steps`` (passes whose optimizer step was skipped for it) and the plan's stats."""
        plan = self.plan(batch, loss_cfg)
        self.model.train()
        mu, tokens = self.cfg.algorithm.mu, plan.counted_tokens()
        agg: dict[str, float] = {}
        grad_norms = []
        loss_sum = 0.0
        # FSDP: every process runs as many forwards and backwards; the extra ones add a gradient of exactly 0
        extra = sharded.passes_short(self.acc, len(plan.micro_batches))
        passes = [(mb, 1.0) for mb in plan.micro_batches] + ([(plan.micro_batches[-1], 0.0)] * extra if extra else [])
        for _ in range(mu):
            for i, (mb, weight) in enumerate(passes):
                loss, m, mb_tokens = self._backward(mb, loss_cfg, plan.norm, last=i == len(passes) - 1, weight=weight)
                if weight == 0.0:
                    continue
                loss_sum += loss / mu  # micro-batch losses sum to the batch loss
                for k, v in m.items():
                    if k.endswith("_max"):  # a maximum over the batch (mismatch/logp_abs_diff_max)
                        agg[k] = max(agg.get(k, v), v)
                    else:
                        agg[k] = agg.get(k, 0.0) + v * mb_tokens / tokens / mu
            grad_norms.append(self._step(zero_first=not plan.micro_batches))
        skipped = sum(not math.isfinite(n) for n in grad_norms)
        return {**agg, "loss": loss_sum, "grad_norm": statistics.fmean(grad_norms), "skipped_steps": float(skipped),
                **plan.stats}

    def _backward(self, mb: PackedBatch | TrainBatch, loss_cfg: LossConfig, norm: Normalizer,
                  last: bool, weight: float = 1.0) -> tuple[float, dict[str, float], float]:
        """Forward and backward of one micro-batch, its loss times ``weight``: (its loss, its metrics, its
        counted tokens). DDP all-reduces the gradients once (FSDP reduce-scatters them), after the ``last``."""
        with nullcontext() if last else self.acc.no_sync(self.model):
            logp, entropy = self.logps(mb)
            rows = mb.rows if isinstance(mb, PackedBatch) else mb
            old, is_weight, mismatch = rows.old_logp, rows.is_weight, {}
            if self.in_pass_correction:
                old, is_weight, mismatch = self._correct_in_pass(logp.detach(), rows.old_logp, rows.mask)
            inp = LossInputs(logp, old, rows.advantages, rows.mask, rows.ref_logp, is_weight)
            loss, m = policy_loss(self.cfg.algorithm.loss.type, inp, loss_cfg, norm)
            m.update(mismatch)
            self.acc.backward(loss * weight if weight != 1.0 else loss)
        m["entropy"] = float((entropy * rows.mask).sum() / rows.mask.sum().clamp(min=1.0))  # over counted tokens
        metrics = {k: float(v) for k, v in m.items() if k != "num_tokens"}
        return float(loss.detach()), metrics, float(rows.mask.sum())

    def _correct_in_pass(self, own: torch.Tensor, sampler: torch.Tensor, mask: torch.Tensor):
        """The correction of :meth:`correct_mismatch` from the update's own forward, for ``mu`` 1 (async rollouts):
        before the only optimizer step the policy's log-probs [b, T] are the trainer's old ones (ratio 1), so the
        separate forward over the batch is not needed. Returns (old log-probs, TIS weights, mismatch metrics);
        the metrics are token-weighted over the micro-batches as the loss's are (the _max one: the largest)."""
        cap = self.cfg.algorithm.tis_cap
        weight = tis_weight(own, sampler, mask, cap) if cap is not None else None
        return own, weight, mismatch_metrics(own, sampler, mask, cap)

    def _step(self, zero_first: bool) -> float:
        """Clip the gradient and step the optimizer; returns the gradient's norm before clipping. With
        ``zero_first`` (every row skipped) the gradient is first set to 0 where there is none, so the optimizer
        steps (momentum, weight decay) as it would after a backward whose gradient is all zero. A norm that is
        not finite skips the step (counted in :attr:`skipped_steps`): clipping by it would write NaN into the
        gradient, and AdamW would carry it into the weights and its moments."""
        if zero_first:
            for p in self.model.parameters():
                if p.requires_grad and p.grad is None:
                    p.grad = torch.zeros_like(p)
        norm = float(self.acc.clip_grad_norm_(self.model.parameters(), self.cfg.optim.max_grad_norm))
        if not math.isfinite(norm):
            self.skipped_steps += 1
        if math.isfinite(norm) or self.acc.scaler is not None:
            self.optimizer.step()  # fp16's loss scaler skips a non-finite step itself, and must see it to lower its scale
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    # ---- the plan --------------------------------------------------------------------------------------------
    def plan(self, batch: TrainBatch, loss_cfg: LossConfig) -> UpdatePlan:
        """What the update runs: the Normalizer of the whole batch (every row, skipped or not, over all
        processes: the aggregation divides by the full batch's counts), the micro-batches of the rows that can
        change the gradient (:meth:`micro_batches`), and ``skipped_rows`` and ``pad_frac``."""
        local = Normalizer.from_masks([batch.mask])  # sequences with no counted token drop out
        norm = local.over_processes(lambda t: self.acc.reduce(t.to(self.acc.device), "sum"), self.acc.num_processes)
        skip = self.rows_to_skip(batch, loss_cfg)  # [B]
        rows = (~skip).nonzero().flatten().tolist()
        if not rows and self.acc.num_processes > 1:  # each process runs a backward, or DDP's all-reduce waits
            rows = [int(batch.attention_mask.sum(dim=-1).argmin())]  # the shortest row; it adds exactly 0
        chunks = [mb for _, mb in self.micro_batches(batch, rows)]
        counts = [mb.padded_tokens() for mb in chunks]  # (positions computed, of them padding) per micro-batch
        computed, padded = sum(c for c, _ in counts), sum(p for _, p in counts)
        stats = {"skipped_rows": float(len(batch) - len(rows)), "pad_frac": padded / computed if computed else 0.0}
        return UpdatePlan(norm, chunks, stats)

    def rows_to_skip(self, batch: TrainBatch, loss_cfg: LossConfig) -> torch.Tensor:
        """[B] bool: rows left out of the update (kitae.algorithms.losses.rows_without_gradient). With an
        adaptive KL coefficient, only rows with no counted token: the controller follows the KL of every row."""
        if not self.cfg.optim.skip_zero_advantage:
            return torch.zeros(len(batch), dtype=torch.bool, device=batch.mask.device)
        if self.cfg.algorithm.kl.adaptive is not None:
            return batch.mask.sum(dim=-1) == 0
        return rows_without_gradient(self.cfg.algorithm.loss.type, batch.advantages, batch.mask, loss_cfg)

    def micro_batches(self, batch: TrainBatch, rows: list[int]) -> list[tuple[list[int], PackedBatch | TrainBatch]]:
        """``rows`` of ``batch`` as the update's micro-batches, each with the indices of its rows in ``batch``.
        Where the model's attention takes a block mask, the samples of one prompt are packed into one sequence
        that computes their common prefix once, where that costs less (kitae.trainer.batch.pack), and sequences
        of similar length share a micro-batch; else rows of similar length, each micro-batch trimmed to its
        longest (kitae.trainer.batch.micro_batch_rows)."""
        mbs, config = self.cfg.optim.micro_batch_size, self.policy.config
        if _takes_block_masks(config):
            chunks = packed_micro_batches(batch, rows, self.cfg.sampling.group_size, mbs, attention_weight(config))
            return [(mb.index, mb) for mb in chunks]
        runs = micro_batch_rows(batch, mbs, rows)
        return [(r, batch.select(torch.tensor(r, device=batch.input_ids.device)).trimmed()) for r in runs]


def _takes_block_masks(config) -> bool:
    """Whether the model's attention accepts a 4D boolean mask (sdpa and eager do; flash attention does not)."""
    return getattr(config, "_attn_implementation", None) in (None, "sdpa", "eager")
