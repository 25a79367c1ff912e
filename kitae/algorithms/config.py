"""The ``algorithm:`` section of a training config: the advantage estimator, the policy loss with its settings,
the KL term, DAPO's dynamic sampling and the update's safeguards.

A loss's settings are its own class beside it (kitae.algorithms.losses: ``GrpoSettings``, ``DapoSettings``, ...),
an estimator's beside it (kitae.algorithms.advantages). The section reads them as ``loss: NAME`` or
``loss: {type: NAME, ...its settings}``, and keeps today's form too: the settings written beside the name
(``loss: kimi`` with ``kimi_tau: 0.1``, ``loss: dapo`` with ``eps_high: 0.3``) go to the loss; one the loss does
not take is an error naming the losses that take it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from kitae.algorithms.advantages import AdvantageSettings
from kitae.algorithms.losses import LossSettings
from kitae.config import setting
from kitae.errors import ConfigError

# The loss settings a config.yaml saved before each loss had its own settings holds, every one of them written
# whatever the loss (see :func:`upgrade_saved_algorithm`).
SAVED_LOSS_KEYS = ("eps_low", "eps_high", "gspo_eps_low", "gspo_eps_high", "cispo_eps_high", "aggregation", "kimi_tau")


@dataclass
class AdaptiveKL:
    target: float = setting(0.1, above=0)  # the KL per token the controller steers to
    horizon: int = setting(10000, minimum=1)  # how fast it steers (steps x samples), as in Ziegler et al.


@dataclass
class KLConfig:
    coef: float = setting(0.0, minimum=0)  # 0: no reference model is loaded
    estimator: Literal["k1", "k2", "k3"] = "k3"  # the KL estimator (k3: Schulman's unbiased, low-variance one)
    where: Literal["loss", "reward"] = "loss"  # a KL term in the loss, or subtracted from the reward
    adaptive: AdaptiveKL | None = None


@dataclass
class DynamicSampling:
    enabled: bool = False  # resample groups whose rewards are all equal (DAPO)
    max_rounds: int = setting(3, minimum=1)  # generation rounds per step before training on what there is


@dataclass
class AlgorithmConfig:
    """The RL algorithm: advantage estimator, policy loss and the loss's settings.

    ``loss``: grpo | dapo | dr_grpo | gspo | cispo | kimi, alone or ``{type: NAME, ...its settings}``; its settings
    may also be written beside it in this section, as before (``loss: dapo`` with ``eps_high: 0.3``). A setting
    left out takes the loss's own default (``dapo``: eps_high 0.28, token_mean; ``dr_grpo``: seq_sum_constant;
    ``cispo``: token_mean); the saved config.yaml shows every value that ran. ``advantage`` left out: the one the
    loss's paper uses (``dr_grpo`` for the dr_grpo and kimi losses), else ``grpo``.
    """

    flat_settings: ClassVar[tuple[str, ...]] = ("loss",)  # the loss's settings written beside it (today's keys)

    advantage: AdvantageSettings | None = None  # grpo | dr_grpo | rloo | batch_std | reinforce_pp; default: the
    # loss's pair (dr_grpo, r - group mean, for the dr_grpo and kimi losses, as their papers), else grpo
    loss: LossSettings = LossSettings.default("grpo")  # the policy loss and its settings
    mu: int = setting(1, minimum=1)  # optimization passes over each batch
    kl: KLConfig = field(default_factory=KLConfig)
    dynamic_sampling: DynamicSampling = field(default_factory=DynamicSampling)
    mask_truncated: bool = False  # DAPO overlong filtering
    reset_optimizer: bool = False  # Kimi k1.5: fresh optimizer state each iteration
    max_steps_without_reward: int | None = 3  # after this many steps in a row in which no sample got a reward
    # (every component abstained or failed on every sample), save a checkpoint and stop with an error; 0 or null:
    # never stop
    component_without_reward: Literal["stop", "warn"] = "stop"  # stop (as above, after that many steps in a row
    # in which one component gave no sample a finite score) or warn (for a component meant to abstain on whole
    # steps); either way a warning at the first such step
    tis_cap: float | None = 2.0  # engine server: per-token weight min(pi_train_old / pi_server, tis_cap) on the
    # loss (truncated importance sampling, kitae/algorithms/mismatch.py); null = no weight (the ratio still uses
    # the trainer's log-probs)

    def resolve(self, path: str) -> None:
        """Fill in the advantage left out: the loss's paired one."""
        if self.advantage is None:
            self.advantage = AdvantageSettings.read(self.loss.paired_advantage, f"{path}.advantage")

    def validate(self, path: str) -> None:
        if self.max_steps_without_reward is not None and self.max_steps_without_reward < 0:
            raise ConfigError(f"{path}.max_steps_without_reward",
                              f"must be 0 or more (0 or null: never stop), got {self.max_steps_without_reward}")
        if self.tis_cap is not None and self.tis_cap < 1:
            raise ConfigError(f"{path}.tis_cap", f"must be >= 1 (or null for no correction), got {self.tis_cap}: "
                              "a cap below 1 would shrink every token's weight")


def upgrade_saved_algorithm(section: Any) -> None:
    """A config.yaml saved before each loss had its own settings writes all of SAVED_LOSS_KEYS beside the loss's
    name, also those its loss never read (gspo_eps_low for a grpo run). Such a section (every one of them there)
    keeps only the settings its loss takes, so the run it saved reads back and resumes; a config with some of them
    written for a loss that does not take them is still an error."""
    if not isinstance(section, dict) or not isinstance(section.get("loss", "grpo"), str):
        return
    if not all(key in section for key in SAVED_LOSS_KEYS):
        return
    try:
        taken = LossSettings.settings_class(section.get("loss", "grpo"), "algorithm.loss").__dataclass_fields__
    except ConfigError:
        return  # an unknown loss: reading the section names it
    for key in SAVED_LOSS_KEYS:
        if key not in taken:
            del section[key]
