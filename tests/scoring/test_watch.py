"""What a run watches in its rewards: steps in a row without a finite score (the whole reward, each component),
a component's last errors, and a reward function that gives every sample one score."""

from __future__ import annotations

import pytest

from kitae.errors import ConfigError
from kitae.graders import build_grader, grader_from_callable
from kitae.graders.base import Grade
from kitae.scoring.components import GroupScores, RewardComponent
from kitae.trainer.health import Drought, component_errors, function_scores
from kitae.trainer.config import load_train_config


def test_drought_counts_steps_in_a_row_and_tells_a_component_once():
    d = Drought(["a", "b"])
    steps = [  # (no reward at all, a dry, b dry) -> components dry for the first time
        ((False, True, False), ["a"]),
        ((True, True, True), ["b"]),
        ((False, False, True), []),  # a scored again: its count starts over
        ((False, True, True), []),  # a dry again: already told
    ]
    for (none, a, b), told in steps:
        assert d.update(none, {"a": a, "b": b}) == told
    assert (d.no_reward, d.steps) == (0, {"a": 1, "b": 3})
    assert d.longest() == ("b", 3)
    assert Drought([]).longest() == ("", 0)


def test_component_errors_are_the_last_distinct_ones():
    grades = [Grade.abstain(error="E1"), Grade.abstain(error="E2"), Grade(0.5), Grade.abstain(error="E1"),
              Grade.abstain(reason="skipped"), Grade(None), Grade.abstain(error="E3 " + "x" * 400)]
    got = component_errors("c", [GroupScores({"c": grades})])
    assert got[:2] == ["skipped", "abstained without saying why"] and got[2].startswith("E3 x") and len(got[2]) == 300


def test_function_scores_are_read_for_reward_functions_only():
    fn = RewardComponent("fn", 1.0, grader_from_callable(lambda completions, **kw: [0.0] * len(completions)))
    spec = RewardComponent("spec", 1.0, build_grader({"type": "answer"}))
    scores = [GroupScores({"fn": [Grade(1.0), Grade(None), Grade(1.0)], "spec": [Grade(1.0)] * 3}),
              GroupScores({"fn": [Grade(2.0), Grade(1.0), Grade(3.0)], "spec": [Grade(1.0)] * 3})]
    assert function_scores([fn, spec], scores) == {"fn": ([1.0, 2.0], 5)}  # two distinct values are enough
    assert function_scores([fn], scores[:1]) == {"fn": ([1.0], 2)}  # one value, two samples: all the same


@pytest.mark.parametrize("value, ok", [("stop", True), ("warn", True), ("ignore", False)])
def test_component_without_reward_is_stop_or_warn(value, ok):
    data = {"rewards": [{"grader": {"type": "answer"}}]}
    over = [f"algorithm.component_without_reward={value}"]
    if ok:
        assert load_train_config(data=data, overrides=over).algorithm.component_without_reward == value
    else:
        with pytest.raises(ConfigError, match="algorithm.component_without_reward"):
            load_train_config(data=data, overrides=over)


@pytest.mark.parametrize("module", ["kitae.scoring.components", "kitae.trainer.health", "kitae.graders.adapters"])
def test_docstring_examples(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted > 0


@pytest.mark.parametrize(
    "limit, mode, then",
    [
        (3, "stop", "the run stops if it goes on for 3 steps in a row (algorithm.max_steps_without_reward)"),
        (0, "stop", "the run goes on without it (algorithm.max_steps_without_reward: 0)"),  # never stops
        (3, "warn", "the run goes on without it (algorithm.component_without_reward: warn)"),
    ],
)
def test_the_first_step_warning_says_what_happens_next(limit, mode, then):
    from kitae.trainer.health import component_warning

    assert component_warning("fn", 4, ["E1", "E2"], limit, mode) == (
        f"reward component 'fn' gave no sample a finite score in step 4; {then}. Its last errors: E1 | E2")
