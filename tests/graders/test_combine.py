"""weighted (renormalizing), gate and multi (OpenAI) graders, and the safe formula parser."""

from __future__ import annotations

import asyncio

import pytest

from kitae.errors import ConfigError
from kitae.graders import Grade, Grader, GRADERS, build_grader, register_grader
from kitae.graders.formula import FormulaError, parse_formula


@pytest.fixture(scope="module", autouse=True)
def fixed_graders():
    """Graders whose scores come from the item, so combinations can be computed by hand."""

    with GRADERS.scoped("test_fixed"), GRADERS.scoped("test_group"):
        @register_grader("test_fixed")
        class Fixed(Grader):
            def __init__(self, field: str):
                self.field = field

            @classmethod
            def from_spec(cls, spec, path):
                return cls(spec.get("field", "x"))

            def grade_sample(self, item, sample):
                value = item[self.field]
                if value == "error":
                    raise RuntimeError("broken part")
                return Grade(score=value, sub_scores={"raw": value}, reason=f"{self.field}={value}")

        @register_grader("test_group")
        class GroupRank(Grader):
            """Needs the group: scores each sample by its rank of length within the group."""

            needs_group = True

            def grade_samples(self, item, samples):
                order = sorted(range(len(samples)), key=lambda i: len(samples[i]["output_text"]))
                return [Grade(score=order.index(i) / (len(samples) - 1)) for i in range(len(samples))]

        yield


def fixed(field: str, **extra) -> dict:
    return {"type": "test_fixed", "field": field, **extra}


def grade_one(spec: dict, **item) -> Grade:
    return build_grader(spec).grade_group(item, [{"output_text": "s"}])[0]


@pytest.mark.parametrize(
    "weights, values, expected",
    [
        ((0.5, 0.5), (0.8, 0.4), 0.6),
        ((0.7, 0.3), (1.0, 0.0), 0.7),  # seed: judge 70% + similarity 30%
        ((0.5, 0.5), (0.8, None), 0.8),  # seed: no numbers in the reference -> the judge alone
        ((3, 1), (None, 0.2), 0.2),
        ((0.5, 0.5), (None, None), None),  # nothing scored -> abstain
        ((1, 0), (0.9, 0.1), 0.9),  # weight 0: logged, not counted
        ((2, 1), (0.0, 0.9), 0.3),
    ],
)
def test_weighted_renormalizes_over_parts_that_scored(weights, values, expected):
    spec = {"type": "weighted", "graders": {"judge": fixed("a", weight=weights[0]), "num": fixed("b", weight=weights[1])}}
    grade = grade_one(spec, a=values[0], b=values[1])
    assert grade.score == pytest.approx(expected) if expected is not None else grade.score is None
    assert grade.sub_scores == {"judge": values[0], "judge.raw": values[0], "num": values[1], "num.raw": values[1]}


def test_weighted_default_weight_is_one_and_reasons_are_kept():
    grade = grade_one({"type": "weighted", "graders": {"p": fixed("a"), "q": fixed("b")}}, a=1.0, b=0.0)
    assert grade.score == 0.5 and grade.reason == "p: a=1.0; q: b=0.0"


def test_weighted_with_a_failing_part():
    grade = grade_one({"type": "weighted", "graders": {"p": fixed("a"), "q": fixed("b")}}, a=0.4, b="error")
    assert grade.score == 0.4 and grade.sub_scores["q"] is None
    grade = grade_one({"type": "weighted", "graders": {"q": fixed("b")}}, b="error")
    assert grade.score is None and "q: RuntimeError: broken part" in grade.error


def test_weighted_seed_example_with_real_graders():
    spec = {"type": "weighted", "graders": {"sim": {"type": "text_similarity", "weight": 0.5},
                                            "num": {"type": "numeric", "weight": 0.5}}}
    grader = build_grader(spec)
    with_numbers = grader.grade_group({"reference_answer": "the rate is 5%"}, [{"output_text": "the rate is 5%"}])[0]
    without = grader.grade_group({"reference_answer": "the cat sat"}, [{"output_text": "the cat"}])[0]
    assert with_numbers.score == 1.0
    assert without.score == pytest.approx(0.8) and without.sub_scores["num"] is None  # ROUGE-L alone


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"type": "weighted", "graders": {}}, "grader.graders: needs at least one grader"),
        ({"type": "weighted", "graders": {"a": fixed("a", weight=-1)}}, "grader.graders.a.weight: must be >= 0"),
        ({"type": "weighted", "graders": {"a": fixed("a", weight=0)}}, "grader.graders: every weight is 0"),
        ({"type": "weighted", "graders": [fixed("a")]}, "grader.graders: expected a mapping"),
        ({"type": "multi", "graders": {"a": {"type": "numeric", "weight": 1}}, "calculate_output": "a"},
         "grader.graders.a.weight: unknown key"),  # weight belongs to weighted
        ({"type": "multi", "graders": {"sim": fixed("a")}, "calculate_output": "0.5 * simm"},
         "grader.calculate_output: unknown name 'simm'; did you mean 'sim'?"),
        ({"type": "multi", "graders": {"sim": fixed("a")}}, "grader.calculate_output: missing (required)"),
        ({"type": "gate", "gate": fixed("a"), "grader": fixed("b"), "threshold": "high"}, "grader.threshold: expected a number"),
    ],
)
def test_composite_spec_errors(spec, message):
    with pytest.raises(ConfigError) as err:
        build_grader(spec)
    assert message in str(err.value)


@pytest.mark.parametrize(
    "extra, gate, inner, expected",
    [
        ({}, 1.0, 0.7, 0.7),  # gate passes: the grader's score
        ({}, 0.0, 0.7, 0.0),  # gate fails: fail_score 0
        ({}, 0.99, 0.7, 0.0),  # default threshold 1.0
        ({"threshold": 0.5}, 0.6, 0.7, 0.7),
        ({"fail_score": -1}, 0.0, 0.7, -1.0),
        ({"fail_score": None}, 0.0, 0.7, None),  # null: abstain when the gate fails
        ({}, None, 0.7, None),  # the gate abstained
    ],
)
def test_gate(extra, gate, inner, expected):
    grade = grade_one({"type": "gate", "gate": fixed("a"), "grader": fixed("b"), **extra}, a=gate, b=inner)
    assert grade.score == expected
    assert grade.sub_scores["gate"] == gate and grade.sub_scores["grader"] == inner


def test_gate_with_real_graders():
    spec = {"type": "gate", "gate": {"type": "format", "check": "json"},
            "grader": {"type": "numeric", "input": "{{sample.output_json.value}}"}}
    grades = build_grader(spec).grade_group({"reference_answer": "5"}, [{"output_text": '{"value": 5}'}, {"output_text": "value: 5"}])
    assert [g.score for g in grades] == [1.0, 0.0]
    assert grades[1].reason.startswith("gate failed (0 < 1)")


@pytest.mark.parametrize(
    "formula, a, b, expected",
    [
        ("a", 0.3, 0.9, 0.3),
        ("0.3 * a + 0.7 * b", 1.0, 0.5, 0.65),
        ("(a + b) / 2", 0.2, 0.6, 0.4),
        ("a ^ 2", 0.5, 0, 0.25),
        ("min(a, b)", 0.2, 0.6, 0.2),
        ("max(a, b, 0.7)", 0.2, 0.6, 0.7),
        ("abs(a - b)", 0.2, 0.6, 0.4),
        ("floor(a * 10) / 10", 0.27, 0, 0.2),
        ("ceil(a)", 0.1, 0, 1.0),
        ("sqrt(a)", 0.25, 0, 0.5),
        ("exp(a) - 1", 0.0, 0, 0.0),
        ("log(b)", 0, 1.0, 0.0),
    ],
)
def test_multi_formulas(formula, a, b, expected):
    spec = {"type": "multi", "graders": {"a": fixed("a"), "b": fixed("b")}, "calculate_output": formula}
    grade = grade_one(spec, a=a, b=b)
    assert grade.score == pytest.approx(expected) and grade.sub_scores["a"] == a


def test_multi_errors_and_abstentions():
    spec = {"type": "multi", "graders": {"a": fixed("a"), "b": fixed("b")}, "calculate_output": "a / b"}
    zero = grade_one(spec, a=1.0, b=0.0)
    assert zero.score is None and "division by zero" in zero.error
    missing = grade_one(spec, a=None, b=0.5)
    assert missing.score is None and missing.error == "abstained: a"
    unused = grade_one({**spec, "calculate_output": "b"}, a=None, b=0.5)
    assert unused.score == 0.5  # a part the formula does not use may abstain


def test_openai_multi_spec_loads_unchanged():
    spec = {
        "type": "multi",
        "graders": {
            "exact": {"type": "string_check", "name": "exact", "input": "{{sample.output_text}}",
                      "reference": "{{item.reference_answer}}", "operation": "eq"},
            "similarity": {"type": "text_similarity", "name": "similarity", "input": "{{sample.output_text}}",
                           "reference": "{{item.reference_answer}}", "evaluation_metric": "fuzzy_match"},
        },
        "calculate_output": "0.5 * exact + 0.5 * similarity",
    }
    grades = build_grader(spec).grade_group({"reference_answer": "abcd"}, [{"output_text": "abcd"}, {"output_text": "abxd"}])
    assert [g.score for g in grades] == pytest.approx([1.0, 0.375])


def test_group_parts_make_the_mix_a_group_grader():
    spec = {"type": "weighted", "graders": {"rank": {"type": "test_group"}, "a": fixed("a", weight=0)}}
    grader = build_grader(spec)
    assert grader.needs_group
    grades = asyncio.run(grader.agrade_group({"a": 0.5}, [{"output_text": "xxx"}, {"output_text": "x"}, {"output_text": "xx"}]))
    assert [g.score for g in grades] == [1.0, 0.0, 0.5]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1 + 2 * 3", 7.0),
        ("(1 + 2) * 3", 9.0),
        ("2 ^ 3 ^ 2", 512.0),  # right-associative
        ("-2 ^ 2", -4.0),  # unary minus binds looser than ^
        ("2 * -3", -6.0),
        ("8 / 2 / 2", 2.0),  # left-associative
        ("1e-1 + .5", 0.6),
        ("log(8, 2)", 3.0),
        ("min(3)", 3.0),
    ],
)
def test_formula_arithmetic(text, expected):
    assert parse_formula(text, set()).evaluate({}) == pytest.approx(expected)


@pytest.mark.parametrize(
    "text, message",
    [
        ("1 +", "unexpected end"),
        ("(1", "expected ')'"),
        ("1 2", "unexpected '2'"),
        ("abs(1, 2)", "abs() takes 1 argument(s), got 2"),
        ("log(1, 2, 3)", "log() takes 1 to 2 argument(s)"),
        ("min()", "unexpected ')'"),
        ("__import__('os')", "unexpected character"),  # no eval, no strings, no attributes
        ("a.b", "unknown name 'a.b'"),
        ("x $ 2", "unexpected character '$'"),
        ("pow(2, 3)", "unknown name 'pow'"),
        ("", "unexpected end"),
    ],
)
def test_formula_parse_errors(text, message):
    with pytest.raises(ConfigError) as err:
        parse_formula(text, {"a"}, "grader.calculate_output")
    assert str(err.value).startswith("grader.calculate_output: ") and message in str(err.value)


def test_formula_error_shows_a_caret_under_the_problem():
    with pytest.raises(ConfigError) as err:
        parse_formula("a + simm", {"a", "sim"})
    assert str(err.value).endswith("a + simm\n        ^")


@pytest.mark.parametrize("text", ["1 / 0", "log(0)", "sqrt(-1)", "exp(1000)", "(-8) ^ 0.5"])
def test_formula_math_errors(text):
    with pytest.raises(FormulaError):
        parse_formula(text, set()).evaluate({})
