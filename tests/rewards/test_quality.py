"""Seed 000's reward-model quality shaping: gate, scale, clip ±10, length factor on positive scores only."""

import pytest

from kitae.rewards.graders import RewardModelGrader
from kitae.rewards.quality import QualityConfig, quality_reward


@pytest.mark.parametrize(
    "rm,chars,cfg,score",
    [
        (25.0, 50, QualityConfig(), 5.0),  # clipped to 10, then × 50/100
        (4.0, 200, QualityConfig(), 4.0),  # long enough: factor 1
        (4.0, 20, QualityConfig(), 0.8),  # 4 × 0.2
        (-3.0, 5, QualityConfig(), -3.0),  # negative: no length factor
        (-25.0, 5, QualityConfig(), -10.0),  # clipped
        (3.0, 100, QualityConfig(scale=2.0), 6.0),
        (3.0, 100, QualityConfig(scale=2.0, clip=5.0), 5.0),
        (4.0, 1, QualityConfig(full_chars=0), 4.0),  # length factor off
        (0.0, 1, QualityConfig(), 0.0),
        (None, 50, QualityConfig(), None),  # the reward model failed: masked
        (float("nan"), 50, QualityConfig(), None),  # NaN is no score: masked, never min(10, nan) = 10
        (float("inf"), 50, QualityConfig(), None),  # nor is infinity: never clipped to +10 ...
        (float("-inf"), 50, QualityConfig(), None),  # ... or -10
    ],
)
def test_quality_reward(rm, chars, cfg, score):
    got = quality_reward(rm, chars, cfg).score
    assert got == (None if score is None else pytest.approx(score))


class CharCountRM:
    """A real (if simple) scorer: the answer's length in characters minus 10. Records what it was shown."""

    def __init__(self):
        self.seen = []

    def score(self, conversations):
        self.seen += conversations
        return [len(c[-1]["content"]) - 10.0 for c in conversations]


ITEM = {"messages": [{"role": "system", "content": "丁寧に"}, {"role": "user", "content": "首都は?"}]}


def test_grader_gates_scales_and_shows_user_and_assistant_turns():
    rm = CharCountRM()
    grader = RewardModelGrader(rm, quality=QualityConfig(full_chars=40))
    samples = [
        {"output_text": "x" * 30 + "<|im_end|>"},  # RM 20 -> 10 (clip) × 30/40 = 7.5
        {"output_text": "東京です。<|im_end|>"},  # RM 5 - 10 = -5 -> -5 (no length factor)
        {"output_text": "東京です。"},  # no end marker: gated, 0.0, not sent to the RM
        {"output_text": "<|im_end|>"},  # only the marker: gated
        {"output_text": "x" * 12 + "<|im_end|>", "finish_reason": "length"},  # cut: gated
    ]
    grades = grader.grade_group(ITEM, samples)
    assert [g.score for g in grades] == pytest.approx([7.5, -5.0, 0.0, 0.0, 0.0])
    assert grades[2].reason == "not scored: no end marker <|im_end|>"
    assert len(rm.seen) == 2
    assert rm.seen[1] == [{"role": "user", "content": "首都は?"}, {"role": "assistant", "content": "東京です。"}]
    assert grader.counts.as_dict() == {
        "samples": 5, "scored": 2, "gated": 3, "abstained": 0, "non_finite": 0, "failed_calls": 0, "last_error": None}


def test_grader_without_gate_scores_everything_and_can_show_system():
    rm = CharCountRM()
    grader = RewardModelGrader(rm, quality=QualityConfig(gate=False, full_chars=0), include_system=True)
    grades = grader.grade_group(ITEM, [{"output_text": "東京です。"}])
    assert grades[0].score == pytest.approx(-5.0)
    assert rm.seen[0][0] == {"role": "system", "content": "丁寧に"}


class BrokenRM:
    def score(self, conversations):
        raise RuntimeError("CUDA out of memory")


def test_failing_model_abstains_and_counts():
    grader = RewardModelGrader(BrokenRM())
    samples = [{"output_text": "東京です。<|im_end|>"}, {"output_text": "no marker"}]
    grades = grader.grade_group(ITEM, samples)
    assert grades[0].score is None and "CUDA out of memory" in grades[0].error
    assert grades[1].score == 0.0  # gated ones are unaffected
    assert grader.counts.failed_calls == 1 and grader.counts.abstained == 1
    assert grader.stats()["last_error"] == "reward model failed: RuntimeError: CUDA out of memory"


class FixedRM:
    """Gives these scores, in order, whatever it is shown."""

    def __init__(self, scores):
        self.scores = scores

    def score(self, conversations):
        return self.scores[: len(conversations)]


def test_non_finite_scores_abstain_with_a_counted_error():
    grader = RewardModelGrader(FixedRM([float("nan"), float("inf"), float("-inf"), 3.0, None]))
    grades = grader.grade_group(ITEM, [{"output_text": f"答え{i}です。<|im_end|>"} for i in range(5)])
    assert [g.score for g in grades[:4]] == [None, None, None, pytest.approx(3.0 * 0.06)]  # 6 characters of 100
    assert [g.error for g in grades[:3]] == [
        "reward model returned nan, not a finite number",
        "reward model returned inf, not a finite number",
        "reward model returned -inf, not a finite number",
    ]
    assert grades[4].score is None and grades[4].error == "reward model returned None, not a number"
    assert all(g.sub_scores["rm_score"] is None for g in grades if g.score is None)
    c = grader.counts
    assert (c.samples, c.scored, c.non_finite, c.abstained, c.failed_calls) == (5, 1, 4, 4, 0)
    assert c.last_error == "reward model returned None, not a number"
