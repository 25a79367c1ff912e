"""Group statistics and the eval headline score, by hand-computed cases."""

from __future__ import annotations

import math

import pytest

from kitae.store.records import eval_score, group_stats, prompt_key, scalar

from tests.store.hand_made import make_sample

STATS_CASES = [
    # rewards, finish reasons -> n_samples, n_scored, n_truncated, mean, std
    ([1.0, 0.0, 1.0, 0.0], "ssss", (4, 4, 0, 0.5, 0.5)),  # half right: mean .5, population std .5
    ([1.0, 0.0, None, 1.0], "ssss", (4, 3, 0, 2 / 3, math.sqrt(2 / 9))),  # the abstention is left out
    ([0.1, 0.1, 0.1], "sls", (3, 3, 1, 0.1, 0.0)),  # equal rewards: std exactly 0 despite rounding
    ([None, None], "ll", (2, 0, 2, None, None)),  # every grader abstained: no statistics
    ([0.25], "s", (1, 1, 0, 0.25, 0.0)),  # one sample is a zero-variance group
    ([], "", (0, 0, 0, None, None)),  # empty group
]


@pytest.mark.parametrize("rewards, reasons, expected", STATS_CASES)
def test_group_stats(rewards, reasons, expected):
    finish = {"s": "stop", "l": "length"}
    stats = group_stats([make_sample(r, finish[c]) for r, c in zip(rewards, reasons)])
    n_samples, n_scored, n_truncated, mean, std = expected
    assert (stats.n_samples, stats.n_scored, stats.n_truncated) == (n_samples, n_scored, n_truncated)
    assert stats.reward_mean == (None if mean is None else pytest.approx(mean))
    if std == 0.0:
        assert stats.reward_std == 0.0  # exact, the zero_variance filter relies on it
    else:
        assert stats.reward_std == (None if std is None else pytest.approx(std))


EVAL_CASES = [
    ({"accuracy": 0.4, "score": 0.7, "reward": 0.1}, 0.7),  # "score" wins
    ({"accuracy": 0.4, "reward": 0.1}, 0.1),  # then "reward"
    ({"accuracy": 0.4, "len_mean": 300.0}, 0.4),  # then the first metric logged
    ({"score": None, "accuracy": 0.4}, None),  # a None score stays None
    ({}, None),  # nothing logged
]


@pytest.mark.parametrize("metrics, expected", EVAL_CASES)
def test_eval_score(metrics, expected):
    assert eval_score(metrics) == expected


@pytest.mark.parametrize(
    "value, expected",
    [(None, None), (1, 1.0), (0.5, 0.5), (float("nan"), None), (float("inf"), float("inf"))],
)
def test_scalar(value, expected):
    assert scalar(value) == expected


def test_prompt_key_is_stable_and_distinguishes_prompts():
    assert prompt_key("2+2?") == prompt_key("2+2?")
    assert prompt_key("2+2?") != prompt_key("2+3?")
    assert len(prompt_key("x" * 10_000)) == 16
