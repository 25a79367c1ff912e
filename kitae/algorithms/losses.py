"""Policy losses: small pure functions registered by name in :data:`POLICY_LOSSES`.

Every loss takes :class:`LossInputs` (per-token log-probs [B, T], one advantage per sequence [B], a mask),
a :class:`LossConfig` and a :class:`Normalizer`, and returns ``(scalar loss, metrics)``. Notation: ratio
rho_t = exp(logp_t - old_logp_t); A the sequence's advantage. Papers and equations are named per loss below.

- ``grpo``    PPO clipped surrogate per token, -min(rho A, clip(rho, 1 - eps_low, 1 + eps_high) A)
              (DeepSeekMath arXiv 2402.03300 Eq. 3), aggregated per its ``aggregation`` setting.
- ``dapo``    the grpo loss with aggregation ``token_mean`` and clip-higher eps_high = 0.28 (DAPO,
              arXiv 2503.14476 Eq. 8-10). Dynamic sampling and overlong filtering are separate:
              ``advantages.dynamic_sampling_keep`` and :func:`truncation_mask`.
- ``dr_grpo`` the grpo loss with aggregation ``seq_sum_constant`` (Dr. GRPO, arXiv 2503.20783); needs
              ``max_completion_length``. Pairs with the ``dr_grpo`` advantage (no std division).
- ``gspo``    GSPO (arXiv 2507.18071 Eq. 5-7): sequence ratio s = exp(mean_t log rho), -min(s A, clip(s, 1 -
              gspo_eps_low, 1 + gspo_eps_high) A) per sequence, averaged over sequences (no aggregation
              setting: the loss is sequence-level by definition).
- ``cispo``   aggregation ``token_mean`` by default: -sg(min(rho, 1 + cispo_eps_high)) A logp (MiniMax-M1, arXiv
              2506.13585 Eq. 4). No lower bound on the weight (the paper sets eps_low^IS large and tunes only
              eps_high^IS); cispo_eps_high = 0.28 is the DAPO clip-higher value, the default of Trinity-RFT's
              CISPO (the paper does not publish its value). The value of this loss is not meaningful, only
              its gradient.
- ``kimi``    Kimi k1.5 online mirror descent (arXiv 2501.12599 §2.3.2): per sequence
              (A - tau * (log pi(y) - log pi_old(y)))^2 / (2 tau), averaged over sequences, with A = r - mean(r)
              (use the ``dr_grpo`` advantage) and log pi(y) the sum of the token log-probs. The 1/(2 tau) factor
              is ours: it makes the gradient equal, sign aside, the paper's
              (1/k) sum_j [grad log pi(y_j) (r_j - r_bar) - (tau/2) grad (log pi(y_j)/pi_i(y_j))^2]
              exactly, so at pi = pi_old the step is the REINFORCE step -A grad log pi(y) whatever tau is, and tau
              only sets the pull back toward pi_old. The loss value includes the constant A^2 / (2 tau).
              tau = 0.1 is our default; the paper gives no value. No aggregation setting (sequence-level).

Settings: each loss declares its own, a :class:`LossSettings` subclass beside it registered with it (grpo:
eps_low, eps_high, aggregation; dapo and dr_grpo: the same with their papers' defaults; gspo: gspo_eps_low,
gspo_eps_high; cispo: cispo_eps_high, aggregation; kimi: kimi_tau). A loss's defaults are its settings'
defaults, written there only: ``loss: dapo`` alone runs with eps_high 0.28 and token_mean, ``loss: dapo`` with
``eps_high: 0.2`` with 0.2. A loss runs with the :class:`LossConfig` it is given (its settings plus what the run
adds), as given; the training config builds it (``TrainConfig.loss_config``).

KL in the loss (GRPO Eq. 3): when ``cfg.kl_coef > 0`` the per-token ``kl_coef * KL(pi || pi_ref)`` estimate is
added and aggregated the same way as the policy term (for gspo and kimi: mean over tokens, then sequences).

Sampler mismatch: ``LossInputs.is_weight`` [B, T] (truncated importance weights, kitae.algorithms.mismatch)
multiplies every loss's per-token policy term before the KL term is added. For the sequence-level gspo and kimi
losses this weighs each sequence's loss by the mean weight of its tokens.

Numerical guard (as verl has it): every ratio is ``exp(clamp(log_ratio, -20, 20))`` (:data:`LOG_RATIO_LIMIT`;
for gspo the sequence's log-ratio is clamped). Without it a token at log-ratio 89 has ratio inf in float32, and
with a negative advantage an inf loss and gradient that turn the weights into NaN at the optimizer step; clamped,
the term is finite and has no gradient beyond the limit. Kimi's loss uses the log-ratio itself (no exp) and is
not clamped: its pull toward pi_old must reach exactly such tokens.

Aggregation (:func:`aggregate`) divides by the :class:`Normalizer`'s full optimizer-batch counts, never by
the micro-batch's own, so micro-batch losses sum to the full-batch loss: gradient accumulation is exact. In
multi-process runs the counts are summed over the processes (:meth:`Normalizer.over_processes`), so the
averaged gradient is the full-batch gradient however the tokens split across processes.
Padding positions (mask 0) may hold any value, even -inf; they never reach the loss or its gradient.

Rows that cannot change the gradient (:func:`rows_without_gradient`): a row with no counted token never does;
with no KL term in the loss, neither does a row whose advantage is 0 under a loss whose every term is the
advantage times something finite (``zero_at_zero_advantage``: grpo, dapo, dr_grpo, gspo, cispo; not kimi, whose
(A - tau delta)^2 pulls toward pi_old whatever A is). The trainer leaves those rows out of the forward and
backward; the :class:`Normalizer` is still built from every row, so each aggregation divides by the same
counts as for the full batch and the gradient is the full batch's.

Metrics (plain floats, means over this micro-batch's counted tokens; weight by ``num_tokens`` to combine):
``clip_frac`` (tokens whose ratio was clipped where clipping removes the gradient; for cispo tokens whose
weight was truncated; for gspo tokens of clipped sequences), ``clip_frac_low``, ``clip_frac_high``,
``ratio_mean``, ``kl`` (when ``ref_logp`` is given, even with kl_coef 0), ``num_tokens``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Sequence

import torch

from kitae.algorithms.kl import KL_ESTIMATORS, kl_estimate
from kitae.config import Variant, check_bounds, check_numbers, setting
from kitae.errors import ConfigError
from kitae.registry import Registry

POLICY_LOSSES = Registry("policy loss")
AGGREGATIONS = Registry("loss aggregation")
LOG_RATIO_LIMIT = 20.0  # verl's clamp of the log-ratio before exp: a ratio stays within [e^-20, e^20]


@dataclass
class LossInputs:
    logp: torch.Tensor  # [B, T] log-probs of the taken tokens under the current policy (requires grad)
    old_logp: torch.Tensor  # [B, T] under the sampling policy (no grad)
    advantages: torch.Tensor  # [B] one per sequence
    mask: torch.Tensor  # [B, T] 1.0 for completion tokens that count, else 0.0 (an agent's tool results and
    # template tokens never count: kitae.rollout.trajectory; so every token mean and count is over sampled tokens)
    ref_logp: torch.Tensor | None = None  # [B, T] reference policy, for KL in the loss
    is_weight: torch.Tensor | None = None  # [B, T] truncated importance weights of the sampler (no grad)


# ---- settings: each loss's own, a dataclass beside it, registered with it -----------------------------------
@dataclass
class LossSettings(Variant):
    """The settings of a policy loss (``algorithm.loss``): every loss's settings subclass this and are registered
    with the loss (``POLICY_LOSSES.register(name, fn, settings=...)``). A loss's defaults are its settings' defaults,
    so a preset of another loss (dapo, dr_grpo) is a subclass with other defaults. Bounds (``setting(minimum=...)``)
    are checked when a config is read and by :meth:`LossConfig.validate`."""

    registry: ClassVar[Registry] = POLICY_LOSSES
    kind: ClassVar[str] = "loss"
    paired_advantage: ClassVar[str] = "grpo"  # the advantage estimator its paper uses, when the config names none


@dataclass
class GrpoSettings(LossSettings):
    eps_low: float = setting(0.2, minimum=0)  # PPO clip range: ratio in [1 - eps_low, 1 + eps_high]
    eps_high: float = setting(0.2, minimum=0)  # the upper side of that range
    aggregation: str = "seq_mean_token_mean"  # token terms to a loss: seq_mean_token_mean | token_mean |
    # seq_sum_constant (AGGREGATIONS)

    def validate(self, path: str) -> None:
        AGGREGATIONS.get(self.aggregation, path=f"{path}.aggregation")


@dataclass
class DapoSettings(GrpoSettings):
    """DAPO (arXiv 2503.14476 Eq. 8-10): clip-higher and token-level aggregation."""

    eps_high: float = setting(0.28, minimum=0)  # clip-higher
    aggregation: str = "token_mean"  # every token of the batch weighs the same


@dataclass
class DrGrpoSettings(GrpoSettings):
    """Dr. GRPO (arXiv 2503.20783): a constant divisor (needs max_completion_length), r - mean(r) advantages."""

    paired_advantage: ClassVar[str] = "dr_grpo"
    aggregation: str = "seq_sum_constant"  # token sums over a constant (the max completion length)


@dataclass
class GspoSettings(LossSettings):
    """GSPO: the sequence ratio's clip range (the paper's values); sequence-level, so no aggregation."""

    gspo_eps_low: float = setting(3e-4, minimum=0)  # the sequence ratio's clip range: [1 - this, 1 + gspo_eps_high]
    gspo_eps_high: float = setting(4e-4, minimum=0)  # its upper side


@dataclass
class CispoSettings(LossSettings):
    cispo_eps_high: float = setting(0.28, minimum=0)  # importance weights capped at 1 + this; no lower bound
    aggregation: str = "token_mean"  # as grpo's aggregation

    def validate(self, path: str) -> None:
        AGGREGATIONS.get(self.aggregation, path=f"{path}.aggregation")


@dataclass
class KimiSettings(LossSettings):
    """Kimi k1.5 (r - mean(r) advantages, as the paper): tau, the pull toward the sampling policy."""

    paired_advantage: ClassVar[str] = "dr_grpo"
    kimi_tau: float = setting(0.1, above=0)  # relative-entropy regularization strength; the paper gives no value


@dataclass
class LossConfig:
    """What a policy loss runs with: its own settings (:class:`LossSettings`, from ``algorithm.loss``) and what
    the run adds (the completion length of seq_sum_constant, the KL term's weight and estimator)."""

    settings: LossSettings = field(default_factory=lambda: GrpoSettings(type="grpo"))
    max_completion_length: int | None = setting(None, minimum=1)  # the constant of seq_sum_constant (Dr. GRPO)
    kl_coef: float = setting(0.0, minimum=0)  # + kl_coef * KL per token, aggregated like the policy term
    kl_estimator: str = "k3"  # k1 | k2 | k3 (kitae.algorithms.kl)

    @classmethod
    def for_loss(cls, name: str, *, max_completion_length: int | None = None, kl_coef: float = 0.0,
                 kl_estimator: str = "k3", **settings: Any) -> "LossConfig":
        """Loss ``name`` with ``settings`` as given (None counts as not given) and its own defaults for the rest.

        >>> LossConfig.for_loss("dapo").settings.eps_high, LossConfig.for_loss("dapo", eps_high=0.2).settings.eps_high
        (0.28, 0.2)
        >>> LossConfig.for_loss("dapo", eps_high=None).settings.aggregation
        'token_mean'
        """
        given = {k: v for k, v in settings.items() if v is not None}
        return cls(LossSettings.read({"type": name, **given}, "algorithm.loss"), max_completion_length, kl_coef,
                   kl_estimator)

    def validate(self, path: str = "algorithm") -> None:
        """Raise ConfigError naming the field (as a key path under ``path``) when a value cannot work."""
        for f in dataclasses.fields(self):
            if f.name != "settings":
                check_bounds(f, getattr(self, f.name), key_path(f.name, path))
        check_numbers(self.settings, path)  # a flat key: algorithm.eps_low
        if hasattr(self.settings, "validate"):
            self.settings.validate(path)
        KL_ESTIMATORS.get(self.kl_estimator, path=key_path("kl_estimator", path))


# LossConfig field -> its key in the training config (kitae/trainer/config.py), for error messages.
CONFIG_KEYS = {"kl_coef": "kl.coef", "kl_estimator": "kl.estimator"}


def key_path(field_name: str, path: str = "algorithm") -> str:
    """Where a LossConfig field lives in the training config: key_path("kl_coef") -> "algorithm.kl.coef"."""
    key = CONFIG_KEYS.get(field_name, field_name)
    return f"{path}.{key}" if path else key


@dataclass
class Normalizer:
    """Full optimizer-batch counts, so micro-batch losses SUM to the full-batch loss.

    Build it once per optimizer step from every micro-batch's mask and hand the same object to every
    micro-batch's :func:`policy_loss`; then ``backward()`` each micro-batch loss without rescaling.

    In a multi-process run each process holds part of the batch and DDP *averages* the gradients, so the
    counts must be those of the whole batch over all processes, and each process's share is multiplied by the
    number of processes (:meth:`over_processes`). A token's weight then does not depend on how the tokens split
    across processes: the gradient is the single-process full-batch gradient (TRL's ``dapo`` normalization).
    """

    num_sequences: int  # sequences with a counted token in the whole optimizer batch (micro-batches, processes)
    num_tokens: int  # counted tokens in the whole optimizer batch
    num_rows: int | None = None  # every row, masked ones included (Dr. GRPO's divisor); None: num_sequences
    processes: int = 1  # processes whose gradients DDP averages

    def __post_init__(self) -> None:
        if self.num_rows is None:
            self.num_rows = self.num_sequences

    @classmethod
    def from_masks(cls, masks: Sequence[torch.Tensor]) -> "Normalizer":
        """Counts over micro-batch masks [b, T]. A sequence counts when it has at least one counted token (so
        a truncated sample zeroed by :func:`truncation_mask` drops out of the mean); a row always counts.

        >>> Normalizer.from_masks([torch.tensor([[1.0, 1.0, 0.0]]), torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])])
        Normalizer(num_sequences=2, num_tokens=3, num_rows=3, processes=1)
        """
        seqs = sum(int((m.sum(dim=-1) > 0).sum()) for m in masks)
        tokens = sum(int(m.sum()) for m in masks)
        rows = sum(int(m.shape[0]) for m in masks)
        return cls(num_sequences=seqs, num_tokens=tokens, num_rows=rows)

    def over_processes(self, reduce_sum: Callable[[torch.Tensor], torch.Tensor], processes: int) -> "Normalizer":
        """This process's counts summed over all `processes` (``reduce_sum`` all-reduces a tensor with a sum,
        e.g. ``lambda t: accelerator.reduce(t, "sum")``). Every process must call it (a collective call).

        >>> Normalizer(2, 5, 3).over_processes(lambda t: t * 2, 2)  # two processes with equal counts
        Normalizer(num_sequences=4, num_tokens=10, num_rows=6, processes=2)
        """
        if processes == 1:
            return self
        counts = torch.tensor([self.num_sequences, self.num_tokens, self.num_rows], dtype=torch.long)
        seqs, tokens, rows = (int(c) for c in reduce_sum(counts).tolist())
        return Normalizer(num_sequences=seqs, num_tokens=tokens, num_rows=rows, processes=processes)

    def divisor(self, count: int) -> float:
        """What one process divides its sum by: the batch's count over the processes (their average is then
        the full-batch mean)."""
        return max(count, 1) / self.processes


# ---- aggregation ------------------------------------------------------------------------------------------
@AGGREGATIONS.register("seq_mean_token_mean")
def _seq_mean_token_mean(v: torch.Tensor, m: torch.Tensor, norm: Normalizer, max_len: int | None) -> torch.Tensor:
    per_seq = (v * m).sum(dim=-1) / m.sum(dim=-1).clamp(min=1.0)  # [B] token mean of each sequence
    return per_seq.sum() / norm.divisor(norm.num_sequences)


@AGGREGATIONS.register("token_mean")
def _token_mean(v: torch.Tensor, m: torch.Tensor, norm: Normalizer, max_len: int | None) -> torch.Tensor:
    return (v * m).sum() / norm.divisor(norm.num_tokens)


@AGGREGATIONS.register("seq_sum_constant")
def _seq_sum_constant(v: torch.Tensor, m: torch.Tensor, norm: Normalizer, max_len: int | None) -> torch.Tensor:
    if not max_len:
        raise ConfigError(key_path("max_completion_length"), "aggregation 'seq_sum_constant' (Dr. GRPO) "
                          "needs it: pass the rollout's max completion length (sampling.max_new_tokens)")
    return (v * m).sum() / max_len / norm.divisor(norm.num_rows)


def aggregate(
    values: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    norm: Normalizer,
    max_completion_length: int | None = None,
) -> torch.Tensor:
    """Reduce per-token values [B, T] to a scalar share of the full-batch loss.

    seq_mean_token_mean: sum_i (sum_t v m / len_i) / norm.num_sequences
    token_mean:          sum(v m) / norm.num_tokens
    seq_sum_constant:    sum_i (sum_t v m / max_completion_length) / norm.num_rows    (masked rows count too)

    each multiplied by ``norm.processes`` (DDP averages the processes' gradients; see :class:`Normalizer`).

    Example: v [[1, 3], [5, 0]], mask [[1, 1], [1, 0]], norm (2 seqs, 3 tokens, 2 rows), max len 4 ->
    seq_mean_token_mean (2 + 5)/2 = 3.5; token_mean 9/3 = 3; seq_sum_constant (4/4 + 5/4)/2 = 1.125.
    """
    fn = AGGREGATIONS.get(mode, path=key_path("aggregation"))
    return fn(values, mask.to(values.dtype), norm, max_completion_length)


# ---- shared pieces ----------------------------------------------------------------------------------------
def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> float:
    return float((values * mask).sum() / mask.sum().clamp(min=1.0))


def _prepare(inp: LossInputs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """fp32 (mask, log-ratio, advantages[:, None]); the log-ratio is 0 on padding, so exp() stays finite."""
    mask = inp.mask.float()  # [B, T]
    keep = mask > 0
    log_ratio = torch.where(keep, inp.logp.float() - inp.old_logp.float(), torch.zeros_like(mask))  # [B, T]
    return mask, log_ratio, inp.advantages.float().unsqueeze(-1)  # [B, T], [B, T], [B, 1]


def _ratio(log_ratio: torch.Tensor) -> torch.Tensor:
    """exp of the log-ratio clamped to ±LOG_RATIO_LIMIT: finite, and no gradient beyond the limit (shape kept)."""
    return torch.exp(log_ratio.clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT))


def _zero_at_zero_advantage(fn: Callable) -> Callable:
    """Mark a loss whose per-token terms are the advantage times something finite: at A = 0 the term and its
    gradient are exactly 0 (:func:`rows_without_gradient`)."""
    fn.zero_at_zero_advantage = True
    return fn


def _per_sequence(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Broadcast one value per sequence [B] over its tokens [B, T]: with seq_mean_token_mean each sequence
    then contributes exactly its value."""
    return values.unsqueeze(-1).expand_as(mask)  # [B, T]


def _finish(
    pg: torch.Tensor, inp: LossInputs, cfg: LossConfig, norm: Normalizer, mode: str, metrics: dict[str, float]
) -> tuple[torch.Tensor, dict[str, float]]:
    """Weight by the sampler's importance weights, add the KL term, aggregate, add the shared metrics."""
    mask = inp.mask.float()  # [B, T]
    if inp.is_weight is not None:  # TIS (kitae.algorithms.mismatch): the policy term only, as TRL and veRL do
        pg = pg * inp.is_weight.float()  # [B, T]
    if inp.ref_logp is not None:
        keep = mask > 0
        logp = torch.where(keep, inp.logp.float(), torch.zeros_like(mask))  # [B, T]
        ref = torch.where(keep, inp.ref_logp.float(), torch.zeros_like(mask))  # [B, T]
        kl = kl_estimate(logp, ref, cfg.kl_estimator, config_path=key_path("kl_estimator"))  # [B, T]
        metrics["kl"] = _masked_mean(kl.detach(), mask)
        if cfg.kl_coef:
            pg = pg + cfg.kl_coef * kl  # [B, T]
    elif cfg.kl_coef:
        raise ConfigError(key_path("kl_coef"), f"is {cfg.kl_coef} but no reference log-probs were given; "
                          "compute ref_logp or set kl_coef to 0")
    metrics["num_tokens"] = float(mask.sum())
    return aggregate(pg, mask, mode, norm, cfg.max_completion_length), metrics


def _clip_metrics(ratio, adv, lo, hi, mask) -> dict[str, float]:
    """Where the clipped branch wins, the gradient is zero: ratio below 1-eps with A<0, above 1+eps with A>0."""
    low = ((ratio < lo) & (adv < 0)).float()  # [B, T]
    high = ((ratio > hi) & (adv > 0)).float()  # [B, T]
    return {
        "clip_frac": _masked_mean(low + high, mask),
        "clip_frac_low": _masked_mean(low, mask),
        "clip_frac_high": _masked_mean(high, mask),
    }


# ---- losses -----------------------------------------------------------------------------------------------
@POLICY_LOSSES.register("grpo", settings=GrpoSettings)
@_zero_at_zero_advantage
def grpo_loss(inp: LossInputs, cfg: LossConfig, norm: Normalizer) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped surrogate. Example (eps 0.2, one sequence of 2 tokens, A = 1, old_logp = 0):
    logp [ln 1.5, ln 0.9] -> rho [1.5, 0.9] -> per token -[min(1.5, 1.2), 0.9] = [-1.2, -0.9] ->
    seq_mean_token_mean loss -1.05; only the first token is clipped (clip_frac 0.5)."""
    s: GrpoSettings = cfg.settings
    mask, log_ratio, adv = _prepare(inp)
    ratio = _ratio(log_ratio)  # [B, T]
    clipped = ratio.clamp(1 - s.eps_low, 1 + s.eps_high)  # [B, T]
    pg = -torch.minimum(ratio * adv, clipped * adv)  # [B, T]
    r = ratio.detach()
    metrics = _clip_metrics(r, adv, 1 - s.eps_low, 1 + s.eps_high, mask)
    metrics["ratio_mean"] = _masked_mean(r, mask)
    return _finish(pg, inp, cfg, norm, s.aggregation, metrics)


@POLICY_LOSSES.register("gspo", settings=GspoSettings)
@_zero_at_zero_advantage
def gspo_loss(inp: LossInputs, cfg: LossConfig, norm: Normalizer) -> tuple[torch.Tensor, dict[str, float]]:
    """Sequence-level clipped surrogate. Example (eps 3e-4/4e-4, A = 1): token log-ratios [0.01, -0.002]
    -> s = exp(0.004) = 1.004008 > 1.0004 -> loss -min(1.004008, 1.0004) = -1.0004, no gradient."""
    mask, log_ratio, adv = _prepare(inp)
    seq_log_ratio = (log_ratio * mask).sum(dim=-1) / mask.sum(dim=-1).clamp(min=1.0)  # [B]
    s = _ratio(seq_log_ratio)  # [B]
    a = adv.squeeze(-1)  # [B]
    lo, hi = 1 - cfg.settings.gspo_eps_low, 1 + cfg.settings.gspo_eps_high
    per_seq = -torch.minimum(s * a, s.clamp(lo, hi) * a)  # [B]
    s_tok = _per_sequence(s.detach(), mask)  # [B, T]
    metrics = _clip_metrics(s_tok, adv, lo, hi, mask)
    metrics["ratio_mean"] = _masked_mean(_ratio(log_ratio).detach(), mask)
    metrics["seq_ratio_mean"] = float(s.detach().mean()) if s.numel() else 1.0
    return _finish(_per_sequence(per_seq, mask), inp, cfg, norm, "seq_mean_token_mean", metrics)


@POLICY_LOSSES.register("cispo", settings=CispoSettings)
@_zero_at_zero_advantage
def cispo_loss(inp: LossInputs, cfg: LossConfig, norm: Normalizer) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped IS-weight policy gradient. Example (cispo_eps_high 0.28, A = 2): rho [1.5, 0.5], logp
    [-1, -2] -> weights sg([1.28, 0.5]) -> per token -[1.28*2*(-1), 0.5*2*(-2)] = [2.56, 2];
    d loss / d logp = [-2.56, -1] before aggregation."""
    mask, log_ratio, adv = _prepare(inp)
    ratio = _ratio(log_ratio).detach()  # [B, T]
    s: CispoSettings = cfg.settings
    weight = ratio.clamp(max=1 + s.cispo_eps_high)  # [B, T], no gradient through the weight
    logp = torch.where(mask > 0, inp.logp.float(), torch.zeros_like(mask))  # [B, T]
    pg = -weight * adv * logp  # [B, T]
    truncated = (ratio > 1 + s.cispo_eps_high).float()  # [B, T]
    metrics = {
        "clip_frac": _masked_mean(truncated, mask),
        "clip_frac_low": 0.0,
        "clip_frac_high": _masked_mean(truncated, mask),
        "ratio_mean": _masked_mean(ratio, mask),
    }
    return _finish(pg, inp, cfg, norm, s.aggregation, metrics)


@POLICY_LOSSES.register("kimi", settings=KimiSettings)
def kimi_loss(inp: LossInputs, cfg: LossConfig, norm: Normalizer) -> tuple[torch.Tensor, dict[str, float]]:
    """Kimi k1.5 squared surrogate. Example (tau 0.1, A = 1): token log-ratios [0.5, 0.5] -> delta 1 ->
    (1 - 0.1)^2 / 0.2 = 4.05; d loss / d logp_t = -(A - tau delta) = -0.9 for each token."""
    tau = cfg.settings.kimi_tau
    if tau <= 0:
        raise ConfigError(key_path("kimi_tau"), f"must be > 0, got {tau}")
    mask, log_ratio, adv = _prepare(inp)
    delta = (log_ratio * mask).sum(dim=-1)  # [B] log pi(y) - log pi_old(y)
    per_seq = (adv.squeeze(-1) - tau * delta) ** 2 / (2 * tau)  # [B]
    metrics = {"clip_frac": 0.0, "clip_frac_low": 0.0, "clip_frac_high": 0.0,
               "ratio_mean": _masked_mean(_ratio(log_ratio).detach(), mask)}
    return _finish(_per_sequence(per_seq, mask), inp, cfg, norm, "seq_mean_token_mean", metrics)


# the grpo loss under other defaults (its settings' subclasses)
POLICY_LOSSES.register("dapo", grpo_loss, settings=DapoSettings)
POLICY_LOSSES.register("dr_grpo", grpo_loss, settings=DrGrpoSettings)


# ---- entry points -----------------------------------------------------------------------------------------
def _check_inputs(inp: LossInputs) -> None:
    shape = tuple(inp.logp.shape)
    if len(shape) != 2:
        raise ValueError(f"logp must be [B, T], got shape {shape}")
    for name in ("old_logp", "mask", "ref_logp", "is_weight"):
        t = getattr(inp, name)
        if t is not None and tuple(t.shape) != shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)}, logp {shape}; they must match")
    if tuple(inp.advantages.shape) != shape[:1]:
        raise ValueError(f"advantages must be [B] = [{shape[0]}] (one per sequence), "
                         f"got shape {tuple(inp.advantages.shape)}")


def _check_settings(name: str, settings: LossSettings) -> None:
    """Settings that lack one the loss reads (gspo's given grpo's) are a programming error, named here."""
    wanted = LossSettings.settings_class(name, "algorithm.loss")
    missing = {f.name for f in dataclasses.fields(wanted)} - {f.name for f in dataclasses.fields(settings)}
    if missing:
        raise ValueError(f"loss {name!r} reads {', '.join(sorted(missing))}, which {type(settings).__name__} does "
                         f"not have; build its settings with LossConfig.for_loss({name!r}, ...)")


def policy_loss(
    name: str, inp: LossInputs, cfg: LossConfig, norm: Normalizer, *, config_path: str = "algorithm.loss"
) -> tuple[torch.Tensor, dict[str, float]]:
    """(scalar loss, metrics) of the loss registered as ``name`` on one micro-batch, with ``cfg`` as given.

    ``cfg.settings`` must hold the settings the loss reads: ``LossConfig.for_loss(name)`` builds them with the
    loss's defaults (``policy_loss("dapo", inp, LossConfig(), norm)`` is the grpo loss with grpo's settings).

    ``norm`` holds the counts of the whole optimizer batch; summing the returned losses over micro-batches
    gives the full-batch loss. An unknown name raises ConfigError at ``config_path`` with a did-you-mean hint.

    One sequence of two tokens at ratio 1 with A = 1: per token -1, token mean -1; at ratio 1 the gradient is
    -A / len = -0.5 per token.

    >>> logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    >>> inp = LossInputs(logp, logp.detach().clone(), torch.tensor([1.0]), torch.ones(1, 2))
    >>> loss, metrics = policy_loss("grpo", inp, LossConfig(), Normalizer(num_sequences=1, num_tokens=2))
    >>> loss.backward(); loss.item(), logp.grad.tolist(), metrics["clip_frac"]
    (-1.0, [[-0.5, -0.5]], 0.0)
    """
    fn = POLICY_LOSSES.get(name, path=config_path)
    _check_settings(name, cfg.settings)
    cfg.validate()
    _check_inputs(inp)
    return fn(inp, cfg, norm)


def rows_without_gradient(name: str, advantages: torch.Tensor, mask: torch.Tensor, cfg: LossConfig) -> torch.Tensor:
    """[B] bool: rows whose loss term and gradient are exactly 0 under the loss registered as ``name``.

    A row with no counted token (mask all 0) adds nothing to any loss. With ``cfg.kl_coef`` 0 (no KL term in
    the loss), a row with advantage 0 adds nothing either, under the losses marked ``zero_at_zero_advantage``
    (grpo, dapo, dr_grpo, gspo, cispo: every term is A times something finite). Leaving these rows out of the
    forward and backward, with the :class:`Normalizer` of the whole batch, gives the full batch's loss and
    gradient. advantages [B], mask [B, T].

    >>> adv, mask = torch.tensor([1.0, 0.0, 0.0]), torch.tensor([[1.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    >>> rows_without_gradient("grpo", adv, mask, LossConfig()).tolist()
    [False, True, True]
    >>> rows_without_gradient("kimi", adv, mask, LossConfig()).tolist()  # its loss pulls toward pi_old at A = 0
    [False, False, True]
    >>> rows_without_gradient("grpo", adv, mask, LossConfig(kl_coef=0.1)).tolist()  # the KL term has a gradient
    [False, False, True]
    """
    empty = mask.sum(dim=-1) == 0  # [B]
    loss = POLICY_LOSSES.get(name, path="algorithm.loss")
    if cfg.kl_coef or not getattr(loss, "zero_at_zero_advantage", False):
        return empty
    return empty | (advantages == 0)  # [B]


def truncation_mask(
    finish_reasons: Sequence[str], mask: torch.Tensor, reasons: Sequence[str] = ("length",)
) -> torch.Tensor:
    """DAPO overlong filtering (arXiv 2503.14476 §3.4): a copy of ``mask`` [B, T] with the rows of samples
    whose finish reason is in ``reasons`` (default: cut at max length) zeroed, so they leave the loss.

    Example: reasons ["stop", "length"], mask [[1, 1], [1, 1]] -> [[1, 1], [0, 0]].
    """
    if len(finish_reasons) != mask.shape[0]:
        raise ValueError(f"{len(finish_reasons)} finish reasons for {mask.shape[0]} mask rows")
    cut = torch.tensor([r in reasons for r in finish_reasons], dtype=torch.bool, device=mask.device)  # [B]
    return mask * (~cut).to(mask.dtype).unsqueeze(-1)  # [B, T]
