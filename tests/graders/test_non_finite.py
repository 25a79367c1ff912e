"""A score that is not a finite number (NaN, ±infinity) abstains with an error, whatever grader gave it.

The check sits in Grader.agrade_group, the one entry point every caller uses, so a grader written tomorrow is
covered too; composite graders meet it twice (each part, then their own combined score).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from kitae.graders import GRADERS, Grade, Grader, build_grader, register_grader

NAN, INF = float("nan"), float("inf")


@pytest.fixture(scope="module", autouse=True)
def item_value_grader():
    """A grader that returns the item's ``x`` as the score and ``sub`` as a sub-score, unchecked."""

    with GRADERS.scoped("test_value"):
        @register_grader("test_value")
        class Value(Grader):
            def __init__(self, field: str = "x"):
                self.field = field

            @classmethod
            def from_spec(cls, spec, path):
                return cls(spec.get("field", "x"))

            def grade_sample(self, item, sample):
                return Grade(score=item[self.field], sub_scores={"raw": item.get("sub", 0.5)})

        yield


def grade_one(spec: dict, **item) -> Grade:
    return build_grader(spec).grade_group(item, [{"output_text": "s"}])[0]


@pytest.mark.parametrize(
    "value, score, error",
    [
        (NAN, None, "score nan is not a finite number"),
        (INF, None, "score inf is not a finite number"),
        (-INF, None, "score -inf is not a finite number"),
        (np.float64("nan"), None, "score nan is not a finite number"),  # numpy scalars too
        (np.float32("inf"), None, "score inf is not a finite number"),
        ("0.5", None, "score '0.5' is not a number"),  # a string is no score either
        (True, None, "score True is not a number"),
        (1e308, 1e308, None),  # large but finite: kept
        (-3, -3, None),  # an int is kept as it is
        (np.float32(0.5), 0.5, None),  # a finite numpy scalar becomes a plain float (JSON-ready)
        (None, None, None),  # an abstention stays a plain abstention
    ],
)
def test_a_score_that_is_not_a_finite_number_abstains_with_an_error(value, score, error):
    grade = grade_one({"type": "test_value"}, x=value)
    assert grade.score == score and type(grade.score) in (type(score), type(None))
    if error is None:
        assert grade.error is None
    else:
        assert error in grade.error


def test_a_non_finite_sub_score_is_logged_as_none_and_the_score_stands():
    grade = grade_one({"type": "test_value"}, x=0.25, sub=NAN)
    assert (grade.score, grade.sub_scores, grade.error) == (0.25, {"raw": None}, None)


@pytest.mark.parametrize(
    "spec, a, b, score, error",
    [
        # weighted: the infinite part drops out, the weights renormalize over the finite one
        ({"type": "weighted", "graders": {"p": {"type": "test_value", "field": "a"},
                                          "q": {"type": "test_value", "field": "b"}}}, INF, 0.4, 0.4, None),
        # weighted: finite parts whose mean overflows to infinity
        ({"type": "weighted", "graders": {"p": {"type": "test_value", "field": "a"},
                                          "q": {"type": "test_value", "field": "b"}}},
         1.5e308, 1.5e308, None, "score inf is not a finite number"),
        # multi: a NaN part the formula needs makes the sample abstain, saying why
        ({"type": "multi", "graders": {"p": {"type": "test_value", "field": "a"},
                                       "q": {"type": "test_value", "field": "b"}}, "calculate_output": "p + q"},
         NAN, 0.4, None, "p: score nan is not a finite number"),
        # gate: an infinite inner grader never passes through the gate
        ({"type": "gate", "gate": {"type": "test_value", "field": "a"}, "grader": {"type": "test_value", "field": "b"}},
         1.0, -INF, None, "score -inf is not a finite number"),
        # gate: a NaN gate abstains instead of failing or passing
        ({"type": "gate", "gate": {"type": "test_value", "field": "a"}, "grader": {"type": "test_value", "field": "b"}},
         NAN, 1.0, None, "score nan is not a finite number"),
    ],
)
def test_combined_graders_never_pass_a_non_finite_score_on(spec, a, b, score, error):
    grade = grade_one(spec, a=a, b=b)
    assert grade.score == (None if score is None else pytest.approx(score))
    if error is not None:
        assert error in grade.error
    assert all(v is None or math.isfinite(v) for v in grade.sub_scores.values())


def test_the_length_reward_treats_a_non_finite_correctness_as_unknown():
    spec = {"type": "length", "correct": {"type": "test_value"}}
    grades = build_grader(spec).grade_group({"x": NAN}, [{"output_text": "a"}, {"output_text": "bb"}])
    assert [g.score for g in grades] == [None, None]
    assert "not a finite number" in grades[0].error
