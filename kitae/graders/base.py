"""The grader interface (the hosted RFT grader guide): a grader scores every sample of one group.

A grader reads an *item* (one dataset row: ``messages``, ``reference_answer`` and any extra fields) and the
*samples* generated for it, and returns one :class:`Grade` per sample, in order.

A sample is a dict. ``output_text`` is always there; rollouts also give ``finish_reason`` ("stop",
"length", "repeat"), ``completion_tokens`` and the run's ``max_completion_length``; ``output_json`` is filled
lazily by templates when the text parses as JSON.

Graders never raise out of :meth:`Grader.grade_group` / :meth:`Grader.agrade_group`: an exception becomes
``Grade(score=None, error=...)`` (an abstention), which the trainer masks and counts. Those two methods also
check every score: one that is not a finite number (NaN, ±infinity, a string) becomes an abstention with an
error saying so, and a non-finite sub-score becomes None, so no such value reaches training or the run store.

Graders that count something (model calls, tokens, failures) report it through :meth:`Grader.counters`.

Two kinds:
- per-sample graders override :meth:`Grader.grade_sample` (or the async :meth:`Grader.agrade_sample`);
- group graders (diversity, group judge) set ``needs_group = True`` and override :meth:`Grader.grade_samples`
  (or :meth:`Grader.agrade_samples`), seeing the whole group at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import numbers
from dataclasses import dataclass, field
from typing import Any

from kitae.aio import run_sync  # noqa: F401  (graders run async work from sync code)

Item = dict[str, Any]
Sample = dict[str, Any]


@dataclass
class Grade:
    """One sample's grade. ``score`` None means the grader abstained (masked, not zero)."""

    score: float | None
    sub_scores: dict[str, float | None] = field(default_factory=dict)
    reason: str | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def abstain(cls, error: str | None = None, reason: str | None = None) -> "Grade":
        return cls(score=None, error=error, reason=reason)

    def mark_passed(self, threshold: float | None) -> "Grade":
        """OpenAI's ``pass_threshold``, as every kitae grader applies it: the score is unchanged and
        ``sub_scores["passed"]`` is 1.0 when score >= threshold, else 0.0 (None when the grade abstained)."""
        if threshold is not None:
            self.sub_scores["passed"] = None if self.score is None else float(self.score >= threshold)
        return self


class Grader:
    """Base class. Subclasses override one of grade_sample / agrade_sample / grade_samples / agrade_samples."""

    type_name: str = "grader"  # the spec `type`
    needs_group: bool = False
    name: str = ""

    # ---- what subclasses override -------------------------------------------------------------
    def grade_sample(self, item: Item, sample: Sample) -> Grade:
        raise NotImplementedError

    async def agrade_sample(self, item: Item, sample: Sample) -> Grade:
        return self.grade_sample(item, sample)

    def grade_samples(self, item: Item, samples: list[Sample]) -> list[Grade]:
        return [self.grade_sample(item, s) for s in samples]

    async def agrade_samples(self, item: Item, samples: list[Sample]) -> list[Grade]:
        if type(self).agrade_sample is not Grader.agrade_sample:
            return list(await asyncio.gather(*(self.agrade_sample(item, s) for s in samples)))
        return self.grade_samples(item, samples)

    def close(self) -> None:
        """Release what the grader holds (worker processes, clients). Safe to call twice."""

    def counters(self) -> dict[str, float]:
        """Cumulative counts since the grader was built (judge calls and tokens, reward-model failures, ...).
        The trainer logs each step's change as ``grader/<component>/<counter>``; a grader made of graders
        includes its parts' as ``part/counter``. Default: nothing counted."""
        return {}

    # ---- what callers use (never raise) -------------------------------------------------------
    async def agrade_group(self, item: Item, samples: list[Sample]) -> list[Grade]:
        try:
            grades = await self.agrade_samples(item, samples)
        except Exception as exc:  # a failing grader abstains, it never kills a run
            return [Grade.abstain(error=f"{type(exc).__name__}: {exc}") for _ in samples]
        if len(grades) != len(samples):
            msg = f"grader returned {len(grades)} grades for {len(samples)} samples"
            return [Grade.abstain(error=msg) for _ in samples]
        return [checked(g) for g in grades]

    def grade_group(self, item: Item, samples: list[Sample]) -> list[Grade]:
        """Synchronous entry point; safe to call from code that has no event loop running."""
        return run_sync(self.agrade_group(item, samples))


def is_finite_number(value: Any) -> bool:
    """A real number (numpy scalars included) that is neither NaN nor infinite; bools are not."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def checked(grade: Grade) -> Grade:
    """The grade, or an abstention when its score is not a finite number; non-finite sub-scores become None.
    A numpy score becomes a plain float.

    ``min(10.0, nan)`` is 10.0: a NaN clipped into range is the top reward, so nothing downstream may see one.
    """
    subs = grade.sub_scores
    if any(_non_finite(v) for v in subs.values()):
        subs = {k: None if _non_finite(v) else v for k, v in subs.items()}
    score = grade.score
    if score is None or is_finite_number(score):
        plain = score if score is None or type(score) in (int, float) else float(score)
        if subs is grade.sub_scores and plain is score:
            return grade
        return dataclasses.replace(grade, score=plain, sub_scores=subs)
    if _non_finite(score):
        error = f"score {float(score)!r} is not a finite number"
    else:
        error = f"score {score!r} is not a number"
    error += f"; {grade.error}" if grade.error else ""
    return Grade(score=None, sub_scores=subs, reason=grade.reason, error=error)


def _non_finite(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and not math.isfinite(value)
