"""The reward components as graders, registered by spec ``type`` beside kitae's other graders.

    template       chat-template compliance          kitae/rewards/chat_template.py  (GRPO-zero recipe, reward 1)
    repetition     character n-gram repetition       kitae/rewards/repetition.py     (GRPO-zero recipe, reward 2)
    overlong       soft/hard penalty near the limit  kitae/rewards/overlong.py       (GRPO-zero recipe, reward 3)
    diversity      duplicates inside a group         kitae/rewards/diversity.py      (GRPO-zero recipe, reward 4, group)
    reward_model   reward-model quality, gated       kitae/rewards/quality.py        (GRPO-zero recipe, reward 5, group)
    length         Kimi k1.5 length reward           kitae/rewards/length.py         (group)
    soft_overlong  DAPO soft overlong punishment     kitae/rewards/overlong.py

Each module's docstring lists its spec fields and defaults; the spec fields are the fields of its config
dataclass (``TemplateConfig``, ...: names, defaults, bounds and choices), read by
:func:`kitae.graders.spec.read_spec` like every grader spec.
Every grade carries the component's metrics in ``sub_scores`` and, when it was penalized, why in ``reason``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import math
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

from kitae.chat import sample_controls, sample_end
from kitae.config import setting
from kitae.errors import ConfigError
from kitae.graders.base import Grade, Grader, Item, Sample
from kitae.graders.spec import SubGrader, build_grader, read_spec, register_grader
from kitae.rewards.common import Reward, content_of, sample_int
from kitae.rewards.diversity import DiversityConfig, diversity_penalties
from kitae.rewards.length import LengthConfig, length_lambdas, length_rewards, length_weight
from kitae.rewards.overlong import (
    OverlongConfig,
    SoftOverlongConfig,
    lengths_of,
    overlong_penalty,
    soft_overlong_punishment,
)
from kitae.rewards.quality import QualityConfig, gated_reward, quality_reward
from kitae.rewards.repetition import RepetitionConfig, repetition_penalty
from kitae.rewards.reward_model import (  # light: torch is imported when a model loads
    LocalRewardModel,
    conversation_for_rm,
    resolve_rm_path,
)
from kitae.rewards.chat_template import TemplateConfig, template_reward, template_violation

def to_grade(reward: Reward) -> Grade:
    return Grade(score=reward.score, sub_scores=dict(reward.metrics), reason=reward.reason)


class _ConfigGrader(Grader):
    """A grader whose whole spec is one config dataclass (``config_cls``)."""

    config_cls: type = type(None)

    def __init__(self, cfg: Any = None):
        self.cfg = cfg if cfg is not None else self.config_cls()

    @classmethod
    def from_spec(cls, spec: dict[str, Any], path: str) -> "_ConfigGrader":
        return cls(read_spec(cls.config_cls, spec, path))


@register_grader("template")
class TemplateGrader(_ConfigGrader):
    """The GRPO-zero recipe's reward 1: chat-template compliance (ends its turn, nothing after it, not cut off)."""

    config_cls = TemplateConfig

    def grade_sample(self, item: Item, sample: Sample) -> Grade:
        return to_grade(template_reward(sample["output_text"], sample.get("finish_reason"), self.cfg,
                                        sample.get("end_marker"), sample.get("control_tokens")))


@register_grader("repetition")
class RepetitionGrader(_ConfigGrader):
    """The GRPO-zero recipe's reward 2: a penalty for repeated character n-grams."""

    config_cls = RepetitionConfig

    def grade_sample(self, item: Item, sample: Sample) -> Grade:
        return to_grade(repetition_penalty(sample["output_text"], self.cfg, sample.get("end_marker")))


def _token_lengths(sample: Sample, default_max: int | None) -> tuple[int, int] | str:
    """(completion tokens, max_completion_length), or why they are unknown."""
    tokens, max_tokens = lengths_of(sample, default_max)
    if max_tokens is None:
        return "no max_completion_length: the sample has none and the spec sets none"
    if tokens is None and sample.get("finish_reason") == "length":
        tokens = max_tokens
    if tokens is None:
        return "the sample has no completion_tokens (the rollout sets it)"
    return tokens, max_tokens


class _NearLimitGrader(_ConfigGrader):
    """Shared by ``overlong`` and ``soft_overlong``: the sample's token counts (it abstains when they are unknown),
    then the subclass's :meth:`penalty` (both are :func:`kitae.rewards.overlong.near_limit` with their zone)."""

    def grade_sample(self, item: Item, sample: Sample) -> Grade:
        lengths = _token_lengths(sample, self.cfg.max_completion_length)
        if isinstance(lengths, str):
            return Grade.abstain(error=lengths)
        return to_grade(self.penalty(*lengths, sample.get("finish_reason")))

    def penalty(self, tokens: int, max_tokens: int, finish_reason: str | None) -> Reward:
        raise NotImplementedError


@register_grader("overlong")
class OverlongGrader(_NearLimitGrader):
    """The GRPO-zero recipe's reward 3: a soft, then hard penalty as a completion nears its token limit."""

    config_cls = OverlongConfig

    def penalty(self, tokens: int, max_tokens: int, finish_reason: str | None) -> Reward:
        return overlong_penalty(tokens, max_tokens, finish_reason, self.cfg)


@register_grader("soft_overlong")
class SoftOverlongGrader(_NearLimitGrader):
    """DAPO's soft overlong punishment: a linear penalty in the last tokens before the limit, -1 past it."""

    config_cls = SoftOverlongConfig

    def penalty(self, tokens: int, max_tokens: int, finish_reason: str | None) -> Reward:
        return soft_overlong_punishment(tokens, max_tokens, self.cfg)  # by length alone: a cut sample has L_max


@register_grader("diversity")
class DiversityGrader(_ConfigGrader):
    """The GRPO-zero recipe's reward 4: a penalty for completions that duplicate others in their group."""

    config_cls = DiversityConfig
    needs_group = True

    def grade_samples(self, item: Item, samples: list[Sample]) -> list[Grade]:
        end = samples[0].get("end_marker") if samples else None  # one model wrote the group
        return [to_grade(r) for r in diversity_penalties([s["output_text"] for s in samples], self.cfg, end)]


def config_part(spec: Any, cls: type) -> Any:
    """The `cls` fields of a spec dataclass that extends config dataclass `cls`, as a `cls`."""
    return cls(**{f.name: getattr(spec, f.name) for f in dataclasses.fields(cls)})


# ---- Kimi length reward --------------------------------------------------------------------------
@dataclass(frozen=True)
class LengthSpec(LengthConfig):
    correct: SubGrader = field(default_factory=lambda: build_grader({"type": "answer"}))  # a nested grader spec


@register_grader("length")
class LengthGrader(Grader):
    """Kimi's length reward; correctness comes from a nested grader (default ``{type: answer}``).

    The trainer calls ``set_step(step)`` before grading a step (or puts ``step`` in each sample) so the
    warm-up schedule applies; see kitae/rewards/length.py.
    """

    needs_group = True

    def __init__(self, correct: Grader, cfg: LengthConfig = LengthConfig()):
        self.correct, self.cfg = correct, cfg
        self.step: int | None = None

    def set_step(self, step: int | None) -> None:
        self.step = step

    @classmethod
    def from_spec(cls, spec: dict[str, Any], path: str) -> "LengthGrader":
        s = read_spec(LengthSpec, spec, path)
        return cls(s.correct, config_part(s, LengthConfig))

    def _lengths(self, samples: list[Sample]) -> list[int]:
        tokens = [sample_int(s, "completion_tokens") for s in samples]
        if self.cfg.unit == "tokens" and all(t is not None for t in tokens):
            return [int(t) for t in tokens]
        return [len(content_of(s["output_text"], sample_end(s))) for s in samples]

    async def agrade_samples(self, item: Item, samples: list[Sample]) -> list[Grade]:
        verdicts = await self.correct.agrade_group(item, samples)
        correct = [None if g.score is None else g.score >= self.cfg.threshold for g in verdicts]
        lengths = self._lengths(samples)
        rewards = length_rewards(lengths, correct)
        grades = []
        for sample, n, lam, ok, value, verdict in zip(
            samples, lengths, length_lambdas(lengths), correct, rewards, verdicts
        ):
            weight = length_weight(sample_int(sample, "step", self.step), self.cfg)
            metrics = {"length": float(n), "lambda": lam, "weight": weight,
                       "correct": None if ok is None else float(ok)}
            if value is None:
                grades.append(Grade(None, metrics, error=f"correctness unknown: {verdict.error}"))
            else:
                grades.append(Grade(weight * value + 0.0, metrics))
        return grades


# ---- reward model ---------------------------------------------------------------------------------
@dataclass
class RewardModelCounters:
    """Per-sample and per-call outcomes of a reward_model grader (``grader.counts``; ``grader.stats()``
    adds the HTTP client's counters for a remote model, ``grader.counters()`` is the numbers a run logs)."""

    samples: int = 0  # samples graded
    scored: int = 0  # samples the reward model scored
    gated: int = 0  # samples kept from the reward model by the template gate
    abstained: int = 0  # samples that got None because the reward model failed or gave no finite score
    non_finite: int = 0  # samples whose score was NaN, ±infinity or not a number at all (also in abstained)
    failed_calls: int = 0  # reward-model calls (one per group) that failed
    last_error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class RewardModelSpec(QualityConfig):
    """The fields of ``type: reward_model``: QualityConfig's and the model's (RewardModelGrader's docstring)."""

    model: str | None = None
    url: str | None = None
    batch_size: int = setting(8, minimum=1)
    include_system: bool = False
    end_marker: str | None = None  # None: the model's (the sample's end_marker), else <|im_end|>
    # a server (url) only
    protocol: str = "kitae"
    served_model: str | None = None
    api_key_env: str | None = None
    tokenizer: str | None = None
    timeout: float = setting(30.0, minimum=0.001)
    retries: int = setting(2, minimum=0)
    backoff: float = setting(0.5, minimum=0.0)
    max_concurrency: int = setting(4, minimum=1)
    # a local model only
    max_length: int = setting(2048, minimum=8)
    device: str = "cpu"
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    quantize: Literal["none", "nf4", "fp4", "int8"] = "none"  # 4 or 8 bits through bitsandbytes, as `serve rm
    # --quantize` (the score head stays in dtype)

    def validate(self, path: str) -> None:
        if (self.model is None) == (self.url is None):
            raise ConfigError(f"{path}.model", "give exactly one of 'model' (a local folder or 'bundled') and 'url'")
        if self.url is not None:
            self._check_remote(path)
        else:
            _must_exist(f"{path}.model", resolve_rm_path(self.model))
        owners = _REMOTE_ONLY if self.model is not None else _LOCAL_ONLY
        where = "a reward model server (url)" if self.model is not None else "a local reward model (model)"
        for name in owners:
            if getattr(self, name) != _DEFAULTS[name]:
                raise ConfigError(f"{path}.{name}", f"only for {where}")

    def _check_remote(self, path: str) -> None:
        from kitae.registry import unknown_name_message
        from kitae.rewards.remote import RM_PROTOCOLS

        if not self.url.startswith(("http://", "https://")):
            raise ConfigError(f"{path}.url", f"expected an http:// or https:// URL, got {self.url!r}")
        if self.protocol not in RM_PROTOCOLS:
            raise ConfigError(f"{path}.protocol", unknown_name_message("protocol", self.protocol, RM_PROTOCOLS.names()))
        if self.tokenizer is not None:
            _must_exist(f"{path}.tokenizer", self.tokenizer)


_REMOTE_ONLY = ("protocol", "served_model", "api_key_env", "tokenizer", "timeout", "retries", "backoff",
                "max_concurrency")
_LOCAL_ONLY = ("max_length", "device", "dtype", "quantize")
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(RewardModelSpec)}


@register_grader("reward_model")
class RewardModelGrader(Grader):
    """The GRPO-zero recipe's reward 5: a reward model's score, gated on template compliance, scaled, clipped, length-damped.

    Spec fields (besides scale, clip, full_chars, gate, gated_score of kitae/rewards/quality.py)::

        model: bundled          # a local AutoModelForSequenceClassification folder ("bundled" = kitae-tiny-rm) ...
        url: null               # ... or a server: http://127.0.0.1:8000 (see kitae/rewards/remote.py)
        protocol: kitae         # kitae | sglang | vllm-classify | vllm-pooling (remote only)
        served_model: null      # the "model" field sent to the server
        api_key_env: null       # environment variable holding the server's token (Authorization: Bearer)
        tokenizer: null         # RM tokenizer folder, where kitae formats the text (sglang, vllm-classify)
        timeout: 30.0           # seconds per request (remote)
        retries: 2              # extra attempts on connection errors, timeouts, 429 and 5xx (remote)
        backoff: 0.5            # seconds before the first retry, doubled each time (remote)
        max_concurrency: 4      # requests in flight at once (remote)
        batch_size: 8           # conversations per forward pass / request
        max_length: 2048        # tokens; longer conversations are cut from the left (local)
        device: cpu             # local
        dtype: float32          # local: float32 | bfloat16 | float16
        quantize: none          # local: none | nf4 | fp4 | int8 (bitsandbytes; the score head stays in dtype)
        include_system: false   # show system turns to the RM (the recipe used user + assistant only)
        end_marker: null        # the gate's and the content's end of turn; null: the model's, else "<|im_end|>"

    A failing reward model never raises: the group's ungated samples get None and ``counts`` count it; a
    score that is NaN, ±infinity or not a number makes its sample abstain with that error (``non_finite``).
    """

    needs_group = True

    def __init__(self, scorer: Any = None, load: Callable[[], Any] | None = None,
                 quality: QualityConfig = QualityConfig(), include_system: bool = False, end_marker: str | None = None):
        """`scorer` has ``score(conversations) -> list[float]`` (sync or async); or `load` builds it on first use."""
        if (scorer is None) == (load is None):
            raise ValueError("give a scorer or a function that loads one, not both")
        self._scorer, self._load = scorer, load
        self.quality, self.include_system, self.end_marker = quality, include_system, end_marker
        self.counts = RewardModelCounters()
        self._load_lock = threading.Lock()

    # -- building ------------------------------------------------------------------------------
    @classmethod
    def from_spec(cls, spec: dict[str, Any], path: str) -> "RewardModelGrader":
        s = read_spec(RewardModelSpec, spec, path)
        return cls(load=_scorer_factory(s), quality=config_part(s, QualityConfig), include_system=s.include_system,
                   end_marker=s.end_marker)

    @property
    def scorer(self) -> Any:
        """The local or remote reward model; a local one is loaded on first use."""
        with self._load_lock:
            if self._scorer is None:
                self._scorer = self._load()
        return self._scorer

    def stats(self) -> dict[str, Any]:
        """counts, plus ``client_*`` counters of a remote model's HTTP client."""
        out = self.counts.as_dict()
        client = getattr(self._scorer, "counters", None)
        if client is not None:
            out.update({f"client_{k}": v for k, v in client.as_dict().items()})
        return out

    def counters(self) -> dict[str, float]:
        """The numbers of :meth:`stats` (``last_error`` left out), for a run's metrics (``grader/NAME/scored``)."""
        return {k: float(v) for k, v in self.stats().items() if isinstance(v, (int, float)) and not isinstance(v, bool)}

    # -- grading -------------------------------------------------------------------------------
    async def agrade_samples(self, item: Item, samples: list[Sample]) -> list[Grade]:
        self.counts.samples += len(samples)
        grades: list[Grade | None] = [None] * len(samples)
        todo: list[int] = []
        for i, s in enumerate(samples):
            violation = template_violation(s["output_text"], s.get("finish_reason"), sample_end(s, self.end_marker),
                                           sample_controls(s))
            if self.quality.gate and violation:
                grades[i] = to_grade(gated_reward(violation, self.quality))
                self.counts.gated += 1
            else:
                todo.append(i)
        if todo:
            contents = [content_of(samples[i]["output_text"], sample_end(samples[i], self.end_marker)) for i in todo]
            scores = await self._score_or_none(item, contents)
            for i, content, score in zip(todo, contents, scores):
                grades[i] = self._shape(score, len(content))
        return [g for g in grades if g is not None]

    def _shape(self, score: float | str, chars: int) -> Grade:
        if isinstance(score, str):  # why there is no score: a failed call, NaN, infinity
            return Grade(None, {"gated": 0.0, "rm_score": None}, error=score)
        return to_grade(quality_reward(score, chars, self.quality))

    async def _score_or_none(self, item: Item, contents: list[str]) -> list[float | str]:
        """Scores, or (counted) the error message for every content when the reward model failed and for each
        score that is not a finite number."""
        try:
            convs = [conversation_for_rm(item, c, self.include_system) for c in contents]
            scorer = await asyncio.to_thread(lambda: self.scorer)
            if inspect.iscoroutinefunction(scorer.score):
                scores = await scorer.score(convs)
            else:
                scores = await asyncio.to_thread(scorer.score, convs)
            if len(scores) != len(convs):
                raise RuntimeError(f"reward model gave {len(scores)} scores for {len(convs)} answers")
        except Exception as exc:  # any failure of the model or the wire: abstain, count, go on
            message = f"reward model failed: {type(exc).__name__}: {exc}"
            self.counts.failed_calls += 1
            self.counts.abstained += len(contents)
            self.counts.last_error = message
            return [message] * len(contents)
        values = [_finite_score(s) for s in scores]
        bad = [v for v in values if isinstance(v, str)]
        self.counts.scored += len(values) - len(bad)
        if bad:
            self.counts.non_finite += len(bad)
            self.counts.abstained += len(bad)
            self.counts.last_error = bad[-1]
        return values


def _finite_score(score: Any) -> float | str:
    """The score as a float, or why it is none: NaN and ±infinity are not clipped into range, they abstain."""
    try:
        value = float(score)
    except (TypeError, ValueError):
        return f"reward model returned {score!r}, not a number"
    return value if math.isfinite(value) else f"reward model returned {value!r}, not a finite number"


def _scorer_factory(s: RewardModelSpec) -> Callable[[], Any]:
    """A function that builds the scorer a reward_model spec names: a server (url) or a local model."""
    if s.url is not None:
        return _remote_factory(s)
    path = resolve_rm_path(s.model)
    from kitae.quantization import from_flag

    quantization = from_flag(s.quantize)
    return lambda: LocalRewardModel(path, batch_size=s.batch_size, max_length=s.max_length, device=s.device,
                                    dtype=s.dtype, quantization=quantization)


def _remote_factory(s: RewardModelSpec) -> Callable[[], Any]:
    from kitae.rewards.remote import RemoteRewardModel

    def make() -> RemoteRewardModel:
        tokenizer = None
        if s.tokenizer is not None:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(s.tokenizer)
        return RemoteRewardModel(s.url, tokenizer=tokenizer, batch_size=s.batch_size, protocol=s.protocol,
                                 served_model=s.served_model, timeout=s.timeout, retries=s.retries,
                                 backoff=s.backoff, max_concurrency=s.max_concurrency, api_key_env=s.api_key_env)

    return make


def _must_exist(where: str, path: str) -> None:
    """A reward model (or tokenizer) named by a local folder or a Hub id (fetched into the Hub cache now, so a
    missing one fails before any model loads)."""
    from kitae.hub import hub_id_snapshot

    if Path(path).is_dir() or ("kitae-tiny-rm" not in path and hub_id_snapshot(path, key=where) is not None):
        return
    hint = " (build the bundled one with `python scripts/build_reward_model.py`)" if "kitae-tiny-rm" in path else ""
    raise ConfigError(where, f"no model folder at {path!r}{hint}; give a local folder or a Hub id")


class RepeatPenalty(Grader):
    """`penalty` for a sample that ended with finish reason "repeat", 0 otherwise (the trainer's
    ``sampling.repeat.penalty``: a sample the rollout engine stopped because it looped)."""

    def __init__(self, penalty: float):
        self.penalty = penalty

    def grade_sample(self, item: dict, sample: dict) -> Grade:
        looped = sample.get("finish_reason") == "repeat"
        return Grade(score=self.penalty if looped else 0.0, reason="repeated itself" if looped else None)
