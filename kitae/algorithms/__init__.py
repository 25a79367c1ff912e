"""RL algorithms as small registered pure functions: advantages, policy losses, KL and entropy.

One optimizer step of GRPO-style training uses them like this (shapes in comments)::

    from kitae.algorithms import (LossConfig, LossInputs, Normalizer, compute_advantages,
                                  dynamic_sampling_keep, policy_loss, truncation_mask)

    rewards = ...                                              # [num_groups, G] float, NaN where None
    keep = dynamic_sampling_keep(rewards)                      # [num_groups] (DAPO; optional)
    adv = compute_advantages("grpo", rewards[keep])            # [kept, G]
    adv = adv.reshape(-1)                                      # [B] one per sequence, group-major order
    masks = [truncation_mask(reasons, m) for reasons, m in micro_masks]   # optional overlong filtering
    norm = Normalizer.from_masks(masks)                        # full-batch counts, once per step
    # several processes (DDP): norm = norm.over_processes(lambda t: accelerator.reduce(t, "sum"), world_size)
    for mb, mask in zip(micro_batches, masks):
        inp = LossInputs(logp=mb.logp, old_logp=mb.old_logp, advantages=mb.adv, mask=mask)
        loss, metrics = policy_loss("grpo", inp, LossConfig(), norm)
        loss.backward()                                        # no extra division: losses already sum up
    optimizer.step()

A loss takes its LossConfig as given: its settings (each loss's own class, beside it: ``LossSettings``) and what the
run adds; ``LossConfig.for_loss("dapo")`` gives dapo's settings with their defaults.

Registries (unknown names raise ConfigError with a did-you-mean hint): ADVANTAGES (grpo, dr_grpo, rloo,
batch_std, reinforce_pp), POLICY_LOSSES (grpo, dapo, dr_grpo, gspo, cispo, kimi), AGGREGATIONS
(seq_mean_token_mean, token_mean, seq_sum_constant), KL_ESTIMATORS (k1, k2, k3), KL_CONTROLLERS (fixed,
adaptive). Each module docstring names its papers, equations and departures.
"""

from kitae.algorithms.advantages import ADVANTAGES, AdvantageSettings, compute_advantages, dynamic_sampling_keep
from kitae.algorithms.kl import (
    KL_CONTROLLERS,
    KL_ESTIMATORS,
    AdaptiveKLController,
    FixedKLController,
    kl_estimate,
    kl_in_reward,
    masked_entropy,
)
from kitae.algorithms.losses import (
    AGGREGATIONS,
    POLICY_LOSSES,
    LossConfig,
    LossInputs,
    LossSettings,
    Normalizer,
    aggregate,
    policy_loss,
    rows_without_gradient,
    truncation_mask,
)

__all__ = [
    "ADVANTAGES",
    "AGGREGATIONS",
    "KL_CONTROLLERS",
    "KL_ESTIMATORS",
    "POLICY_LOSSES",
    "AdaptiveKLController",
    "AdvantageSettings",
    "FixedKLController",
    "LossConfig",
    "LossInputs",
    "LossSettings",
    "Normalizer",
    "aggregate",
    "compute_advantages",
    "dynamic_sampling_keep",
    "kl_estimate",
    "kl_in_reward",
    "masked_entropy",
    "policy_loss",
    "rows_without_gradient",
    "truncation_mask",
]
