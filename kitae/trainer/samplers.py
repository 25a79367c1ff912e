"""Prompt samplers: which prompts each step trains on. Registered by name; their state survives resume.

A sampler is asked for `k` prompt indices per step (``sample(k, step)``) and is told afterwards how each prompt
did (``update(indices, pass_rates)``, a pass rate in [0, 1] per prompt or None when it could not be graded).
``state_dict()`` / ``load_state_dict()`` go into every checkpoint, so a resumed run draws the same prompts.

- ``uniform``: epochs over a seeded shuffle; ignores pass rates.
- ``prioritized`` (Kimi k1.5 §2.3.4): P(i) ∝ max(1 - s_i, floor), s_i the tracked success rate of prompt i.
  Departures: the paper's text says "proportional to 1/s_i", which is infinite for a prompt never solved and
  favours nothing once s_i is small; we use 1 - s_i, with a floor so a solved prompt is still revisited now and
  then, and a prompt never tried counts as s_i = 0 (weight 1), so every prompt gets tried early.
- ``curriculum`` (Kimi k1.5 §2.3.4 and the §3.5 ablation): ``hard_focus`` warms up on the whole set for
  ``warmup_steps`` steps, then draws only hard prompts (a difficulty label in ``hard_levels``, or a measured
  success rate below ``hard_threshold``); ``easy_to_hard`` starts from the easiest label and adds one harder
  level at a time over ``ramp_steps`` steps.

Within one call no prompt is drawn twice (unless k exceeds the pool). Probabilities are those of the first draw;
``probabilities(step)`` returns them, so they can be checked by hand.

    >>> s = PrioritizedSampler(4, floor=0.05)
    >>> s.update([0, 1, 2], [0.0, 0.5, 1.0])            # prompt 3 never tried: s_3 = 0
    >>> [round(p, 4) for p in s.probabilities()]          # weights 1, 0.5, 0.05, 1 over 2.55
    [0.3922, 0.1961, 0.0196, 0.3922]
"""

from __future__ import annotations

import bisect
import itertools
import random
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from kitae.config import Variant, setting
from kitae.errors import ConfigError
from kitae.registry import Registry

SAMPLERS = Registry("prompt sampler")


@dataclass
class SamplerSettings(Variant):
    """Which prompts each step draws (``data.sampler``: ``{name: NAME, ...its settings}``, or NAME alone; the name
    left out is uniform). The pass-rate settings here are every sampler's (the pass rates are also logged); each
    sampler's own settings subclass this beside it and are passed to its constructor."""

    registry: ClassVar[Registry] = SAMPLERS
    kind: ClassVar[str] = "prompt sampler"
    name_key: ClassVar[str] = "name"
    type: str = setting("", key="name")  # uniform | prioritized | curriculum
    correct: str | None = None  # reward component whose score makes the pass rates (default: one named 'correct')
    pass_threshold: float = 1.0  # a sample passes when that component's score >= this
    ema: float = 0.0  # success-rate memory: 0 = mean of every attempt, else the newest attempt's weight

    @classmethod
    def read(cls, value: Any, path: str, flat: dict | None = None, flat_path: str = "") -> "SamplerSettings":
        if isinstance(value, dict) and cls.name_key not in value:  # {ema: 0.1}: uniform, as it always was
            value = {cls.name_key: "uniform", **value}
        return super().read(value, path, flat, flat_path)

    def validate(self, path: str) -> None:
        if not 0 <= self.ema < 1:
            raise ConfigError(f"{path}.ema", f"must be in [0, 1), got {self.ema}")

    def options(self) -> dict[str, Any]:
        """The sampler's constructor keywords: its own settings and the success-rate memory."""
        return {k: v for k, v in self.__dict__.items() if k not in ("type", "correct", "pass_threshold")}


# Every sampler setting a config.yaml saved before each sampler had its own settings holds, written whatever the
# sampler (see upgrade_saved_sampler).
SAVED_SAMPLER_KEYS = ("name", "correct", "pass_threshold", "ema", "floor", "schedule", "warmup_steps", "ramp_steps",
                      "difficulty_key", "levels", "hard_levels", "hard_threshold")


def upgrade_saved_sampler(section: Any) -> None:
    """``data.sampler`` of a config.yaml saved before each sampler had its own settings (every one of
    SAVED_SAMPLER_KEYS there): keeps only the settings its sampler takes, in place, so the saved run reads back and
    resumes; a config with a few of them for a sampler that does not take them is still an error."""
    if not isinstance(section, dict) or not all(key in section for key in SAVED_SAMPLER_KEYS):
        return
    try:
        taken = SamplerSettings.settings_class(str(section["name"]), "data.sampler.name").__dataclass_fields__
    except ConfigError:
        return  # an unknown sampler: reading the section names it
    for key in SAVED_SAMPLER_KEYS[1:]:
        if key not in taken:
            del section[key]


@SAMPLERS.register("uniform")
class UniformSampler:
    """Epochs over a seeded shuffle of the prompts (or in order with shuffle=False); no prompt repeats
    within an epoch. State: (epoch, position), so a resumed run continues the same sequence."""

    def __init__(self, num_prompts: int, seed: int = 0, shuffle: bool = True, **_: Any):
        self.n, self.seed, self.shuffle = num_prompts, seed, shuffle
        self.epoch, self.pos = 0, 0
        self._order = self._make_order()

    def _make_order(self) -> list[int]:
        order = list(range(self.n))
        if self.shuffle:
            random.Random(self.seed * 100_003 + self.epoch).shuffle(order)
        return order

    def sample(self, k: int, step: int | None = None) -> list[int]:
        out = []
        while len(out) < k:
            if self.pos >= self.n:
                self.epoch, self.pos = self.epoch + 1, 0
                self._order = self._make_order()
            out.append(self._order[self.pos])
            self.pos += 1
        return out

    def probabilities(self, step: int | None = None) -> list[float]:
        return [1.0 / self.n] * self.n  # over an epoch; the next draw itself is fixed by the shuffle

    def update(self, indices: list[int], pass_rates: list[float | None]) -> None:
        pass

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "pos": self.pos}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.pos = state["epoch"], state["pos"]
        self._order = self._make_order()


class SuccessRates:
    """Each prompt's success rate s_i: the mean of its pass rates so far, or with ``ema`` > 0 an exponential
    moving average (s <- (1 - ema) s + ema * rate). None for a prompt never graded."""

    def __init__(self, n: int, ema: float = 0.0):
        self.ema = ema
        self.rate: list[float | None] = [None] * n
        self.count = [0] * n

    def update(self, indices: list[int], pass_rates: list[float | None]) -> None:
        for i, r in zip(indices, pass_rates):
            if r is None:
                continue
            old, c = self.rate[i], self.count[i]
            if old is None:
                self.rate[i] = float(r)
            elif self.ema > 0:
                self.rate[i] = (1 - self.ema) * old + self.ema * r
            else:
                self.rate[i] = (old * c + r) / (c + 1)
            self.count[i] = c + 1

    def state_dict(self) -> dict:
        return {"rate": list(self.rate), "count": list(self.count)}

    def load_state_dict(self, state: dict) -> None:
        self.rate, self.count = list(state["rate"]), list(state["count"])


def weighted_draw(rng: random.Random, weights: list[float], k: int) -> list[int]:
    """k indices, each draw ∝ the weights of the indices not drawn yet; once all are drawn, a new round."""
    out: list[int] = []
    left: list[int] = []
    while len(out) < k:
        left = left or list(range(len(weights)))
        cum = list(itertools.accumulate(weights[i] for i in left))
        j = min(bisect.bisect_right(cum, rng.random() * cum[-1]), len(left) - 1)
        out.append(left.pop(j))
    return out


class _TracksRates:
    """A sampler that keeps each prompt's success rate (``self.rates``) and draws with ``self.rng``."""

    rates: SuccessRates
    rng: random.Random

    def update(self, indices: list[int], pass_rates: list[float | None]) -> None:
        self.rates.update(indices, pass_rates)

    def state_dict(self) -> dict:
        return {"rng": self.rng.getstate(), "rates": self.rates.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.rng.setstate(state["rng"])
        self.rates.load_state_dict(state["rates"])


@dataclass
class PrioritizedSettings(SamplerSettings):
    floor: float = setting(0.05, minimum=0)  # P(i) ∝ max(1 - s_i, floor)


@SAMPLERS.register("prioritized", settings=PrioritizedSettings)
class PrioritizedSampler(_TracksRates):
    """P(i) = w_i / Σ_j w_j with w_i = max(1 - s_i, floor); s_i = 0 for a prompt never graded."""

    def __init__(self, num_prompts: int, seed: int = 0, floor: float = 0.05, ema: float = 0.0, **_: Any):
        if not 0 < floor <= 1:
            raise ConfigError("data.sampler.floor", f"must be in (0, 1], got {floor}")
        self.n, self.floor = num_prompts, floor
        self.rates = SuccessRates(num_prompts, ema)
        self.rng = random.Random(seed)

    def weights(self) -> list[float]:
        return [max(1.0 - (s if s is not None else 0.0), self.floor) for s in self.rates.rate]

    def probabilities(self, step: int | None = None) -> list[float]:
        w = self.weights()
        total = sum(w)
        return [x / total for x in w]

    def sample(self, k: int, step: int | None = None) -> list[int]:
        return weighted_draw(self.rng, self.weights(), k)

@dataclass
class CurriculumSettings(SamplerSettings):
    schedule: Literal["hard_focus", "easy_to_hard"] = "hard_focus"  # hard prompts after a warm-up, or levels added
    # one at a time
    warmup_steps: int = setting(10, minimum=0)  # hard_focus: steps on the whole set before only hard prompts
    ramp_steps: int = setting(50, minimum=0)  # easy_to_hard: steps until every level is in the pool
    difficulty_key: str | None = "difficulty"  # the row field with the label; null = measured rates
    levels: list[str] = field(default_factory=lambda: ["easy", "medium", "hard"])  # every label, easiest first
    hard_levels: list[str] | None = None  # hard_focus: labels that count as hard (default: the last)
    hard_threshold: float = 0.5  # hard_focus without labels: hard when s_i < this (or never graded)


@SAMPLERS.register("curriculum", settings=CurriculumSettings)
class CurriculumSampler(_TracksRates):
    """Uniform over a pool that depends on the step.

    ``hard_focus``: steps 1..warmup_steps draw from every prompt; later steps only from hard ones (label in
    ``hard_levels``, default the last of ``levels``; or, with ``difficulty_key`` None, a measured success rate
    below ``hard_threshold`` or never measured). ``easy_to_hard``: with m levels, step t draws from the levels of
    rank <= min(m - 1, floor(m * (t - 1) / ramp_steps)), so level j joins at step 1 + ceil(j * ramp_steps / m).
    An empty pool falls back to every prompt; a pool smaller than k is used whole
    and the rest is drawn from outside it.
    """

    def __init__(
        self,
        num_prompts: int,
        seed: int = 0,
        rows: list[dict] | None = None,
        schedule: str = "hard_focus",
        warmup_steps: int = 10,
        ramp_steps: int = 50,
        difficulty_key: str | None = "difficulty",
        levels: list[str] | None = None,
        hard_levels: list[str] | None = None,
        hard_threshold: float = 0.5,
        ema: float = 0.0,
        **_: Any,
    ):
        self.n, self.schedule = num_prompts, schedule
        self.warmup_steps, self.ramp_steps, self.hard_threshold = warmup_steps, max(1, ramp_steps), hard_threshold
        self.levels = list(levels or ["easy", "medium", "hard"])
        self.hard_levels = set(hard_levels or self.levels[-1:])
        self.rank = self._ranks(rows, difficulty_key) if difficulty_key else None
        if schedule == "easy_to_hard" and self.rank is None:
            raise ConfigError("data.sampler.difficulty_key", "easy_to_hard needs difficulty labels in the rows")
        if schedule not in ("hard_focus", "easy_to_hard"):
            raise ConfigError("data.sampler.schedule", f"got {schedule!r}; expected hard_focus or easy_to_hard")
        self.rates = SuccessRates(num_prompts, ema)
        self.rng = random.Random(seed)

    def _ranks(self, rows: list[dict] | None, key: str) -> list[int]:
        if rows is None:
            raise ConfigError("data.sampler.difficulty_key", "curriculum by labels needs the prompt rows")
        ranks = []
        for i, row in enumerate(rows):
            label = row.get(key)
            if label not in self.levels:
                raise ConfigError(
                    "data.sampler.levels",
                    f"row {i + 1} has {key}={label!r}, not one of {self.levels}; list every label, easiest first",
                )
            ranks.append(self.levels.index(label))
        return ranks

    def pool(self, step: int | None) -> list[int]:
        step = 1 if step is None else step
        if self.schedule == "easy_to_hard":
            m = len(self.levels)
            top = min(m - 1, m * max(0, step - 1) // self.ramp_steps)  # integers: exact at the boundaries
            pool = [i for i, r in enumerate(self.rank) if r <= top]
        elif step <= self.warmup_steps:
            pool = list(range(self.n))
        elif self.rank is not None:
            pool = [i for i, r in enumerate(self.rank) if self.levels[r] in self.hard_levels]
        else:
            pool = [i for i, s in enumerate(self.rates.rate) if s is None or s < self.hard_threshold]
        return pool or list(range(self.n))

    def probabilities(self, step: int | None = None) -> list[float]:
        pool = set(self.pool(step))
        return [1.0 / len(pool) if i in pool else 0.0 for i in range(self.n)]

    def sample(self, k: int, step: int | None = None) -> list[int]:
        pool = self.pool(step)
        if len(pool) >= k:
            return self.rng.sample(pool, k)
        inside = set(pool)
        rest = [i for i in range(self.n) if i not in inside]
        picked = self.rng.sample(pool, len(pool)) + self.rng.sample(rest, min(len(rest), k - len(pool)))
        return picked + weighted_draw(self.rng, [1.0] * self.n, k - len(picked))
