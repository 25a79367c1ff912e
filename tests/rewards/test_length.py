"""Kimi k1.5's length reward (arXiv 2501.12599 §2.3.3) with weight and warm-up, as a function and a grader."""

import pytest

from kitae.graders.answer_match import answers_match
from kitae.graders.base import Grade, Grader
from kitae.rewards.graders import LengthGrader
from kitae.rewards.length import LengthConfig, length_lambdas, length_rewards, length_weight


@pytest.mark.parametrize(
    "lengths,correct,rewards",
    [
        ([10, 20, 30], [True, True, True], [0.5, 0.0, -0.5]),
        ([10, 20, 30], [False, True, False], [0.0, 0.0, -0.5]),  # wrong: min(0, lambda)
        ([10, 20, 30], [False, False, False], [0.0, 0.0, -0.5]),
        ([5, 15], [True, True], [0.5, -0.5]),
        ([10, 12, 20], [True, True, False], [0.5, 0.3, -0.5]),  # 0.5 - 2/10
        ([7, 7, 7], [True, False, True], [0.0, 0.0, 0.0]),  # all the same length
        ([10, 30], [None, True], [None, -0.5]),  # unknown correctness: masked, length still counts
        ([], [], []),
    ],
)
def test_length_rewards(lengths, correct, rewards):
    assert length_rewards(lengths, correct) == pytest.approx(rewards)


def test_lambdas_span_half_to_minus_half():
    assert length_lambdas([3, 4, 5, 7]) == pytest.approx([0.5, 0.25, 0.0, -0.5])


@pytest.mark.parametrize(
    "step,cfg,weight",
    [
        (None, LengthConfig(weight=0.3, warmup_steps=10), 0.3),  # no step known: full weight
        (0, LengthConfig(weight=0.3, warmup_steps=10), 0.0),
        (9, LengthConfig(weight=0.3, warmup_steps=10), 0.0),
        (10, LengthConfig(weight=0.3, warmup_steps=10), 0.3),  # the paper's step change
        (0, LengthConfig(weight=0.3), 0.3),  # no warm-up
        (10, LengthConfig(weight=1.0, warmup_steps=10, ramp_steps=4), 0.0),
        (11, LengthConfig(weight=1.0, warmup_steps=10, ramp_steps=4), 0.25),
        (13, LengthConfig(weight=1.0, warmup_steps=10, ramp_steps=4), 0.75),
        (14, LengthConfig(weight=1.0, warmup_steps=10, ramp_steps=4), 1.0),
        (99, LengthConfig(weight=1.0, warmup_steps=10, ramp_steps=4), 1.0),
    ],
)
def test_length_weight(step, cfg, weight):
    assert length_weight(step, cfg) == pytest.approx(weight)


class AnswerCheck(Grader):
    """A real correctness grader: the bundled task's answer check; abstains when the row has no reference."""

    def grade_sample(self, item, sample):
        if "reference_answer" not in item:
            return Grade.abstain(error="no reference_answer")
        return Grade(float(answers_match(sample["output_text"], item["reference_answer"])))


ITEM = {"messages": [{"role": "user", "content": "12+35は?"}], "reference_answer": "47"}
SAMPLES = [  # correct short, correct long, wrong long
    {"output_text": "47<|im_end|>", "completion_tokens": 4},
    {"output_text": "12+35=47です。<|im_end|>", "completion_tokens": 8},
    {"output_text": "答えは48です。<|im_end|>", "completion_tokens": 12},
]


def test_grader_uses_nested_correctness_and_token_lengths():
    grades = LengthGrader(AnswerCheck()).grade_group(ITEM, SAMPLES)
    assert [g.score for g in grades] == pytest.approx([0.5, 0.0, -0.5])  # lambdas 0.5, 0, -0.5
    assert [g.sub_scores["correct"] for g in grades] == [1.0, 1.0, 0.0]
    assert [g.sub_scores["length"] for g in grades] == [4.0, 8.0, 12.0]


def test_grader_counts_characters_without_token_counts():
    samples = [{"output_text": s["output_text"]} for s in SAMPLES]  # content lengths 2, 11, 8
    grades = LengthGrader(AnswerCheck()).grade_group(ITEM, samples)
    # lambdas: 0.5, 0.5 - 9/9 = -0.5, 0.5 - 6/9 = -1/6 (wrong: min(0, -1/6))
    assert [g.score for g in grades] == pytest.approx([0.5, -0.5, -1 / 6])


def test_grader_warm_up_from_set_step_and_sample_step():
    grader = LengthGrader(AnswerCheck(), LengthConfig(weight=0.5, warmup_steps=10))
    grader.set_step(3)
    assert [g.score for g in grader.grade_group(ITEM, SAMPLES)] == [0.0, 0.0, 0.0]
    grader.set_step(10)
    assert [g.score for g in grader.grade_group(ITEM, SAMPLES)] == pytest.approx([0.25, 0.0, -0.25])
    early = [dict(s, step=2) for s in SAMPLES]  # sample["step"] wins over set_step
    assert [g.score for g in grader.grade_group(ITEM, early)] == [0.0, 0.0, 0.0]


def test_grader_abstains_where_correctness_is_unknown():
    grades = LengthGrader(AnswerCheck()).grade_group({"messages": []}, SAMPLES)
    assert [g.score for g in grades] == [None, None, None]
    assert grades[0].error == "correctness unknown: no reference_answer"


def test_empty_completions_count_as_zero_characters():
    samples = [{"output_text": ""}, {"output_text": "<|im_end|>"}, {"output_text": "47<|im_end|>"}]
    # lengths 0, 0, 2 -> lambdas 0.5, 0.5, -0.5; wrong, wrong, correct -> 0, 0, -0.5
    grades = LengthGrader(AnswerCheck()).grade_group(ITEM, samples)
    assert [g.score for g in grades] == pytest.approx([0.0, 0.0, -0.5])
