"""The training config: one typed, validated object, saved with the run.

A minimal config is a few lines (everything else has a default):

    name: zero
    data: {train: bundled:arith/train, eval: bundled:arith/test}
    rewards:
      - {name: template, grader: {type: template, min_chars: 1}}
      - {name: correct, grader: {type: answer}}
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from kitae.config import apply_overrides, from_dict, read_yaml, setting
from kitae.data.sources import DatasetSource, RowMap
from kitae.errors import ConfigError
from kitae.models import BUNDLED_DATA

if TYPE_CHECKING:
    from kitae.algorithms.losses import LossConfig


@dataclass
class LoraConfig:
    r: int = 8
    alpha: int = 16
    dropout: float = 0.0
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])


@dataclass
class ModelConfig:
    path: str = "bundled"  # "bundled" (the tiny base model shipped with kitae), a local folder, or a Hub id
    revision: str | None = None  # a Hub id's branch, tag or commit (default: its main branch)
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    lora: LoraConfig | None = None
    gradient_checkpointing: bool = False
    # the chat template's variables for every prompt, e.g. {enable_thinking: false} for Qwen3
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    end_marker: str | None = None  # the model's end of turn; default: found from its chat template (kitae.chat)


@dataclass
class SamplerConfig:
    """Which prompts each step draws (kitae.trainer.samplers; Kimi k1.5 §2.3.4). Fields a sampler does not use
    are ignored by it."""

    name: str = "uniform"  # uniform | prioritized | curriculum
    correct: str | None = None  # reward component whose score makes the pass rates (default: one named 'correct')
    pass_threshold: float = 1.0  # a sample passes when that component's score >= this
    ema: float = 0.0  # success-rate memory: 0 = mean of every attempt, else the newest attempt's weight
    floor: float = 0.05  # prioritized: P(i) ∝ max(1 - s_i, floor)
    schedule: Literal["hard_focus", "easy_to_hard"] = "hard_focus"  # curriculum
    warmup_steps: int = 10  # curriculum hard_focus: steps on the whole set before only hard prompts
    ramp_steps: int = 50  # curriculum easy_to_hard: steps until every level is in the pool
    difficulty_key: str | None = "difficulty"  # curriculum: the row field with the label; null = measured rates
    levels: list[str] = field(default_factory=lambda: ["easy", "medium", "hard"])  # every label, easiest first
    hard_levels: list[str] | None = None  # curriculum hard_focus: labels that count as hard (default: the last)
    hard_threshold: float = 0.5  # curriculum hard_focus without labels: hard when s_i < this (or never graded)

    def validate(self, path: str) -> None:
        from kitae.trainer.samplers import SAMPLERS

        SAMPLERS.get(self.name, f"{path}.name")
        if not 0 <= self.ema < 1:
            raise ConfigError(f"{path}.ema", f"must be in [0, 1), got {self.ema}")


@dataclass
class DataConfig:
    """The prompt sets. ``train``/``eval``: a file (.jsonl/.json/.parquet), a datasets folder, bundled:NAME, or a
    mapping ``{hub: ORG/NAME, name: CONFIG, split: SPLIT}`` / ``{path: json|csv|parquet, data_files: GLOB}``
    (kitae.data.sources.DatasetSource). ``fields`` maps kitae's fields to the dataset's columns
    (``{prompt: question, reference_answer: answer}``), ``answer_pattern`` cuts the reference out of a longer
    answer (its first group), ``system`` is a system prompt put before every prompt without one."""

    train: str | DatasetSource = "bundled:arith/train"
    eval: str | DatasetSource | None = "bundled:arith/test"
    fields: dict[str, str] = field(default_factory=dict)
    answer_pattern: str | None = None
    system: str | None = None
    shuffle: bool = True
    sampler: SamplerConfig = field(default_factory=SamplerConfig)

    def validate(self, path: str) -> None:
        self.rowmap(path)  # a bad pattern fails when the config is read

    def rowmap(self, path: str = "data") -> RowMap:
        return RowMap(self.fields, self.answer_pattern, self.system, path)


@dataclass
class RewardConfig:
    """One reward component: a grader spec, or a Python callable "module:function" with TRL's signature.

    weight 0 logs the component without training on it.
    """

    name: str = ""
    weight: float = 1.0
    grader: dict[str, Any] | None = None
    function: str | None = None

    def validate(self, path: str) -> None:
        if (self.grader is None) == (self.function is None):
            raise ConfigError(path, "give exactly one of 'grader' (a grader spec) or 'function' (module:function)")
        if not self.name:
            self.name = (self.grader or {}).get("name") or (self.grader or {}).get("type") or self.function.split(":")[-1]


@dataclass
class AdaptiveKL:
    target: float = 0.1
    horizon: int = 10000


@dataclass
class KLConfig:
    coef: float = 0.0  # 0: no reference model is loaded
    estimator: Literal["k1", "k2", "k3"] = "k3"
    where: Literal["loss", "reward"] = "loss"
    adaptive: AdaptiveKL | None = None


@dataclass
class DynamicSampling:
    enabled: bool = False
    max_rounds: int = 3  # generation rounds per step before training on what there is


@dataclass
class AlgorithmConfig:
    """The RL algorithm: advantage estimator, policy loss and the loss's settings.

    A loss setting (eps_low ... kimi_tau) you write is used as written. One you leave out (or set to null) takes
    the value of the loss's preset (``loss: dapo``: aggregation token_mean, eps_high 0.28; ``dr_grpo``:
    seq_sum_constant; ``cispo``: token_mean; kitae.algorithms.losses.PRESETS), else the loss's default
    (kitae.algorithms.losses.LossConfig). Validation fills them in, so the saved config.yaml shows what ran.
    """

    advantage: str | None = None  # default: "dr_grpo" (r - group mean) for loss dr_grpo and kimi, as their
    # papers do; else "grpo"
    loss: str = "grpo"  # grpo | dapo | dr_grpo | gspo | cispo | kimi
    eps_low: float | None = None  # PPO clip range: ratio in [1 - eps_low, 1 + eps_high] (default 0.2)
    eps_high: float | None = None  # default 0.2; dapo: 0.28 (clip-higher)
    gspo_eps_low: float | None = None  # the sequence-ratio clip range of gspo (default 3e-4, 4e-4)
    gspo_eps_high: float | None = None
    cispo_eps_high: float | None = None  # cispo: importance weights capped at 1 + this (default 0.28)
    aggregation: str | None = None  # seq_mean_token_mean (default) | token_mean (dapo, cispo) | seq_sum_constant
    # (dr_grpo)
    kimi_tau: float | None = None  # kimi: pull toward the sampling policy (default 0.1)
    mu: int = setting(1, minimum=1)  # optimization passes over each batch
    kl: KLConfig = field(default_factory=KLConfig)
    dynamic_sampling: DynamicSampling = field(default_factory=DynamicSampling)
    mask_truncated: bool = False  # DAPO overlong filtering
    reset_optimizer: bool = False  # Kimi k1.5: fresh optimizer state each iteration
    max_steps_without_reward: int | None = 3  # after this many steps in a row in which no sample got a reward
    # (every component abstained or failed on every sample), save a checkpoint and stop with an error; 0 or null:
    # never stop
    # engine server: per-token weight min(pi_train_old / pi_server, tis_cap) on the loss (truncated importance
    # sampling, kitae/algorithms/mismatch.py); null = no weight (the ratio still uses the trainer's log-probs)
    tis_cap: float | None = 2.0

    def validate(self, path: str) -> None:
        """Check the loss and advantage names and fill in every loss setting left out (see the class)."""
        from kitae.algorithms import ADVANTAGES, PAIRED_ADVANTAGES, POLICY_LOSSES, LossConfig

        POLICY_LOSSES.get(self.loss, f"{path}.loss")
        if self.advantage is None:
            self.advantage = PAIRED_ADVANTAGES.get(self.loss, "grpo")
        ADVANTAGES.get(self.advantage, f"{path}.advantage")
        settings = LossConfig.for_loss(self.loss, **self.loss_settings())
        settings.validate(path)
        for key in self.loss_settings():
            setattr(self, key, getattr(settings, key))
        if self.max_steps_without_reward is not None and self.max_steps_without_reward < 0:
            raise ConfigError(f"{path}.max_steps_without_reward",
                              f"must be 0 or more (0 or null: never stop), got {self.max_steps_without_reward}")
        if self.tis_cap is not None and self.tis_cap < 1:
            raise ConfigError(f"{path}.tis_cap", f"must be >= 1 (or null for no correction), got {self.tis_cap}: "
                              "a cap below 1 would shrink every token's weight")

    def loss_settings(self) -> dict[str, Any]:
        """The loss settings of this section by name (LossConfig's fields it has); None: left out."""
        from kitae.algorithms import LossConfig

        names = {f.name for f in dataclasses.fields(LossConfig)}
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name in names}


@dataclass
class PartialRolloutConfig:
    """Kimi k1.5 partial rollouts (§2.6.2): each iteration a trajectory gets at most `segment_tokens` new tokens;
    one that has not finished waits in a replay buffer and continues next iteration with the then-current policy."""

    segment_tokens: int = setting(32, minimum=1)  # output-token budget per trajectory per iteration
    old_segments: Literal["exclude", "importance"] = "exclude"  # tokens of earlier iterations: masked out of the
    # loss, or kept with the log-probs of the policy that sampled them (ratio = importance weight)


@dataclass
class RepeatConfig:
    """Repeat detection during generation: a sample whose last tokens are one block of 1..max_period tokens
    repeated at least min_count times in a row, covering at least min_span tokens, ends with finish reason
    "repeat". `penalty` (e.g. -1.0) becomes a reward component named 'repeat' (0 for other samples)."""

    min_count: int = 4
    max_period: int = 16
    min_span: int = 16
    penalty: float = 0.0


@dataclass
class SamplingConfig:
    """How rollouts are sampled. ``engine: hf`` samples in the trainer's process with its own model; ``engine:
    server`` asks inference servers (``servers``: vLLM, SGLang or ``kitae serve model`` replicas) and pushes the
    trainer's weights to them after optimizer steps (``sync``; kitae/rollout/server.py, kitae/rollout/sync.py)."""

    engine: str = "hf"  # hf | server
    group_size: int = 8
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    repetition_penalty: float = 1.0
    max_new_tokens: int = 64  # with partial rollouts: the total over every segment
    partial: PartialRolloutConfig | None = None  # null = whole trajectories each iteration
    repeat: RepeatConfig | None = None  # null = no repeat detection
    # ---- engine: server ----
    servers: list[str] = field(default_factory=list)  # base URLs of the replicas, e.g. http://127.0.0.1:8000
    server_api: Literal["openai", "sglang"] = "openai"  # openai: vLLM, kitae serve model; sglang: its /generate
    api_key_env: str | None = "KITAE_SERVE_TOKEN"  # when this variable is set: Authorization: Bearer its value
    server_timeout: float = 600.0  # seconds one request may take
    server_down_secs: float = 30.0  # a replica that failed is skipped this long, then tried again
    server_max_wait: float = 1800.0  # every replica down this long stops the run with an error (0 = wait forever)
    sync: Literal["disk", "vllm", "none"] = "disk"  # how the trainer's weights reach the servers
    sync_every: int = setting(1, minimum=1)  # optimizer steps between weight pushes
    sync_dir: str | None = None  # disk sync: a folder both sides see (default: RUN_DIR/sync)
    max_staleness: int = setting(0, minimum=0)  # samples from weights more than this many steps old are dropped
    # (and counted)

    def validate(self, path: str) -> None:
        if self.engine != "server":
            if self.servers:
                raise ConfigError(f"{path}.servers", f"is set but {path}.engine is {self.engine!r}; set "
                                  f"{path}.engine: server to sample on those servers, or remove {path}.servers")
            return
        from kitae.rollout.server import check_url

        if not self.servers:
            raise ConfigError(f"{path}.servers", "engine 'server' needs at least one server URL, e.g. "
                              "[http://127.0.0.1:8000] (start one with `kitae serve model --port 8000`)")
        for i, url in enumerate(self.servers):
            self.servers[i] = check_url(url, f"{path}.servers[{i}]")
        for key in ("server_timeout", "server_down_secs"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"{path}.{key}", f"must be > 0 seconds, got {getattr(self, key)}")
        if self.server_max_wait < 0:
            raise ConfigError(f"{path}.server_max_wait", f"must be >= 0 seconds (0 = wait forever), got "
                              f"{self.server_max_wait}")
        if self.sync != "none" and self.max_staleness < self.sync_every - 1:
            raise ConfigError(f"{path}.max_staleness", f"is {self.max_staleness}, but with sync_every "
                              f"{self.sync_every} samples are up to {self.sync_every - 1} steps old and would all be "
                              f"dropped; set max_staleness to at least {self.sync_every - 1}")
        if self.sync == "vllm":
            from kitae.rollout.sync import check_vllm_sync

            check_vllm_sync(f"{path}.sync")


@dataclass
class OptimConfig:
    steps: int = setting(100, minimum=1)
    prompts_per_step: int = setting(8, minimum=1)
    micro_batch_size: int = setting(32, minimum=1)  # at most this many sequences per forward/backward (rows of
    # similar length go together, kitae.trainer.batch.micro_batches)
    skip_zero_advantage: bool = True  # leave rows that cannot change the gradient out of the forward/backward
    # (advantage 0 with no KL term in the loss; no counted token): same gradient, less work
    lr: float = 1e-4
    weight_decay: float = 0.0
    betas: list[float] = field(default_factory=lambda: [0.9, 0.99])
    max_grad_norm: float = 1.0
    scheduler: Literal["constant", "linear", "cosine"] = "constant"
    warmup_steps: int = 0


@dataclass
class LoggingConfig:
    save_every: int = setting(25, minimum=0)  # 0: a checkpoint at the end only
    keep_checkpoints: int = setting(2, minimum=0)  # 0: keep every one
    report_to: list[str] | str = field(default_factory=list)  # tensorboard, wandb, trackio; one name alone is fine

    def validate(self, path: str) -> None:
        from kitae.trainer.loggers import check_report_to

        if isinstance(self.report_to, str):  # HF's TrainingArguments take one name as well as a list
            self.report_to = [self.report_to]
        check_report_to(self.report_to, f"{path}.report_to")


@dataclass
class EvalConfig:
    every: int = 25  # 0 = never during training (a final eval still runs when data.eval is set)
    k: int = 4  # samples per prompt for pass@1
    limit: int | None = 100  # eval prompts
    temperature: float = 1.0
    max_new_tokens: int | None = None  # default: sampling.max_new_tokens
    grader: dict[str, Any] = field(default_factory=lambda: {"type": "answer"})
    pass_threshold: float = 1.0


@dataclass
class TrainConfig:
    name: str = "run"
    output_dir: str = "runs"
    seed: int = 0
    threads: int | None = None  # torch CPU threads per process; None = kitae.threads' rule for the model's size
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rewards: list[RewardConfig] = field(default_factory=list)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def validate(self, path: str) -> None:
        self.algorithm.validate("algorithm")  # also when the section was left out and built by default
        if not self.rewards:
            raise ConfigError("rewards", "give at least one reward component (a grader spec or a function)")
        if self.threads is not None and self.threads < 1:
            raise ConfigError("threads", f"must be at least 1 (leave it out to pick by model size), got {self.threads}")
        if self.sampling.group_size < 2:
            raise ConfigError("sampling.group_size", "GRPO compares samples of one prompt: use at least 2")
        if self.sampling.partial is not None and self.algorithm.dynamic_sampling.enabled:
            raise ConfigError("sampling.partial", "partial rollouts do not combine with algorithm.dynamic_sampling")
        names = [r.name for r in self.rewards]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ConfigError("rewards", f"component names must be unique; repeated: {', '.join(sorted(dup))}")

    @property
    def run_dir(self) -> Path:
        return Path(self.output_dir) / self.name

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def loss_config(self, kl_coef: float) -> "LossConfig":
        """The policy loss's settings as this config gives them (a validated config has every one written; one
        left out takes the loss's preset value, as in validation); `kl_coef` is the KL weight in the loss now (0
        unless ``algorithm.kl.where`` is "loss"; the KL controller's value when it is)."""
        from kitae.algorithms import LossConfig

        a = self.algorithm
        lc = LossConfig.for_loss(a.loss, **a.loss_settings(), max_completion_length=self.sampling.max_new_tokens,
                                 kl_coef=kl_coef, kl_estimator=a.kl.estimator)
        lc.validate("algorithm")
        return lc


# A run's store carries this meta value when its saved config holds the loss settings that ran (presets resolved
# in the config). Runs started before have none: their kitae applied a preset at loss time over every setting
# still at LossConfig's default, so their saved config can say eps_high 0.2 where the loss ran with 0.28.
PRESETS_IN_CONFIG = ("loss_presets", "in_config")


def settings_as_they_ran(data: dict) -> list[tuple[str, Any, Any]]:
    """Rewrite, in place, the loss settings of a config saved before presets were resolved in the config (no
    PRESETS_IN_CONFIG mark) to what that kitae trained with: the preset's value for each setting its config held
    at LossConfig's default (the rule it applied at loss time). Returns ``(field, saved, ran)`` per change.

    >>> settings_as_they_ran({"algorithm": {"loss": "dapo", "eps_high": 0.2, "aggregation": "token_mean"}})
    [('algorithm.eps_high', 0.2, 0.28)]
    """
    from kitae.algorithms import PRESETS, LossConfig

    algorithm = data.get("algorithm")
    if not isinstance(algorithm, dict):
        return []
    defaults, changes = LossConfig(), []
    for key, value in PRESETS.get(algorithm.get("loss"), {}).items():
        saved = algorithm.get(key)
        if saved == getattr(defaults, key) and saved != value:
            algorithm[key] = value
            changes.append((f"algorithm.{key}", saved, value))
    return changes


def load_train_config(path: str | Path | None = None, overrides: list[str] | None = None, data: dict | None = None) -> TrainConfig:
    raw = read_yaml(path) if path is not None else dict(data or {})
    apply_overrides(raw, overrides or [])
    return from_dict(TrainConfig, raw)


def resolve_data_path(spec: str | DatasetSource) -> str | DatasetSource:
    """`bundled:arith/train` -> the bundled JSONL; anything else (a path, a DatasetSource) is returned unchanged."""
    if isinstance(spec, str) and spec.startswith("bundled:"):
        name = spec.removeprefix("bundled:")
        task, _, split = name.partition("/")
        path = BUNDLED_DATA.parent / task / f"{split or 'train'}.jsonl"
        if not path.exists():
            raise ConfigError("data", f"no bundled dataset '{name}' (looked for {path})")
        return str(path)
    return spec
