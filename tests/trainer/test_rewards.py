"""A run's reward from its components, and the step's reward metrics: only finite numbers ever count."""

from __future__ import annotations

import math
import pytest
import torch

from kitae.graders.base import Grade
from kitae.rollout.base import Completion
from kitae.scoring.components import REWARD_LIMIT, GroupScores, RewardComponent, combine, within_reward_limit
from kitae.trainer.metrics import reward_metrics
from kitae.trainer.step_scores import reward_tensor

NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize(
    "a, b, total",
    [
        (1.0, 0.5, 2.0),  # 1·1.0 + 2·0.5
        (None, 0.5, 1.0),  # an abstention drops out
        (None, None, None),  # every component abstained: no reward
        (NAN, 0.5, 1.0),  # a NaN that got past the graders' check counts as an abstention ...
        (INF, 0.5, 1.0),  # ... and so does infinity
        (1e308, 1e308, None),  # finite scores whose weighted sum overflows: no reward, not infinity
    ],
)
def test_combine(a, b, total):
    got = combine({"a": [Grade(a)], "b": [Grade(b)]}, {"a": 1.0, "b": 2.0})[0]
    assert got == (None if total is None else pytest.approx(total))


@pytest.mark.parametrize(
    "a, logged, total",
    [
        (0.5, 0.9, 0.5),  # the weight-0 component is logged, not added
        (None, 0.9, None),  # it cannot turn an abstention into a reward of 0 (as if the sample were wrong)
    ],
)
def test_a_weight_0_component_is_no_reward(a, logged, total):
    assert combine({"a": [Grade(a)], "log": [Grade(logged)]}, {"a": 1.0, "log": 0.0}) == [total]


@pytest.mark.parametrize(
    "score, weight, kept",
    [
        (1e308, 1.0, False),  # once an OverflowError in the step's mean (statistics.fmean): now a grader error
        (-1e308, 1.0, False),
        (1e15, 1.0, True),  # at the limit: kept
        (2e15, 1.0, False),  # past it
        (1e14, 100.0, False),  # the weighted score is past it
        (1e308, 0.0, False),  # a weight-0 component only logs, but its mean is logged too
        (0.5, 1.0, True),
        (None, 1.0, True),  # an abstention stays one, without an error
    ],
)
def test_a_score_past_the_reward_limit_is_a_grader_error(score, weight, kept):
    grade = within_reward_limit([Grade(score)], weight)[0]
    if kept:
        assert (grade.score, grade.error) == (score, None)
    else:
        assert grade.score is None
        assert grade.error.startswith(f"score {score:g} is past the reward limit of ±{REWARD_LIMIT:g}")


def _completion(tokens: int) -> Completion:
    return Completion(text="x", prompt_ids=[1], completion_ids=[2] * tokens, logprobs=[0.0] * tokens,
                      finish_reason="stop")


def test_reward_metrics_and_tensor_skip_values_that_are_not_finite():
    """Infinity once crashed the step (statistics.pstdev), and so every resume; now it only counts as invalid."""
    grades = {"r": [Grade(INF), Grade(1.0), Grade(0.0), Grade(NAN)]}
    scores = [GroupScores(grades, [INF, 1.0, 0.0, NAN])]
    m = reward_metrics([RewardComponent("r", 1.0, None)], scores, [_completion(3)] * 4)
    assert (m["reward"], m["reward_std"], m["reward/r"]) == (0.5, 0.5, 0.5)
    assert (m["invalid_rate"], m["grader/r/abstain_rate"]) == (0.5, 0.5)
    assert all(math.isfinite(v) for v in m.values())
    rewards, valid = reward_tensor(scores)
    assert valid.tolist() == [[False, True, True, False]]
    assert torch.equal(rewards, torch.tensor([[0.0, 1.0, 0.0, 0.0]]))
