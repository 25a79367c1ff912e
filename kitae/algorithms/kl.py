"""KL to a reference policy (estimators, coefficient controllers, KL-in-reward) and the entropy metric.

- Estimators (Schulman 2020, "Approximating KL divergence"), per token, with log r = ref_logp - logp and
  tokens sampled from the policy: k1 = -log r (unbiased, high variance, can be negative);
  k2 = 1/2 (log r)^2 (biased, low variance); k3 = r - log r - 1 (unbiased, >= 0; the estimator GRPO uses).
  Registered by name in :data:`KL_ESTIMATORS`. Departure: none by default; ``clamp_log_ratio`` optionally
  clamps log r as verl does (+-20) to keep exp(log r) finite, which zeroes the gradient outside the range.
- Controllers (Ziegler et al. 2019, arXiv 1909.08593 §2.2): fixed, and adaptive
  e = clip(KL_observed / KL_target - 1, -0.2, 0.2); beta <- beta * (1 + e * n_steps / horizon), as
  ``AdaptiveKLController(init_kl_coef, target, horizon)`` in OpenRLHF and verl. Registered in
  :data:`KL_CONTROLLERS`.
- :func:`kl_in_reward`: the PPO-style alternative to a KL term in the loss, r <- r - beta * KL.
- :func:`masked_entropy`: mean token entropy of the policy over counted tokens, chunked over positions so the
  fp32 softmax of a [B, T, V] tensor is never materialized at once.
"""

from __future__ import annotations

import torch

from kitae.errors import ConfigError
from kitae.registry import Registry

KL_ESTIMATORS = Registry("KL estimator")
KL_CONTROLLERS = Registry("KL controller")


# ---- per-token estimators ---------------------------------------------------------------------------------
@KL_ESTIMATORS.register("k1")
def kl_k1(log_r: torch.Tensor) -> torch.Tensor:
    """-log r. Example: log r = ln 2 -> -0.6931."""
    return -log_r


@KL_ESTIMATORS.register("k2")
def kl_k2(log_r: torch.Tensor) -> torch.Tensor:
    """1/2 (log r)^2. Example: log r = ln 2 -> 0.2402."""
    return 0.5 * log_r**2


@KL_ESTIMATORS.register("k3")
def kl_k3(log_r: torch.Tensor) -> torch.Tensor:
    """r - log r - 1 (>= 0 since e^x >= 1 + x). Example: log r = ln 2 -> 2 - 0.6931 - 1 = 0.3069."""
    return torch.exp(log_r) - log_r - 1


def kl_estimate(
    logp: torch.Tensor,
    ref_logp: torch.Tensor,
    kind: str = "k3",
    *,
    clamp_log_ratio: float | None = None,
    config_path: str = "algorithm.kl.estimator",
) -> torch.Tensor:
    """Per-token KL(pi || pi_ref) estimate [B, T] from log-probs [B, T] of the sampled tokens.

    Example: logp = ln 0.25, ref_logp = ln 0.5 -> log r = ln 2 -> k1 -0.6931, k2 0.2402, k3 0.3069.
    Masking is the caller's job (padding positions hold whatever the inputs hold there).

    >>> kl_estimate(torch.tensor([[0.25, 0.5]]).log(), torch.tensor([[0.5, 0.5]]).log(), "k3")
    tensor([[0.3069, 0.0000]])
    """
    estimator = KL_ESTIMATORS.get(kind, path=config_path)
    log_r = ref_logp - logp  # [B, T]
    if clamp_log_ratio is not None:
        log_r = log_r.clamp(-clamp_log_ratio, clamp_log_ratio)
    return estimator(log_r)  # [B, T]


def kl_in_reward(rewards_per_seq: torch.Tensor, kl_per_seq: torch.Tensor, coef: float) -> torch.Tensor:
    """PPO-style KL penalty in the reward: r - coef * KL, per sequence [B] (NaN rewards stay NaN).

    Example: rewards [1, 0], KL [0.5, 2], coef 0.1 -> [0.95, -0.2].
    """
    return rewards_per_seq - coef * kl_per_seq  # [B]


# ---- coefficient controllers ------------------------------------------------------------------------------
@KL_CONTROLLERS.register("fixed")
class FixedKLController:
    """A constant KL coefficient; ``update`` does nothing."""

    def __init__(self, kl_coef: float):
        self.value = float(kl_coef)

    def update(self, observed_kl: float, n_steps: int) -> None:
        return None

    def state_dict(self) -> dict[str, float]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.value = float(state["value"])


@KL_CONTROLLERS.register("adaptive")
class AdaptiveKLController:
    """Ziegler et al. 2019 proportional controller driving the observed KL toward ``target``.

    Example: init 0.1, target 1, horizon 100. update(1.5, 10): e = clip(0.5) = 0.2, value = 0.1 * 1.02 = 0.102.
    update(0.9, 10): e = -0.1, value = 0.102 * 0.99 = 0.10098.
    """

    def __init__(self, init_kl_coef: float, target: float, horizon: float):
        if target <= 0:
            raise ConfigError("algorithm.kl.adaptive.target", f"must be > 0 for the adaptive controller, got {target}")
        if horizon <= 0:
            raise ConfigError("algorithm.kl.adaptive.horizon", f"must be > 0 (steps), got {horizon}")
        self.value = float(init_kl_coef)
        self.target = float(target)
        self.horizon = float(horizon)

    def update(self, observed_kl: float, n_steps: int) -> None:
        error = min(max(observed_kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon

    def state_dict(self) -> dict[str, float]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.value = float(state["value"])


# ---- entropy ----------------------------------------------------------------------------------------------
def masked_entropy(logits: torch.Tensor, mask: torch.Tensor, chunk_size: int = 1024) -> torch.Tensor:
    """Mean entropy (nats) of softmax(logits) over counted tokens; a 0-dim tensor, 0 when nothing counts.

    logits [B, T, V], mask [B, T] (1.0 counted). Positions are processed ``chunk_size`` at a time in fp32,
    H = logsumexp(l) - sum softmax(l) * l; -inf logits (banned tokens) are allowed. Differentiable; call it
    under ``torch.no_grad()`` when only logging.
    Example: logits [[[0, 0]]] (a fair coin) -> ln 2 = 0.6931.
    """
    flat = logits.reshape(-1, logits.shape[-1])  # [B*T, V]
    weights = mask.reshape(-1).to(torch.float32)  # [B*T]
    total = torch.zeros((), dtype=torch.float32, device=logits.device)
    for start in range(0, flat.shape[0], chunk_size):
        chunk = flat[start : start + chunk_size].float()  # [c, V]
        probs = torch.softmax(chunk, dim=-1)  # [c, V]
        finite = torch.where(torch.isfinite(chunk), chunk, torch.zeros_like(chunk))  # -inf logits: p = 0, term 0
        entropy = torch.logsumexp(chunk, dim=-1) - (probs * finite).sum(dim=-1)  # [c]
        total = total + (entropy * weights[start : start + chunk_size]).sum()
    return total / weights.sum().clamp(min=1.0)
