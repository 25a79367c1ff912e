"""The training config: one typed, validated object, saved with the run.

A minimal config is a few lines (everything else has a default):

    name: zero
    data: {train: bundled:arith/train, eval: bundled:arith/test}
    rewards:
      - {name: template, grader: {type: template, min_chars: 1}}
      - {name: correct, grader: {type: answer}}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from kitae.agents.config import EnvironmentConfig, check_environment_sampling
from kitae.algorithms.config import AdaptiveKL, AlgorithmConfig, DynamicSampling, KLConfig, upgrade_saved_algorithm
from kitae.config import apply_overrides, from_dict, read_yaml, setting, to_dict
from kitae.errors import ConfigError
from kitae.models import LoraConfig, ModelConfig
from kitae.rollout.partial import PartialRolloutConfig
from kitae.scoring.config import EvalConfig, RewardConfig, default_eval_grader
from kitae.trainer.loggers import LoggingConfig
from kitae.trainer.optim import OptimConfig
from kitae.trainer.prompt_sets import DataConfig, load_data, resolve_data_path
from kitae.trainer.alarms import AlarmsConfig
from kitae.trainer.samplers import upgrade_saved_sampler
from kitae.rollout.base import EngineSettings

if TYPE_CHECKING:
    from kitae.algorithms.losses import LossConfig

# Each section's class lives beside the code that reads it; these names are this module's for the modules and
# tests that import them from here.
__all__ = ["AdaptiveKL", "AlgorithmConfig", "DataConfig", "DynamicSampling", "EvalConfig", "KLConfig", "LoraConfig",
           "LoggingConfig", "ModelConfig", "OptimConfig", "PartialRolloutConfig", "RepeatConfig", "RewardConfig",
           "SamplingConfig", "TrainConfig", "default_eval_grader", "load_data",
           "load_train_config", "resolve_data_path"]


@dataclass
class RepeatConfig:
    """Repeat detection during generation: a sample whose last tokens are one block of 1..max_period tokens
    repeated at least min_count times in a row, covering at least min_span tokens, ends with finish reason
    "repeat". `penalty` (e.g. -1.0) becomes a reward component named 'repeat' (0 for other samples)."""

    min_count: int = 4  # repeats of the block
    max_period: int = 16  # the longest block, in tokens
    min_span: int = 16  # tokens the repeats must cover
    penalty: float = 0.0  # the repeat component's score for such a sample; 0 = no component


@dataclass
class SamplingConfig:
    """How rollouts are sampled. ``engine: hf`` samples in the trainer's process with its own model; ``engine:
    server`` asks inference servers (``servers``: vLLM, SGLang or ``kitae serve model`` replicas) and pushes the
    trainer's weights to them after optimizer steps (``sync``; kitae/rollout/server.py, kitae/rollout/sync.py).
    An engine's settings are its own (kitae.rollout.base.EngineSettings; the server engine's ServerSettings):
    ``engine: {type: server, servers: [...]}``, or as configs always wrote them, beside ``engine`` here."""

    flat_settings: ClassVar[tuple[str, ...]] = ("engine",)  # sampling.servers, sampling.sync, ...: the engine's
    engine: EngineSettings = EngineSettings.default("hf")  # hf | server (kitae.rollout.base.ENGINES)
    group_size: int = 8  # samples per prompt (G)
    temperature: float = setting(1.0, minimum=0)  # 0: greedy
    top_p: float = setting(1.0, above=0, maximum=1)  # nucleus sampling; 1 = off
    top_k: int = 0  # 0 (or -1): no top-k
    repetition_penalty: float = setting(1.0, above=0)  # transformers' repetition penalty; 1 = off
    max_new_tokens: int = setting(64, minimum=1)  # with partial rollouts: the total over every segment
    partial: PartialRolloutConfig | None = None  # null = whole trajectories each iteration
    repeat: RepeatConfig | None = None  # null = no repeat detection
    max_staleness: int | None = setting(None, minimum=0)  # how many policy versions old a sample may be: with
    # async, the most steps the rollouts run ahead of the update (default 1); server: replies from weights older
    # than this are dropped (and counted) (default 0, sync); reading the config fills it in. An async run's resume
    # cannot lower it (its checkpoint holds the groups sampled that far ahead)
    # ---- overlap ----
    async_: bool = setting(False, key="async")  # generate the next steps' rollouts while this step updates (a
    # rollout worker process with its own copy of the model, engine hf; requests in flight, engine server), at
    # most max_staleness policy versions behind; the update corrects for the lag (algorithm.tis_cap)

    def resolve(self, path: str) -> None:
        """Fill in max_staleness left out."""
        if self.max_staleness is None:
            self.max_staleness = 1 if self.async_ else 0

    def validate(self, path: str) -> None:
        if self.async_:
            self.check_async(path)
        self.engine.check_sampling(self, path)

    def check_async(self, path: str) -> None:
        """What ``async: true`` cannot run with, refused with the fix (the engine's own: its check_sampling)."""
        if self.max_staleness < 1:
            raise ConfigError(f"{path}.max_staleness", "is 0 with async: true, but async rollouts are at least one "
                              "policy version behind; set max_staleness to 1 or more, or async: false")
        if self.partial is not None:
            raise ConfigError(f"{path}.async", "does not combine with partial rollouts (sampling.partial): their "
                              "replay buffer continues trajectories with the policy of each step; set one of them "
                              "off")


@dataclass
class TrainConfig:
    name: str = "run"  # the run's name: its folder is OUTPUT_DIR/NAME
    output_dir: str = "runs"  # where run folders go
    seed: int = 0  # sampling, the prompt order and new LoRA weights follow it
    threads: int | None = None  # torch CPU threads per process; None = kitae.threads' rule for the model's size
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rewards: list[RewardConfig] = field(default_factory=list)  # the reward components (the README's list)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    alarms: AlarmsConfig = field(default_factory=AlarmsConfig)
    environment: EnvironmentConfig | None = None  # agents: rollouts are multi-turn episodes with tools

    def resolve(self, path: str) -> None:
        """Fill in what sections left out (built by default, never read) leave out too, and the eval grader."""
        self.algorithm.resolve("algorithm")
        if self.sampling.max_staleness is None:  # the section was left out
            self.sampling.resolve("sampling")
        self.eval.grader = self.eval_grader_spec()  # filled in, so the saved config.yaml shows what evaluated

    def validate(self, path: str) -> None:
        if not self.rewards:
            raise ConfigError("rewards", "give at least one reward component (a grader spec or a function)")
        if self.threads is not None and self.threads < 1:
            raise ConfigError("threads", f"must be at least 1 (leave it out to pick by model size), got {self.threads}")
        if self.sampling.group_size < 2:
            raise ConfigError("sampling.group_size", "GRPO compares samples of one prompt: use at least 2")
        if self.sampling.partial is not None and self.algorithm.dynamic_sampling.enabled:
            raise ConfigError("sampling.partial", "partial rollouts do not combine with algorithm.dynamic_sampling")
        if self.environment is not None:
            check_environment_sampling(self.sampling)
        self.sampling.engine.check_model(self.model, "sampling")  # e.g. the server engine's vllm sync
        names = [r.name for r in self.rewards]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ConfigError("rewards", f"component names must be unique; repeated: {', '.join(sorted(dup))}")

    def eval_grader_spec(self) -> dict[str, Any]:
        """``eval.grader``, or when it is left out the default (:func:`default_eval_grader`)."""
        return self.eval.grader if self.eval.grader is not None else default_eval_grader(self.rewards)

    @property
    def run_dir(self) -> Path:
        return Path(self.output_dir) / self.name

    def to_dict(self) -> dict:
        return to_dict(self)

    @property
    def max_completion_tokens(self) -> int:
        """The most tokens after the prompt: ``sampling.max_new_tokens``, or an environment's
        ``episode_max_tokens`` (an episode's turns, tool results and template tokens)."""
        return self.environment.episode_max_tokens if self.environment is not None else self.sampling.max_new_tokens

    def loss_config(self, kl_coef: float) -> "LossConfig":
        """What the policy loss runs with: ``algorithm.loss``'s settings and what the run adds; `kl_coef` is the KL
        weight in the loss now (0 unless ``algorithm.kl.where`` is "loss"; the KL controller's value when it is)."""
        from kitae.algorithms import LossConfig

        a = self.algorithm
        lc = LossConfig(a.loss, max_completion_length=self.max_completion_tokens, kl_coef=kl_coef,
                        kl_estimator=a.kl.estimator)
        lc.validate("algorithm")
        return lc


EMPTY_CONFIG = ("a training config needs at least its rewards; start from examples/zero.yaml (docs/config.md lists "
                "every setting)")


def load_train_config(path: str | Path | None = None, overrides: list[str] | None = None, data: dict | None = None) -> TrainConfig:
    raw = read_yaml(path, EMPTY_CONFIG) if path is not None else dict(data or {})
    apply_overrides(raw, overrides or [])
    upgrade_saved_config(raw)
    return from_dict(TrainConfig, raw)


def upgrade_saved_config(raw: dict) -> None:
    """A run's config.yaml saved by an older kitae, in today's shape (in place): each variant's settings as the
    old code wrote them, every one whatever the variant, keep only those the variant takes."""
    upgrade_saved_algorithm(raw.get("algorithm"))
    upgrade_saved_sampler((raw.get("data") or {}).get("sampler") if isinstance(raw.get("data"), dict) else None)
