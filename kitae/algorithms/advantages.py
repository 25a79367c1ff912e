"""Advantage estimators: one scalar advantage per sample, computed from the rewards of its group.

Input is a [num_groups, G] reward matrix (one row per prompt, its G completions) and a boolean ``valid`` mask
that is False where a sample's reward is None (every reward component abstained). Estimators, each registered
by name in :data:`ADVANTAGES`:

- ``grpo``          DeepSeekMath (arXiv 2402.03300 §4.1) outcome supervision: (r - mean(r)) / (std(r) + eps).
- ``dr_grpo``       Dr. GRPO (arXiv 2503.20783): r - mean(r), no std division.
- ``rloo``          RLOO (arXiv 2402.14740): r_i - mean_{j != i} r_j = n/(n-1) * (r_i - mean(r)).
- ``batch_std``     r - mean(r) (group), divided by the std of the rewards over the whole batch (TRL
                    ``scale_rewards="batch"``).
- ``reinforce_pp``  REINFORCE++ with group baseline (arXiv 2501.03262): a = r - mean(r) (group), then
                    (a - mean_batch(a)) / (std_batch(a) + eps).

Conventions and departures (the same for every estimator):
- std is the unbiased (Bessel, n - 1) standard deviation, as ``torch.std`` in TRL and verl; eps = 1e-4 is
  added to it (TRL), not to the variance.
- Invalid samples get advantage 0 and enter no mean or std; n above is the number of *valid* samples in the
  group. TRL instead counts an all-None sample as reward 0 (``nansum``) inside the group statistics.
- A group with a single valid sample has no baseline to compare with: its advantage is 0 (verl instead uses
  mean 0, std 1, i.e. advantage = r). A group whose valid rewards are all equal gets 0, never NaN.
- ``eps`` is a setting of grpo, batch_std and reinforce_pp (``algorithm.advantage: {type: grpo, eps: 1e-4}``,
  :class:`StdSettings`); dr_grpo and rloo take none.
- When ``valid`` is omitted, a sample is valid where its reward is finite, so NaN can stand for None.
- REINFORCE++ normalizes per sequence here; verl whitens per token (each sequence weighted by its length).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from kitae.config import Variant, setting
from kitae.registry import Registry

ADVANTAGES = Registry("advantage estimator")

DEFAULT_EPS = 1e-4


@dataclass
class AdvantageSettings(Variant):
    """The settings of an advantage estimator (``algorithm.advantage``: NAME or {type: NAME, ...}); an estimator
    registered without settings takes none. Its settings are passed to it as keywords."""

    registry: ClassVar[Registry] = ADVANTAGES
    kind: ClassVar[str] = "advantage estimator"

    def keywords(self) -> dict:
        """The settings as the estimator's keyword arguments."""
        return {k: v for k, v in self.__dict__.items() if k != "type"}


@dataclass
class StdSettings(AdvantageSettings):
    """The estimators that divide by a standard deviation (grpo, batch_std, reinforce_pp)."""

    eps: float = setting(DEFAULT_EPS, minimum=0)  # added to the std (TRL), not to the variance


# ---- masked statistics ------------------------------------------------------------------------------------
def _count(valid: torch.Tensor, dim: int | None) -> torch.Tensor:
    return valid.sum() if dim is None else valid.sum(dim=dim, keepdim=True)


def masked_mean(values: torch.Tensor, valid: torch.Tensor, dim: int | None = -1) -> torch.Tensor:
    """Mean of the valid entries (over ``dim``, or everything when None); 0 where nothing is valid.

    >>> masked_mean(torch.tensor([[1.0, 9.0, 2.0]]), torch.tensor([[True, False, True]]))
    tensor([[1.5000]])
    """
    v = torch.where(valid, values, torch.zeros_like(values))  # [N, G], invalid entries (maybe NaN) zeroed
    total = v.sum() if dim is None else v.sum(dim=dim, keepdim=True)
    return total / _count(valid, dim).clamp(min=1)


def masked_std(values: torch.Tensor, valid: torch.Tensor, dim: int | None = -1) -> torch.Tensor:
    """Unbiased std of the valid entries; 0 where fewer than two entries are valid (instead of NaN).

    >>> masked_std(torch.tensor([[1.0, 9.0, 3.0], [5.0, 0.0, 0.0]]), torch.tensor([[1, 0, 1], [1, 0, 0]]).bool())
    tensor([[1.4142],
            [0.0000]])
    """
    mean = masked_mean(values, valid, dim)
    sq = torch.where(valid, (values - mean) ** 2, torch.zeros_like(values))  # [N, G]
    total = sq.sum() if dim is None else sq.sum(dim=dim, keepdim=True)
    return (total / (_count(valid, dim) - 1).clamp(min=1)).sqrt()


def _centered(rewards: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """r - group mean on valid samples, 0 elsewhere."""  # [N, G]
    return torch.where(valid, rewards - masked_mean(rewards, valid), torch.zeros_like(rewards))


# ---- estimators -------------------------------------------------------------------------------------------
@ADVANTAGES.register("grpo", settings=StdSettings)
def grpo_advantages(rewards: torch.Tensor, valid: torch.Tensor, eps: float = DEFAULT_EPS) -> torch.Tensor:
    """Group z-score. Example (eps=0): rewards [[1, 0, 0, 1]] -> mean 0.5, std 0.5774 -> [[0.866, -0.866,
    -0.866, 0.866]]. With valid [[T, T, F, T]] and rewards [[1, 0, 9, 1]] the 9 is ignored: mean 2/3,
    std 0.5774 -> [[0.577, -1.155, 0, 0.577]]."""
    std = masked_std(rewards, valid)  # [N, 1]
    return _centered(rewards, valid) / (std + eps)  # [N, G]


@ADVANTAGES.register("dr_grpo")
def dr_grpo_advantages(rewards: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """r - group mean. Example: [[1, 0, 0, 1]] -> [[0.5, -0.5, -0.5, 0.5]]."""
    return _centered(rewards, valid)  # [N, G]


@ADVANTAGES.register("rloo")
def rloo_advantages(rewards: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Leave-one-out baseline. Example: [[1, 0, 0]] -> 1 - 0 = 1, 0 - 0.5 = -0.5 -> [[1, -0.5, -0.5]]
    (= 3/2 * [[2/3, -1/3, -1/3]])."""
    n = valid.sum(dim=-1, keepdim=True).to(rewards.dtype)  # [N, 1] valid samples per group
    scale = torch.where(n > 1, n / (n - 1).clamp(min=1), torch.zeros_like(n))  # single valid sample -> 0
    return _centered(rewards, valid) * scale  # [N, G]


@ADVANTAGES.register("batch_std", settings=StdSettings)
def batch_std_advantages(rewards: torch.Tensor, valid: torch.Tensor, eps: float = DEFAULT_EPS) -> torch.Tensor:
    """Group mean subtracted, batch std divided. Example (eps=0): [[1, 0], [1, 1]] -> centered
    [[0.5, -0.5], [0, 0]], batch std of {1, 0, 1, 1} = 0.5 -> [[1, -1], [0, 0]]."""
    std = masked_std(rewards, valid, dim=None)  # [] over every valid reward of the batch
    return _centered(rewards, valid) / (std + eps)  # [N, G]


@ADVANTAGES.register("reinforce_pp", settings=StdSettings)
def reinforce_pp_advantages(rewards: torch.Tensor, valid: torch.Tensor, eps: float = DEFAULT_EPS) -> torch.Tensor:
    """Group baseline, then batch whitening. Example (eps=0): [[1, 0], [3, 1]] -> a = [[0.5, -0.5], [1, -1]],
    batch mean 0, batch std sqrt(2.5/3) = 0.9129 -> [[0.5477, -0.5477], [1.0954, -1.0954]]."""
    a = _centered(rewards, valid)  # [N, G]
    mean = masked_mean(a, valid, dim=None)  # [] (0 up to rounding: each group's deviations sum to 0)
    std = masked_std(a, valid, dim=None)  # []
    return torch.where(valid, (a - mean) / (std + eps), torch.zeros_like(a))  # [N, G]


# ---- entry point ------------------------------------------------------------------------------------------
def _check(rewards: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [num_groups, G], got shape {tuple(rewards.shape)}")
    if valid is None:
        return torch.isfinite(rewards)
    if valid.shape != rewards.shape:
        raise ValueError(f"valid has shape {tuple(valid.shape)}, rewards {tuple(rewards.shape)}; they must match")
    return valid.bool()


def compute_advantages(
    name: str,
    rewards: torch.Tensor,
    valid: torch.Tensor | None = None,
    *,
    config_path: str = "algorithm.advantage",
    **kw,
) -> torch.Tensor:
    """Advantages [num_groups, G] from rewards [num_groups, G] with the estimator registered as ``name``.

    ``valid`` [num_groups, G] bool is False for abstained samples (default: finite rewards); those get 0.
    Extra keywords go to the estimator (``eps`` for grpo, batch_std, reinforce_pp). An unknown name raises
    ConfigError at ``config_path`` with a did-you-mean hint.

    >>> compute_advantages("dr_grpo", torch.tensor([[1.0, 0.0, float("nan")]]))
    tensor([[ 0.5000, -0.5000,  0.0000]])
    """
    estimator = ADVANTAGES.get(name, path=config_path)
    valid = _check(rewards, valid)
    rewards = rewards.float()  # [N, G]; fp32 statistics even for bf16 rewards
    return estimator(rewards, valid, **kw)  # [N, G]


def dynamic_sampling_keep(rewards: torch.Tensor, valid: torch.Tensor | None = None, atol: float = 0.0) -> torch.Tensor:
    """DAPO dynamic sampling (arXiv 2503.14476 §3.2): which groups to keep, bool [num_groups].

    A group is dropped when its valid rewards are all equal (max - min <= ``atol``; exact equality by default,
    as verl's ``std > 0`` test): every sample would get advantage 0, so the group only dilutes the batch.
    A group with fewer than two valid samples is dropped too.

    Example: [[1, 0, 1], [1, 1, 1], [0, 0, 0], [2, nan, 2]] -> [True, False, False, False].
    """
    valid = _check(rewards, valid)
    big = torch.finfo(torch.float32).max
    r = rewards.float()  # [N, G]
    hi = torch.where(valid, r, torch.full_like(r, -big)).amax(dim=-1)  # [N]
    lo = torch.where(valid, r, torch.full_like(r, big)).amin(dim=-1)  # [N]
    return (valid.sum(dim=-1) >= 2) & (hi - lo > atol)  # [N]
