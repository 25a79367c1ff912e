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
version numbers (``v2.4.1``, ``Python 3.12``) and list numbering; nor is an English number word alone in the
reference (``one of the two plants``: prose). The sample's numbers are read the same way, and its number
words and fractions count too: ``twenty``, 二十, ``3万`` match 20, 20 and 30000; ``1/4``, ``4分の1`` match 0.25;
``1'250'000`` is 1250000. Worked example (the hosted RFT grader guide)::

    reference: WACC ≈ 9.91%, cost of equity 10.34%, after-tax cost of debt 4.15%, EV ≈ $1,705M
    sample:    9.95%, 10.3%, 4.2%, 1,700M        -> (1 + 1 + 0.5 + 1) / 4 = 0.875
    sample:    WACCは1.33%                        -> 0

Spec: ``{type: numeric}``; optional ``tolerance``, ``partial_tolerance``, ``partial_credit``, ``input``,
``reference``. Only the numbers are checked, not the reasoning around them (pair it with a judge).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

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


@dataclass
class NumericSpec(PairSpec):
    tolerance: float = setting(0.01, minimum=0)  # relative error for full credit
    partial_tolerance: float = setting(0.05, minimum=0)  # ... for partial credit
    partial_credit: float = setting(0.5, minimum=0, maximum=1)

    def validate(self, path: str) -> None:
        if self.partial_tolerance < self.tolerance:
            raise ConfigError(f"{path}.partial_tolerance",
                              f"must be >= tolerance ({self.tolerance}), got {self.partial_tolerance}")


@register_grader("numeric")
class NumericGrader(PairGrader):
    """The hosted RFT grader guide's numeric grader: reference numbers matched within 1% (full) / 5% (half); None without numbers."""

    def __init__(self, tolerance: float = 0.01, partial_tolerance: float = 0.05, partial_credit: float = 0.5,
                 **templates: Any):
        super().__init__(**templates)
        self.tolerance, self.partial_tolerance, self.partial_credit = tolerance, partial_tolerance, partial_credit

    @classmethod
    def from_spec(cls, spec: dict, path: str) -> "NumericGrader":
        s = read_spec(NumericSpec, spec, path)
        return cls(s.tolerance, s.partial_tolerance, s.partial_credit, **s.templates())

    def credit(self, error: float) -> float:
        eps = 1e-12  # 101 vs 100 is "within 1%" despite float rounding
        if error <= self.tolerance + eps:
            return 1.0
        return self.partial_credit if error <= self.partial_tolerance + eps else 0.0

    def score(self, text: str, reference: Any) -> Grade:
        wanted = key_numbers(as_text(reference))
        if not wanted:
            return Grade(score=None, reason="reference has no number: skipped")
        got = extract_quantities(text)
        parts = [self._match(q, got) for q in wanted]
        score = sum(credit for credit, _ in parts) / len(parts)
        return Grade(score=score, reason="; ".join(note for _, note in parts))

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

