"""What goes into the run store and what comes out of it.

In: the trainer hands one :class:`GroupRecord` per prompt per step, each with its :class:`SampleRecord` list.
Out: readers get :class:`GroupRow` (a group plus the statistics the web page sorts by), :class:`EvalRow`
and :class:`RunSummary`.

Group statistics, stored with the group so that sorting and filtering 100,000 samples is an index lookup:
rewards that are None (every grader abstained) are left out; ``reward_std`` is the population standard
deviation and is exactly 0.0 when every scored sample has the same reward (a zero-variance group, which
teaches GRPO nothing). A sample is truncated when its ``finish_reason`` is "length".

    rewards [1.0, 0.0, None, 1.0]  ->  n_scored 3, reward_mean 0.6667, reward_std 0.4714
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

from kitae.jsonsafe import dumps


@dataclass
class SampleRecord:
    """One completion of a group, with every reward component kept apart (component -> score)."""

    text: str
    completion_tokens: int
    finish_reason: str
    reward: float | None
    advantage: float
    scores: dict[str, float | None] = field(default_factory=dict)
    reasons: dict[str, str | None] = field(default_factory=dict)
    sub_scores: dict[str, dict] = field(default_factory=dict)
    errors: dict[str, str | None] = field(default_factory=dict)
    policy_version: int | None = None  # async rollouts: the policy version (optimizer steps) that sampled it
    thinking_open: bool = False  # the prompt opened a <think> block the text starts inside (kitae.chat.opens_thinking)
    # An agent's episode (kitae.rollout.trajectory); all three None for a single-turn sample, which costs nothing.
    # ``episode``: the Episode as JSON: turns [{start, end, text, finish_reason, malformed, tool_calls [{name,
    # arguments, id, result, error, seconds, turn}]}], messages, end, environment_reward, template_rewrites, tools
    episode: dict | None = None
    trained_spans: list[list[int]] | None = None  # [start, end) completion-token spans the loss saw; None: all
    sampled_tokens: int | None = None  # completion tokens the policy sampled; None: all of them

    @property
    def turns(self) -> list[dict]:
        """The episode's turns ([] for a single-turn sample; what is not a turn object in a hand-edited run.db
        is left out)."""
        return _objects((self.episode or {}).get("turns"))

    @property
    def n_turns(self) -> int:
        return len(self.turns) if self.episode else 1

    @property
    def episode_end(self) -> str | None:
        """Why the episode ended (kitae.rollout.trajectory.EPISODE_ENDS); None for a single-turn sample."""
        return self.episode.get("end") if self.episode else None

    @property
    def environment_reward(self) -> float | None:
        return self.episode.get("environment_reward") if self.episode else None

    @property
    def tool_calls(self) -> list[dict]:
        """Every tool call of the episode, in order ([] for a single-turn sample)."""
        return [c for t in self.turns for c in _objects(t.get("tool_calls"))]

    def spans(self) -> list[list[int]]:
        """The trained spans, a single-turn sample's included (every token: [[0, completion_tokens]])."""
        if self.trained_spans is not None:
            return self.trained_spans
        return [[0, self.completion_tokens]] if self.completion_tokens else []


def _objects(value: Any) -> list[dict]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


@dataclass
class GroupRecord:
    """One prompt of one step and the samples generated for it."""

    prompt: str
    messages: list[dict]
    reference: str | None
    item: dict
    samples: list[SampleRecord]
    group_index: int


@dataclass
class GroupStats:
    n_samples: int
    n_scored: int
    n_truncated: int
    reward_mean: float | None
    reward_std: float | None


@dataclass
class GroupRow:
    """A stored group as readers see it; ``samples`` is filled only when asked for."""

    id: int
    step: int
    group_index: int
    prompt: str
    messages: list[dict]
    reference: str | None
    item: dict
    n_samples: int
    n_scored: int
    n_truncated: int
    reward_mean: float | None
    reward_std: float | None
    samples: list[SampleRecord] = field(default_factory=list)

    def to_record(self) -> GroupRecord:
        return GroupRecord(self.prompt, self.messages, self.reference, self.item, self.samples, self.group_index)


@dataclass
class EvalRow:
    step: int
    metrics: dict[str, float | None]
    n_samples: int
    logged_at: float

    @property
    def score(self) -> float | None:
        return eval_score(self.metrics)


@dataclass
class RunSummary:
    """One line of `kitae runs list`. ``error`` is set (and status is "unreadable") for a broken run.db."""

    name: str
    path: str
    status: str
    model: str | None = None
    steps: int | None = None
    reward: float | None = None
    eval_score: float | None = None
    started_at: float | None = None
    updated_at: float | None = None
    error: str | None = None


def group_stats(samples: list[SampleRecord]) -> GroupStats:
    rewards = [s.reward for s in samples if s.reward is not None]
    truncated = sum(1 for s in samples if s.finish_reason == "length")
    if not rewards:
        return GroupStats(len(samples), 0, truncated, None, None)
    mean = sum(rewards) / len(rewards)
    if max(rewards) == min(rewards):
        std = 0.0  # exact, so "zero variance" never depends on rounding
    else:
        std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
    return GroupStats(len(samples), len(rewards), truncated, mean, std)


def eval_score(metrics: dict[str, float | None]) -> float | None:
    """The headline number of an eval: "score", else "reward", else the first metric logged."""
    for key in ("score", "reward"):
        if key in metrics:
            return metrics[key]
    return next(iter(metrics.values()), None)


def scalar(value: Any) -> float | None:
    """A metric value as a float (numpy and torch scalars included); None and NaN become None.

    SQLite stores a NaN as NULL anyway; doing it here keeps JSON columns the same and valid JSON."""
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value


def to_json(value: Any) -> str:
    """JSON text that every reader (SQLite's json_extract included) accepts: NaN and ±infinity become null,
    text becomes valid UTF-8 (:func:`valid_text`); anything else JSON lacks is written as its str()."""
    return valid_text(dumps(value, default=str))


def valid_text(text: str) -> str:
    """`text` as SQLite can store it: a lone surrogate ("\\ud800", which UTF-8 cannot encode and which
    grader errors and decoded bytes can carry) becomes U+FFFD; a split surrogate pair becomes its character.

    >>> valid_text("ok\\ud800")
    'ok\\ufffd'
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def from_json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def prompt_key(prompt: str) -> str:
    """A short fixed-size key for a prompt, so "the same prompt across steps" is an index lookup."""
    return hashlib.sha1(valid_text(prompt).encode("utf-8")).hexdigest()[:16]
