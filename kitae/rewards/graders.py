"""The reward components as graders, registered by spec ``type`` beside kitae's other graders.

    template       chat-template compliance          kitae/rewards/template.py    (GRPO-zero recipe, reward 1)
    repetition     character n-gram repetition       kitae/rewards/repetition.py  (GRPO-zero recipe, reward 2)
    overlong       soft/hard penalty near the limit  kitae/rewards/overlong.py    (GRPO-zero recipe, reward 3)
    diversity      duplicates inside a group         kitae/rewards/diversity.py   (GRPO-zero recipe, reward 4, group)
    reward_model   reward-model quality, gated       kitae/rewards/quality.py     (GRPO-zero recipe, reward 5, group)
    length         Kimi k1.5 length reward           kitae/rewards/length.py      (group)
    soft_overlong  DAPO soft overlong punishment     kitae/rewards/overlong.py

Each module's docstring lists its spec fields and defaults; the spec fields are the fields of its config
dataclass, read by :func:`read_config` (so the dataclass is the one source of truth for names and defaults).
Every grade carries the component's metrics in ``sub_scores`` and, when it was penalized, why in ``reason``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import math
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from kitae.chat import IM_END
from kitae.errors import ConfigError
from kitae.graders.base import Grade, Grader, Item, Sample
from kitae.graders.spec import SpecReader, build_grader, register_grader
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
from kitae.rewards.reward_model import conversation_for_rm  # light: torch is imported when a model loads
from kitae.rewards.template import TemplateConfig, template_reward, template_violation

# Bounds on config fields, checked when a spec is read: field name -> (minimum, maximum).
_BOUNDS: dict[str, tuple[float | None, float | None]] = {
    "n": (1, None), "min_chars": (0, None), "threshold": (0.0, None), "soft_start": (0.0, 0.999),
    "power": (0.0, None), "cache_tokens": (1, None), "cache_fraction": (0.001, 1.0), "clip": (0.0, None),
    "warmup_steps": (0, None), "ramp_steps": (0, None), "max_completion_length": (1, None),
}
_CHOICES = {"unit": ["tokens", "chars"]}


def read_config(r: SpecReader, cls: type) -> Any:
    """An instance of the config dataclass `cls` from the spec fields of the same names (defaults otherwise)."""
    values = {}
    for f in dataclasses.fields(cls):
        if not r.has(f.name):
            r.raw(f.name, None)  # known, so a typo's did-you-mean can name it
            continue
        values[f.name] = _read_field(r, f.name, str(f.type))
    return cls(**values)


def _read_field(r: SpecReader, key: str, kind: str) -> Any:
    low, high = _BOUNDS.get(key, (None, None))
    if key in _CHOICES:
        return r.choice(key, _CHOICES[key])
    if kind == "float":
        return r.number(key, minimum=low, maximum=high)
    if kind.startswith("int"):
        if kind.endswith("None") and r.raw(key) is None:
            return None
        return r.integer(key, minimum=low)
    if kind == "bool":
        return r.flag(key)
    if kind.startswith("tuple"):
        values = r.items(key)
        if not all(isinstance(v, str) for v in values):
            raise ConfigError(r.at(key), f"expected a list of strings, got {values!r}")
        return tuple(values)
    return r.text(key)


def to_grade(reward: Reward) -> Grade:
    return Grade(score=reward.score, sub_scores=dict(reward.metrics), reason=reward.reason)


class _ConfigGrader(Grader):
    """A grader whose whole spec is one config dataclass (``config_cls``)."""

    config_cls: type = type(None)

    def __init__(self, cfg: Any = None):
        self.cfg = cfg if cfg is not None else self.config_cls()

    @classmethod
    def from_spec(cls, spec: dict[str, Any], path: str) -> "_ConfigGrader":
        r = SpecReader(spec, path)
        cfg = read_config(r, cls.config_cls)
        r.finish()
        return cls(cfg)


@register_grader("template")
class TemplateGrader(_ConfigGrader):
    """The GRPO-zero recipe's reward 1: chat-template compliance (ends its turn, nothing after it, not cut off)."""

    config_cls = TemplateConfig

    def grade_sample(self, item: Item, sample: Sample) -> Grade:
        return to_grade(template_reward(sample["output_text"], sample.get("finish_reason"), self.cfg))


@register_grader("repetition")
class RepetitionGrader(_ConfigGrader):
    """The GRPO-zero recipe's reward 2: a penalty for repeated character n-grams."""

    config_cls = RepetitionConfig

    def grade_sample(self, item: Item, sample: Sample) -> Grade:
        return to_grade(repetition_penalty(sample["output_text"], self.cfg))


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


@register_grader("overlong")
class OverlongGrader(_ConfigGrader):
    """The GRPO-zero recipe's reward 3: a soft, then hard penalty as a completion nears its token limit."""

    config_cls = OverlongConfig

    def grade_sample(self, item: Item, sample: Sample) -> Grade:
        lengths = _token_lengths(sample, self.cfg.max_completion_length)
        if isinstance(lengths, str):
            return Grade.abstain(error=lengths)
        return to_grade(overlong_penalty(*lengths, sample.get("finish_reason"), self.cfg))


@register_grader("soft_overlong")
class SoftOverlongGrader(_ConfigGrader):
    """DAPO's soft overlong punishment: a linear penalty in the last tokens before the limit, -1 past it."""

    config_cls = SoftOverlongConfig

    def grade_sample(self, item: Item, sample: Sample) -> Grade:
        lengths = _token_lengths(sample, self.cfg.max_completion_length)
        if isinstance(lengths, str):
            return Grade.abstain(error=lengths)
        return to_grade(soft_overlong_punishment(*lengths, self.cfg))


@register_grader("diversity")
class DiversityGrader(_ConfigGrader):
    """The GRPO-zero recipe's reward 4: a penalty for completions that duplicate others in their group."""

    config_cls = DiversityConfig
    needs_group = True

    def grade_samples(self, item: Item, samples: list[Sample]) -> list[Grade]:
        return [to_grade(r) for r in diversity_penalties([s["output_text"] for s in samples], self.cfg)]


# ---- Kimi length reward --------------------------------------------------------------------------
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
        r = SpecReader(spec, path)
        correct_spec = r.mapping("correct", {"type": "answer"})
        cfg = read_config(r, LengthConfig)
        r.finish()
        return cls(build_grader(correct_spec, r.at("correct")), cfg)

    def _lengths(self, samples: list[Sample]) -> list[int]:
        tokens = [sample_int(s, "completion_tokens") for s in samples]
        if self.cfg.unit == "tokens" and all(t is not None for t in tokens):
            return [int(t) for t in tokens]
        return [len(content_of(s["output_text"])) for s in samples]

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
        include_system: false   # show system turns to the RM (the recipe used user + assistant only)
        end_marker: "<|im_end|>"

    A failing reward model never raises: the group's ungated samples get None and ``counts`` count it; a
    score that is NaN, ±infinity or not a number makes its sample abstain with that error (``non_finite``).
    """

    needs_group = True

    def __init__(self, scorer: Any = None, load: Callable[[], Any] | None = None,
                 quality: QualityConfig = QualityConfig(), include_system: bool = False, end_marker: str = IM_END):
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
        r = SpecReader(spec, path)
        quality = read_config(r, QualityConfig)
        include_system = r.flag("include_system", False)
        end_marker = r.text("end_marker", IM_END)
        make = _scorer_factory(r)
        r.finish()
        return cls(load=make, quality=quality, include_system=include_system, end_marker=end_marker)

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
            violation = template_violation(s["output_text"], s.get("finish_reason"), self.end_marker)
            if self.quality.gate and violation:
                grades[i] = to_grade(gated_reward(violation, self.quality))
                self.counts.gated += 1
            else:
                todo.append(i)
        if todo:
            contents = [content_of(samples[i]["output_text"], self.end_marker) for i in todo]
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


def _scorer_factory(r: SpecReader) -> Callable[[], Any]:
    """Read the model fields of a reward_model spec; return a function that builds the scorer."""
    model, url = r.text("model", None), r.text("url", None)
    batch_size = r.integer("batch_size", 8, minimum=1)
    if (model is None) == (url is None):
        raise ConfigError(r.at("model"), "give exactly one of 'model' (a local folder or 'bundled') and 'url'")
    if url is not None:
        return _remote_factory(r, url, batch_size)
    return _local_factory(r, model, batch_size)


def _remote_factory(r: SpecReader, url: str, batch_size: int) -> Callable[[], Any]:
    from kitae.rewards.remote import RM_PROTOCOLS, RemoteRewardModel

    if not url.startswith(("http://", "https://")):
        raise ConfigError(r.at("url"), f"expected an http:// or https:// URL, got {url!r}")
    kwargs = dict(
        protocol=r.choice("protocol", RM_PROTOCOLS.names(), "kitae"),
        served_model=r.text("served_model", None),
        timeout=r.number("timeout", 30.0, minimum=0.001),
        retries=r.integer("retries", 2, minimum=0),
        backoff=r.number("backoff", 0.5, minimum=0.0),
        max_concurrency=r.integer("max_concurrency", 4, minimum=1),
        api_key_env=r.text("api_key_env", None),
    )
    tokenizer_path = r.text("tokenizer", None)
    if tokenizer_path is not None:
        _must_exist(r, "tokenizer", tokenizer_path)

    def make() -> RemoteRewardModel:
        tokenizer = None
        if tokenizer_path is not None:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
        return RemoteRewardModel(url, tokenizer=tokenizer, batch_size=batch_size, **kwargs)

    return make


def _local_factory(r: SpecReader, model: str, batch_size: int) -> Callable[[], Any]:
    from kitae.rewards.reward_model import LocalRewardModel, resolve_rm_path

    path = resolve_rm_path(model)
    _must_exist(r, "model", path)
    max_length = r.integer("max_length", 2048, minimum=8)
    device = r.text("device", "cpu")
    dtype = r.choice("dtype", ["float32", "bfloat16", "float16"], "float32")
    return lambda: LocalRewardModel(path, batch_size=batch_size, max_length=max_length, device=device, dtype=dtype)


def _must_exist(r: SpecReader, key: str, path: str) -> None:
    if not Path(path).is_dir():
        hint = " (build the bundled one with `python scripts/build_reward_model.py`)" if "kitae-tiny-rm" in path else ""
        raise ConfigError(r.at(key), f"no model folder at {path!r}{hint}; kitae never downloads models")


class RepeatPenalty(Grader):
    """`penalty` for a sample that ended with finish reason "repeat", 0 otherwise (the trainer's
    ``sampling.repeat.penalty``: a sample the rollout engine stopped because it looped)."""

    def __init__(self, penalty: float):
        self.penalty = penalty

    def grade_sample(self, item: dict, sample: dict) -> Grade:
        looped = sample.get("finish_reason") == "repeat"
        return Grade(score=self.penalty if looped else 0.0, reason="repeated itself" if looped else None)
