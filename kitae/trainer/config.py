"""The training config: one typed, validated object, saved with the run.

A minimal config is a few lines (everything else has a default):

    name: zero
    data: {train: bundled:arith/train, eval: bundled:arith/test}
    rewards:
      - {name: template, grader: {type: template, min_chars: 1}}
      - {name: correct, grader: {type: answer}}
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from kitae.agents.config import EnvironmentConfig
from kitae.config import apply_overrides, from_dict, read_yaml, setting, to_dict
from kitae.data.sources import DatasetSource, RowMap
from kitae.errors import ConfigError
from kitae.models import BUNDLED_DATA
from kitae.quantization import QuantizationConfig
from kitae.rollout.base import EngineSettings

if TYPE_CHECKING:
    from kitae.algorithms.losses import LossConfig


@dataclass
class LoraConfig:
    r: int = setting(8, minimum=1)  # the adapter's rank
    alpha: int = 16  # scaling: the update is alpha / r times the low-rank product
    dropout: float = setting(0.0, minimum=0, maximum=1)  # dropout on the adapter's input
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])


@dataclass
class ModelConfig:
    path: str = "bundled"  # "bundled" (the tiny base model shipped with kitae), a local folder, or a Hub id
    revision: str | None = None  # a Hub id's branch, tag or commit (default: its main branch)
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"  # the dtype forward and backward compute in;
    # with master_weights (kitae.trainer.setup.precision) the weights and the optimizer's state stay float32 and the
    # forward runs under autocast to this dtype
    master_weights: Literal["auto", "float32", "dtype"] = "auto"  # auto: float32 on CUDA, `dtype` on CPU
    attn_implementation: Literal["auto", "eager", "sdpa", "flash_attention_2"] = "auto"  # auto: flash_attention_2
    # on CUDA in bf16/fp16 when flash_attn imports, else transformers' default (sdpa)
    lora: LoraConfig | None = None
    quantization: QuantizationConfig | None = None  # the base's weights in 4 or 8 bits (QLoRA); needs lora: a
    # quantized model's own weights cannot be trained
    gradient_checkpointing: bool = False  # recompute activations in the backward pass: less memory, more time
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)  # the chat template's variables for every
    # prompt, e.g. {enable_thinking: false} for Qwen3
    end_marker: str | None = None  # the model's end of turn; default: found from its chat template (kitae.chat)

    def validate(self, path: str) -> None:
        if self.quantization is not None and self.lora is None:
            raise ConfigError(f"{path}.quantization", f"a {self.quantization.bits}-bit model's weights cannot be "
                              "trained (full fine-tuning needs real-valued weights); add model.lora to train a LoRA "
                              "adapter over the quantized base (QLoRA), or remove model.quantization")


@dataclass
class SamplerConfig:
    """Which prompts each step draws (kitae.trainer.samplers; Kimi k1.5 §2.3.4). Fields a sampler does not use
    are ignored by it."""

    name: str = "uniform"  # uniform | prioritized | curriculum
    correct: str | None = None  # reward component whose score makes the pass rates (default: one named 'correct')
    pass_threshold: float = 1.0  # a sample passes when that component's score >= this
    ema: float = 0.0  # success-rate memory: 0 = mean of every attempt, else the newest attempt's weight
    floor: float = setting(0.05, minimum=0)  # prioritized: P(i) ∝ max(1 - s_i, floor)
    schedule: Literal["hard_focus", "easy_to_hard"] = "hard_focus"  # curriculum
    warmup_steps: int = setting(10, minimum=0)  # curriculum hard_focus: steps on the whole set before only hard prompts
    ramp_steps: int = setting(50, minimum=0)  # curriculum easy_to_hard: steps until every level is in the pool
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

    train: str | DatasetSource = "bundled:arith/train"  # the training prompts (the forms: above)
    eval: str | DatasetSource | None = "bundled:arith/test"  # held-out prompts for evaluations; null = none
    fields: dict[str, str] = field(default_factory=dict)  # kitae field -> the dataset's column, e.g. {prompt: question}
    answer_pattern: str | None = None  # a regex; the reference is its first group (else the whole match)
    system: str | None = None  # a system prompt put before every prompt that has none
    shuffle: bool = True  # the prompt order: shuffled each epoch (by the seed) or as in the file
    sampler: SamplerConfig = field(default_factory=SamplerConfig)

    def validate(self, path: str) -> None:
        self.rowmap(path)  # a bad pattern fails when the config is read

    def rowmap(self, path: str = "data") -> RowMap:
        return RowMap(self.fields, self.answer_pattern, self.system, path)


@dataclass
class RewardConfig:
    """One reward component: a grader spec, or a Python callable "module:function" with TRL's signature.

    weight 0 logs the component without training on it. ``think`` (reasoning models): "strip" grades the answer
    after a ``<think>...</think>`` block (kitae.scoring.rewards.answer_after_think: "" for a completion cut off
    while thinking), "keep" the whole completion. Left out: "keep" for the grader types that read the whole turn
    or only its token counts (WHOLE_TURN_GRADERS), "strip" for every other grader and reward function; reading the
    config fills it in (``resolve``), so the saved config.yaml shows what ran.
    """

    name: str = ""
    weight: float = 1.0  # any finite number: a negative weight makes the component a penalty
    grader: dict[str, Any] | None = None
    function: str | None = None
    think: Literal["strip", "keep"] | None = None

    def resolve(self, path: str) -> None:
        """Fill in the name (the spec's name or type, or the function's name) and ``think`` left out."""
        spec = self.grader or {}
        if not self.name:
            self.name = spec.get("name") or spec.get("type") or (self.function or "").split(":")[-1]
        if self.think is None:
            self.think = self.default_think()

    def validate(self, path: str) -> None:
        if (self.grader is None) == (self.function is None):
            raise ConfigError(path, "give exactly one of 'grader' (a grader spec) or 'function' (module:function)")

    def default_think(self) -> Literal["strip", "keep"]:
        return "keep" if (self.grader or {}).get("type") in WHOLE_TURN_GRADERS else "strip"


# Grader types that see the whole completion by default. template checks how the turn ends (the same with or
# without the leading block) but also counts characters (min_chars, full_chars) and would read a turn that ended
# inside an unclosed think block as "no end marker"; so it sees all of it. overlong and soft_overlong read token
# counts only (the same either way). Kimi's length reward strips: its nested correctness grader must see the
# answer, and its lengths (unit: tokens) are the completion's tokens either way.
WHOLE_TURN_GRADERS = ("template", "overlong", "soft_overlong")


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

    A loss setting (eps_low ... kimi_tau) you write is used as written. One you leave out (or set to null) takes
    the value of the loss's preset (``loss: dapo``: aggregation token_mean, eps_high 0.28; ``dr_grpo``:
    seq_sum_constant; ``cispo``: token_mean; kitae.algorithms.losses.PRESETS), else the loss's default
    (kitae.algorithms.losses.LossConfig). Reading the config fills them in (``resolve``), so the saved config.yaml
    shows what ran.
    """

    advantage: str | None = None  # default: "dr_grpo" (r - group mean) for loss dr_grpo and kimi, as their
    # papers do; else "grpo"
    loss: str = "grpo"  # grpo | dapo | dr_grpo | gspo | cispo | kimi
    eps_low: float | None = None  # PPO clip range: ratio in [1 - eps_low, 1 + eps_high] (default 0.2)
    eps_high: float | None = None  # default 0.2; dapo: 0.28 (clip-higher)
    gspo_eps_low: float | None = None  # the sequence-ratio clip range of gspo (default 3e-4, 4e-4)
    gspo_eps_high: float | None = None  # gspo: the upper side of that range (default 4e-4)
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
    component_without_reward: Literal["stop", "warn"] = "stop"  # stop (as above, after that many steps in a row
    # in which one component gave no sample a finite score) or warn (for a component meant to abstain on whole
    # steps); either way a warning at the first such step
    tis_cap: float | None = 2.0  # engine server: per-token weight min(pi_train_old / pi_server, tis_cap) on the
    # loss (truncated importance sampling, kitae/algorithms/mismatch.py); null = no weight (the ratio still uses
    # the trainer's log-probs)

    def resolve(self, path: str) -> None:
        """Fill in the advantage and every loss setting left out (see the class)."""
        from kitae.algorithms import PAIRED_ADVANTAGES, LossConfig

        if self.advantage is None:
            self.advantage = PAIRED_ADVANTAGES.get(self.loss, "grpo")
        settings = LossConfig.for_loss(self.loss, **self.loss_settings())
        for key in self.loss_settings():
            setattr(self, key, getattr(settings, key))

    def validate(self, path: str) -> None:
        """Check the loss and advantage names and the loss's settings."""
        from kitae.algorithms import ADVANTAGES, POLICY_LOSSES, LossConfig

        POLICY_LOSSES.get(self.loss, f"{path}.loss")
        ADVANTAGES.get(self.advantage, f"{path}.advantage")
        LossConfig.for_loss(self.loss, **self.loss_settings()).validate(path)
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
class OptimConfig:
    steps: int = setting(100, minimum=1)  # training steps (one sample-grade-update round each)
    prompts_per_step: int = setting(8, minimum=1)  # prompts per step (each gets group_size samples)
    micro_batch_size: int = setting(32, minimum=1)  # at most this many sequences per forward/backward (rows of
    # similar length go together, kitae.trainer.batch.micro_batches)
    logprob_chunk_size: int = setting(256, minimum=0)  # positions whose full-vocabulary logits exist at once when
    # the update and the reference pass take log-probs (kitae.trainer.logprobs); 0: a micro-batch's all at once
    skip_zero_advantage: bool = True  # leave rows that cannot change the gradient out of the forward/backward
    # (advantage 0 with no KL term in the loss; no counted token): same gradient, less work
    lr: float = setting(1e-4, above=0)  # AdamW's learning rate
    weight_decay: float = setting(0.0, minimum=0)  # AdamW's weight decay
    betas: list[float] = field(default_factory=lambda: [0.9, 0.99])  # each in [0, 1)
    max_grad_norm: float = setting(1.0, above=0)  # gradients are clipped to this norm
    scheduler: Literal["constant", "linear", "cosine"] = "constant"  # the learning rate after warm-up
    warmup_steps: int = setting(0, minimum=0)  # steps of linear warm-up to lr

    def validate(self, path: str) -> None:
        if len(self.betas) != 2:
            raise ConfigError(f"{path}.betas", f"expected two numbers (Adam's beta1, beta2), got {len(self.betas)}")
        for i, beta in enumerate(self.betas):
            if not 0 <= beta < 1:
                raise ConfigError(f"{path}.betas[{i}]", f"must be in [0, 1) (Adam's beta), got {beta}")


@dataclass
class LoggingConfig:
    save_every: int = setting(25, minimum=0)  # 0: a checkpoint at the end only
    keep_checkpoints: int = setting(2, minimum=0)  # 0: keep every one
    report_to: list[str] | str = field(default_factory=list)  # tensorboard, wandb, trackio; one name alone is fine

    def resolve(self, path: str) -> None:
        if isinstance(self.report_to, str):  # HF's TrainingArguments take one name as well as a list
            self.report_to = [self.report_to]

    def validate(self, path: str) -> None:
        from kitae.trainer.loggers import check_report_to

        check_report_to(self.report_to, f"{path}.report_to")


@dataclass
class EvalConfig:
    every: int = setting(25, minimum=0)  # 0 = never during training (a final eval still runs when data.eval is set)
    k: int = setting(4, minimum=1)  # samples per prompt for pass@1
    limit: int | None = 100  # eval prompts
    temperature: float = setting(1.0, minimum=0)  # 0: greedy
    max_new_tokens: int | None = None  # default: sampling.max_new_tokens
    grader: dict[str, Any] | None = None  # the spec that decides pass@1; default: the grader of the reward
    # named `correct`, else {type: answer}
    pass_threshold: float = 1.0  # a sample passes when its score >= this
    think: Literal["strip", "keep"] = "strip"  # strip: the grader sees the answer after a <think> block (see
    # RewardConfig); compliance and lengths are always of the whole completion


@dataclass
class AlarmsConfig:
    """Run alarms (kitae.trainer.alarms): signs of reward hacking and of a run that stopped learning, checked
    after every step from what the run store holds; each is recorded once as an ``alarm`` event."""

    enabled: bool = True  # false: no alarm is checked
    stop_on: list[str] = field(default_factory=list)  # alarm kinds that stop the run at a checkpoint (as Ctrl-C
    # does); "all" = every kind. `kitae train --stop-on-alarm KIND` adds to it
    baseline_steps: int = setting(3, minimum=1)  # the first steps, whose samples and metrics are the run's baseline
    window: int = setting(5, minimum=1)  # the latest steps compared with the baseline
    clear_steps: int = setting(20, minimum=1)  # an alarm whose sign has been gone this many steps in a row is
    # cleared, and may be raised again
    reward_rise: float = setting(0.1, above=0)  # reward_vs_eval, component_dominance: the rise of the mean training
    # reward (latest window over the baseline) that counts as rising
    flat: float = setting(0.02, minimum=0)  # reward_vs_eval, component_dominance: a held-out score or a component's
    # mean score that rose by at most this is flat; eval_collapse: a reward that fell by at most this did not fall
    component_share: float = setting(0.8, above=0, maximum=1)  # component_dominance: one component's share of the
    # reward's rise, while every other component stays flat or falls
    shape_share: float = setting(0.5, above=0, maximum=1)  # answer_shape: share of the latest window's samples
    # with the pattern ...
    shape_baseline: float = setting(0.1, minimum=0, maximum=1)  # ... when the baseline's samples had at most this
    length_jump: float = setting(3.0, above=1)  # length_jump: mean completion length this many times the baseline's
    entropy_floor: float = setting(0.02, minimum=0)  # entropy_collapse: mean token entropy below this (nats)
    length_floor: float = setting(1.5, minimum=0)  # length_collapse: mean completion length below this (tokens)
    kl_max: float = setting(1.0, above=0)  # kl_blowup: the KL to the reference above this (per token) ...
    kl_growth: float = setting(10.0, above=1)  # ... or this many times its mean over the window before
    zero_spread: float = setting(0.9, above=0, maximum=1)  # zero_spread: share of groups whose samples all got one
    # reward, over the whole window
    eval_drop: float = setting(0.5, above=0, maximum=1)  # eval_collapse: a held-out metric (pass@1, compliance)
    # fell this share below its best earlier evaluation ...
    eval_drop_min: float = setting(0.05, minimum=0)  # ... and by at least this much (0.06 -> 0.03 on a few prompts is
    # noise), while the training reward did not fall by more than `flat`
    mismatch_kl: float = setting(0.05, above=0)  # mismatch_growth: sampler/trainer mismatch KL above this ...
    mismatch_growth: float = setting(5.0, above=1)  # ... and this many times its baseline mean
    tool_error_rate: float = setting(0.2, above=0, maximum=1)  # tool_errors (agents): the share of tool calls that
    # came back with an error, over the latest window, reached this ...
    tool_error_jump: float = setting(2.0, above=1)  # ... and this many times its baseline mean
    max_turns_share: float = setting(0.5, above=0, maximum=1)  # max_turns (agents): the share of episodes that
    # ended on environment.max_turns, over every step of the latest window
    tool_calls_growth: float = setting(2.0, above=1)  # tool_calls_without_reward (agents): tool calls per episode
    # this many times the baseline's ...
    tool_calls_rise: float = setting(0.5, above=0)  # ... and this many more, while the reward rose by at most `flat`

    def resolve(self, path: str) -> None:
        """``stop_on: [all]`` as every kind."""
        from kitae.trainer.alarms import check_kinds

        try:
            self.stop_on = check_kinds(self.stop_on, f"{path}.stop_on")
        except ConfigError:
            pass  # an unknown kind: left as written, for validate to name

    def validate(self, path: str) -> None:
        from kitae.trainer.alarms import check_kinds

        check_kinds(self.stop_on, f"{path}.stop_on")


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
        """The policy loss's settings as this config gives them (a config that was read has every one written;
        one left out takes the loss's preset value, as ``AlgorithmConfig.resolve`` gives it); `kl_coef` is the KL
        weight in the loss now (0 unless ``algorithm.kl.where`` is "loss"; the KL controller's value when it is)."""
        from kitae.algorithms import LossConfig

        a = self.algorithm
        lc = LossConfig.for_loss(a.loss, **a.loss_settings(), max_completion_length=self.max_completion_tokens,
                                 kl_coef=kl_coef, kl_estimator=a.kl.estimator)
        lc.validate("algorithm")
        return lc


EMPTY_CONFIG = ("a training config needs at least its rewards; start from examples/zero.yaml (docs/config.md lists "
                "every setting)")


def check_environment_sampling(s: SamplingConfig) -> None:
    """What an ``environment:`` run cannot sample with, refused with the reason."""
    if s.async_:
        raise ConfigError("sampling.async", "does not run with an environment yet: the rollout worker samples single "
                          "turns from token ids, while an episode's turns wait on its tool calls, which run in the "
                          "trainer's process; set async: false (an episode's tool calls already overlap sampling)")
    if s.partial is not None:
        raise ConfigError("sampling.partial", "does not run with an environment yet: a partial rollout's replay "
                          "buffer would have to keep each episode's tools and environment state between steps; "
                          "remove sampling.partial (environment.turn_max_new_tokens and episode_max_tokens bound "
                          "an episode)")


def load_train_config(path: str | Path | None = None, overrides: list[str] | None = None, data: dict | None = None) -> TrainConfig:
    raw = read_yaml(path, EMPTY_CONFIG) if path is not None else dict(data or {})
    apply_overrides(raw, overrides or [])
    return from_dict(TrainConfig, raw)


def default_eval_grader(rewards: list[RewardConfig]) -> dict[str, Any]:
    """The eval grader a config leaves out: a copy of the spec of the reward component named ``correct`` (so a
    run rewarded by the ``code`` grader is evaluated by it), else answer matching.

        >>> default_eval_grader([RewardConfig("correct", grader={"type": "code"})])
        {'type': 'code'}
        >>> default_eval_grader([RewardConfig("format", grader={"type": "template"})])
        {'type': 'answer'}
    """
    spec = next((r.grader for r in rewards if r.name == "correct" and r.grader is not None), None)
    return copy.deepcopy(spec) if spec is not None else {"type": "answer"}


def load_data(spec: str | DatasetSource | None, key: str, rowmap: RowMap | None = None,
              limit: int | None = None) -> tuple[str, list[dict]]:
    """(how errors name the data, its checked rows, the first `limit` only) of a prompt set: a file, a folder,
    bundled:NAME or a DatasetSource, each row mapped by `rowmap` (``data.fields``, ``answer_pattern``,
    ``system``) first. The one reader of prompt sets of `kitae train` (pre-flight) and `kitae eval`; `key` (the
    config key or option that named the data) is in its errors. No spec: ("", [])."""
    from kitae.data.loader import load_prompts

    if not spec:
        return "", []
    source = resolve_data_path(spec)
    rows = load_prompts(source, rowmap=rowmap, key=key)
    name = source.describe() if isinstance(source, DatasetSource) else source
    return name, rows[:limit] if limit else rows


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
