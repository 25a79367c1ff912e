"""From a step's grades to the advantages of its training batch (the formulas are kitae.algorithms').

1. Each sample's total reward: the weighted sum of its components' scores. A total that is None (every
   component abstained) or not finite is invalid: masked out of its group's statistics, advantage 0.
2. KL in the reward (``algorithm.kl.where: reward``): r <- r - beta * KL(sequence), the sequence's KL being the
   sum over its counted tokens of the per-token estimate (``algorithm.kl.estimator``) between the sampling
   policy and the reference (kitae.algorithms.kl.kl_in_reward); beta is the KL controller's value.
3. Group-relative advantages (``algorithm.advantage``: grpo, dr_grpo, ...; kitae.algorithms.advantages).

Example (grpo, one group, no KL): totals [1, 0, None, 1] -> valid [1, 1, 0, 1], mean 2/3, std 0.577 ->
advantages [0.577, -1.155, 0, 0.577].
"""

from __future__ import annotations

import torch

from kitae.algorithms.advantages import compute_advantages
from kitae.algorithms.kl import kl_estimate, kl_in_reward
from kitae.scoring.components import GroupScores
from kitae.trainer.batch import TrainBatch
from kitae.trainer.config import AlgorithmConfig
from kitae.trainer.step_scores import reward_tensor


def sequence_kl(batch: TrainBatch, estimator: str) -> torch.Tensor:
    """KL [B] of each row's sampling policy (``old_logp``) to the reference (``ref_logp``): the per-token
    estimate summed over the row's counted tokens."""
    kl = kl_estimate(batch.old_logp, batch.ref_logp, estimator)  # [B, L-1]
    return torch.where(batch.mask > 0, kl, torch.zeros_like(kl)).sum(-1)  # [B]


def batch_advantages(scores: list[GroupScores], batch: TrainBatch, algorithm: AlgorithmConfig,
                     kl_coef: float) -> torch.Tensor:
    """Advantages [B] of the batch's rows (group by group, as ``scores``), on the CPU; the KL penalty
    ``kl_coef`` x KL is taken from the rewards first when ``algorithm.kl.where`` is "reward" and the batch has
    reference log-probs."""
    rewards, valid = reward_tensor(scores)  # [num_groups, G]
    if batch.ref_logp is not None and algorithm.kl.where == "reward":
        kl = sequence_kl(batch, algorithm.kl.estimator).cpu()  # [B]
        rewards = kl_in_reward(rewards.reshape(-1), kl, kl_coef).view_as(rewards)  # [num_groups, G]
    estimator = algorithm.advantage
    return compute_advantages(estimator.type, rewards, valid, **estimator.keywords()).reshape(-1)  # [B]
