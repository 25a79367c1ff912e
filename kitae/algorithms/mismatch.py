"""Sampler/trainer mismatch: truncated importance sampling (TIS) and the metrics that watch the gap.

An inference server (vLLM, SGLang, ``kitae serve model``) samples with other kernels, dtypes and batch shapes than
the trainer, so its log-probs of a token are not the trainer's. With ``sampling.engine: server`` the trainer
recomputes its own log-probs of the sampled tokens before the update (``logp_train_old``) and

- uses them as the old log-probs of the PPO ratio ``pi_theta / pi_train_old``;
- weights each token's policy-gradient term by ``w_t = min(pi_train_old / pi_server, C)`` (C =
  ``algorithm.tis_cap``, default 2), the truncated importance weight of the sampler's distribution.

This is the decoupled form of TRL (``vllm_importance_sampling_correction`` with mode ``token_truncate``: the
weight multiplies the per-token loss before the KL term is added) and of veRL's TIS (Yao et al., "Your Efficient
RL Framework Secretly Brings You Off-Policy RL Training", 2025, cap 2). The weight carries no gradient.

Metrics (means over the counted tokens of the batch):
``mismatch/logp_abs_diff`` |log pi_train_old - log pi_server|, ``mismatch/logp_abs_diff_max``,
``mismatch/kl`` KL(pi_server || pi_train_old) estimated on the sampled tokens with k3, (r - 1) - log r for
r = pi_train_old / pi_server (>= 0, unbiased under the sampler), ``mismatch/tis_weight_mean`` and
``mismatch/tis_clip_frac`` (tokens whose ratio exceeded the cap).
"""

from __future__ import annotations

import torch


def tis_weight(train_logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor,
               cap: float) -> torch.Tensor:
    """Per-token weights [B, T] = min(exp(train_logp - sampler_logp), cap) on counted tokens, 1 elsewhere.

    Example (cap 2): train [ln 0.5, ln 0.3, 0], sampler [ln 0.2, ln 0.6, 5], mask [1, 1, 0] -> [2.0, 0.5, 1.0]
    (0.5/0.2 = 2.5 is cut to the cap; the padding column gets 1 whatever its values).
    """
    keep = mask > 0
    log_ratio = torch.where(keep, train_logp.float() - sampler_logp.float(), torch.zeros_like(mask, dtype=torch.float))
    return torch.exp(log_ratio).clamp(max=cap).detach()  # [B, T]


def mismatch_metrics(train_logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor,
                     cap: float | None) -> dict[str, float]:
    """The ``mismatch/*`` metrics of the module docstring over the counted tokens of [B, T] tensors.

    Example: train [[ln 0.5, ln 0.3]], sampler [[ln 0.2, ln 0.6]], mask all 1, cap 2 -> ratios [2.5, 0.5],
    logp_abs_diff (ln 2.5 + ln 2) / 2 = 0.805, kl ((2.5 - 1 - ln 2.5) + (0.5 - 1 + ln 2)) / 2 = 0.388,
    tis_weight_mean (2 + 0.5) / 2 = 1.25, tis_clip_frac 0.5.
    """
    keep = mask > 0
    if not bool(keep.any()):
        return {}
    diff = (train_logp.float() - sampler_logp.float())[keep]  # [N] log r
    out = {
        "mismatch/logp_abs_diff": float(diff.abs().mean()),
        "mismatch/logp_abs_diff_max": float(diff.abs().max()),
        "mismatch/kl": float((torch.expm1(diff) - diff).mean()),
    }
    if cap is not None:
        ratio = torch.exp(diff)
        out["mismatch/tis_weight_mean"] = float(ratio.clamp(max=cap).mean())
        out["mismatch/tis_clip_frac"] = float((ratio > cap).float().mean())
    return out
