"""The hosted RFT grader guide's numeric grader: do the sample's numbers match the reference's key numbers?

For each key number of the reference (see :mod:`kitae.graders.numbers`), find the closest number in the
sample by relative error |s - r| / |r|; credit 1 within ``tolerance`` (1%), ``partial_credit`` (0.5) within
``partial_tolerance`` (5%), else 0. The score is the mean over the reference's numbers (repeats counted
once). A reference without numbers gives no score (None: the row is skipped, as the guide says); a sample
without numbers scores 0.

Years are context, not key numbers: the guide's key numbers are "decimals, percentages, amounts", and a
reference such as "In 2024 revenue was $1,705M" asks for the amount, so a year (a plain 1900-2099, see
:mod:`kitae.graders.numbers`) is left out, unless the reference has no other number ("Founded in 1998."
asks for the year); a year that is a key number must be matched exactly (1% of 2024 is 20 years).

What else is not a key number, so that a right answer cannot "miss" it (details in
:mod:`kitae.graders.numbers`): ordinals (``3rd``, ``2nd-quarter``, 第3, ``3位``: a position, not an amount;
a reference whose only number is an ordinal is skipped), dates (``March 5, 2024``, ``3/5/2024``,
2024年3月5日), clock times (``3 p.m.``, 午後3時), phone numbers (``555-123-4567``, ``03-1234-5678``),
version numbers (``v2.4.1``, ``Python 3.12``), list numbering and a unit's power (``m/s^2``); nor is an English
number word alone in the reference (``one of the two plants``: prose), unless the reference has no number in
digits: a reference ``twenty`` or ``twenty employees`` asks for 20, as a sample's ``twenty`` answers 20. The sample's numbers are read the same way, and its number
words and fractions count too: ``twenty``, 二十, ``3万`` match 20, 20 and 30000; ``1/4``, ``4分の1`` match 0.25;
``1'250'000`` is 1250000. Worked example (the hosted RFT grader guide)::

    reference: WACC ≈ 9.91%, cost of equity 10.34%, after-tax cost of debt 4.15%, EV ≈ $1,705M
    sample:    9.95%, 10.3%, 4.2%, 1,700M        -> (1 + 1 + 0.5 + 1) / 4 = 0.875
    sample:    WACCは1.33%                        -> 0

Spec: ``{type: numeric}``; optional ``tolerance``, ``partial_tolerance``, ``partial_credit``, ``input``,
``reference``, ``match``, ``extra_numbers``, ``extra_penalty``. Only the numbers are checked, not the reasoning
around them (pair it with a judge).

Resisting the hacks the guide warns about ("an answer that lists many numbers is more likely to land near
yours"); the defaults keep the guide's behaviour:

- ``match: closest`` (default): each key number against every number of the sample. ``match: last``: only
  the sample's final answer counts, that is its last K numbers where K is how many key numbers the reference
  has (the last number when it has one); each key number is matched to the closest of those. Unless the
  reference's key numbers are years, the sample's years are context and never its final answer (``$1,705M in
  2024`` ends with 1,705M). Numbers before the final answer are working: neither credited nor charged.
- ``extra_numbers: penalize`` charges ``extra_penalty`` (default 0.1) for each number of the answer (every
  number with ``closest``, the final K with ``last``) that is within ``partial_tolerance`` of no number the
  reference states (its years and number words included); the sample's years are not charged unless the key
  numbers are years. The score is floored at 0. ``extra_numbers: ignore`` (default) charges nothing.

For reference ``15``::

    sample         closest  closest+penalize  last  last+penalize
    15             1        1                 1     1
    6+9=15         1        0.8 (6, 9)        1     1
    1 2 3 ... 20   1        0 (19 extras)     0     0
    15 or 16       1        0.9 (16)          0     0
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from kitae.config import setting
from kitae.errors import ConfigError
from kitae.graders.base import Grade
from kitae.graders.numbers import Quantity, extract_quantities, key_numbers
from kitae.graders.pair import PairGrader, PairSpec
from kitae.graders.spec import read_spec, register_grader
from kitae.graders.template import as_text


def relative_error(got: float, want: float) -> float:
    if want == 0:
        return 0.0 if got == 0 else math.inf
    return abs(got - want) / abs(want)


Match = Literal["closest", "last"]
ExtraNumbers = Literal["ignore", "penalize"]
DEFAULT_EXTRA_PENALTY = 0.1


@dataclass
class NumericSpec(PairSpec):
    tolerance: float = setting(0.01, minimum=0)  # relative error for full credit
    partial_tolerance: float = setting(0.05, minimum=0)  # ... for partial credit
    partial_credit: float = setting(0.5, minimum=0, maximum=1)
    match: Match = "closest"  # last: only the sample's final answer (its last K numbers) counts
    extra_numbers: ExtraNumbers = "ignore"  # penalize: charge each answer number that matches no reference number
    extra_penalty: float | None = setting(None, minimum=0, maximum=1)  # per extra number (default 0.1)

    def validate(self, path: str) -> None:
        if self.partial_tolerance < self.tolerance:
            raise ConfigError(f"{path}.partial_tolerance",
                              f"must be >= tolerance ({self.tolerance}), got {self.partial_tolerance}")
        if self.extra_penalty is not None and self.extra_numbers != "penalize":
            raise ConfigError(f"{path}.extra_penalty", "applies only with extra_numbers: penalize; "
                              "add extra_numbers: penalize or remove extra_penalty")


@register_grader("numeric")
class NumericGrader(PairGrader):
    """The hosted RFT grader guide's numeric grader: reference numbers matched within 1% (full) / 5% (half); None without numbers."""

    def __init__(self, tolerance: float = 0.01, partial_tolerance: float = 0.05, partial_credit: float = 0.5,
                 match: str = "closest", extra_numbers: str = "ignore", extra_penalty: float | None = None,
                 **templates: Any):
        super().__init__(**templates)
        self.tolerance, self.partial_tolerance, self.partial_credit = tolerance, partial_tolerance, partial_credit
        self.match, self.extra_numbers = match, extra_numbers
        self.extra_penalty = DEFAULT_EXTRA_PENALTY if extra_penalty is None else extra_penalty

    @classmethod
    def from_spec(cls, spec: dict, path: str) -> "NumericGrader":
        s = read_spec(NumericSpec, spec, path)
        return cls(s.tolerance, s.partial_tolerance, s.partial_credit, s.match, s.extra_numbers, s.extra_penalty,
                   **s.templates())

    def credit(self, error: float) -> float:
        eps = 1e-12  # 101 vs 100 is "within 1%" despite float rounding
        if error <= self.tolerance + eps:
            return 1.0
        return self.partial_credit if error <= self.partial_tolerance + eps else 0.0

    def score(self, text: str, reference: Any) -> Grade:
        reference = as_text(reference)
        wanted = key_numbers(reference)
        if not wanted:
            return Grade(score=None, reason="reference has no number: skipped")
        stated = extract_quantities(text)
        answer = self._answer(stated, wanted)
        parts = [self._match(q, answer) for q in wanted]
        score = sum(credit for credit, _ in parts) / len(parts)
        notes = [note for _, note in parts]
        if self.match == "last" and len(answer) < len(stated):
            notes.append(f"final answer: the last {len(answer)} of {len(stated)} numbers")
        if self.extra_numbers == "ignore":
            return Grade(score=score, reason="; ".join(notes))
        extras = self._extras(answer, wanted, extract_quantities(reference))
        charge = self.extra_penalty * len(extras)
        if extras:
            notes.append(f"{len(extras)} extra number{'s' if len(extras) > 1 else ''} "
                         f"({', '.join(q.text for q in extras[:5])}{', ...' if len(extras) > 5 else ''}): -{charge:g}")
        return Grade(score=max(0.0, score - charge), sub_scores={"matched": score, "extra_numbers": float(len(extras))},
                     reason="; ".join(notes))

    def _answer(self, stated: list[Quantity], wanted: list[Quantity]) -> list[Quantity]:
        """The sample's numbers that count: all of them (closest), or its final answer (last)."""
        if self.match == "closest":
            return stated
        candidates = stated if _about_years(wanted) else [q for q in stated if not q.year]
        return candidates[-len(wanted):]

    def _extras(self, answer: list[Quantity], wanted: list[Quantity], stated: list[Quantity]) -> list[Quantity]:
        """The answer's numbers near no number the reference states; years only when the key numbers are years."""
        years_count = _about_years(wanted)
        return [q for q in answer if (years_count or not q.year)
                and not any(self._near(q, r) for r in stated)]

    def _near(self, got: Quantity, want: Quantity) -> bool:
        if want.year or got.year:
            return got.value == want.value
        return relative_error(got.value, want.value) <= self.partial_tolerance + 1e-12

    def _match(self, want: Quantity, got: list[Quantity]) -> tuple[float, str]:
        if not got:
            return 0.0, f"{want.text}: no number in sample"
        best = min(got, key=lambda q: relative_error(q.value, want.value))
        error = relative_error(best.value, want.value)
        if want.year:  # 1% of 2024 is 20 years: a year is right or wrong
            credit = float(best.value == want.value)
            return credit, f"{want.text}→{best.text} (year): {credit:g}"
        credit = self.credit(error)
        return credit, f"{want.text}→{best.text} ({error:.1%}): {credit:g}"


def _about_years(wanted: list[Quantity]) -> bool:
    """Whether the reference asks for years (``Founded in 1998.``): then the sample's years are numbers like any."""
    return any(q.year for q in wanted)
