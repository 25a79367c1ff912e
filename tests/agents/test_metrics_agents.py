"""Per-step metrics of agent episodes (kitae.trainer.metrics.agent_metrics): only when the step has episodes."""

from __future__ import annotations

import pytest

from kitae.graders.base import Grade
from kitae.rollout.base import Completion
from kitae.rollout.trajectory import EPISODE_ENDS
from kitae.scoring.components import GroupScores, RewardComponent
from kitae.trainer.metrics import agent_metrics, reward_metrics
from tests.agents._core_fixtures import an_episode, call

# what reward_metrics logged for a one-turn step before agents existed, for one component "r"
ONE_TURN_KEYS = {"reward", "reward_std", "len_mean", "trunc_rate", "repeat_rate", "invalid_rate", "zero_var_frac",
                 "reward/r", "grader/r/abstain_rate", "grader/r/error_rate"}


def step_metrics(completions: list[Completion]) -> dict[str, float]:
    scores = [GroupScores({"r": [Grade(float(i)) for i in range(len(completions))]},
                          [float(i) for i in range(len(completions))])]
    return reward_metrics([RewardComponent("r", 1.0, None)], scores, completions)


def test_a_one_turn_step_logs_what_it_logged_before():
    one_turn = [Completion("a", [1], [2, 3, 4], [0.0] * 3, "stop"), Completion("b", [1], [2], [0.0], "length")]
    m = step_metrics(one_turn)
    assert set(m) == ONE_TURN_KEYS
    assert m["len_mean"] == 2.0


def test_an_agent_step_logs_what_its_episodes_did():
    episodes = [
        an_episode([[call(), call(error="timeout after 10 s", kind="timeout")], [call()]], malformed=[1, 0],
                   end="max_turns"),  # 3 turns, 3 calls (1 timed out), 1 malformed, cut by max_turns
        an_episode([[call(error="ValueError: no")]], template_rewrites=True),  # 2 turns, 1 failed call
        an_episode([]),  # answered at once
        an_episode([[call()]], end="max_turns"),
    ]
    m = step_metrics(episodes)
    assert set(m) - ONE_TURN_KEYS == {*(f"agent/ended/{r}" for r in EPISODE_ENDS), "agent/turns", "agent/tool_calls",
                                      "agent/tool_errors", "agent/tool_timeouts", "agent/malformed_calls",
                                      "agent/trained_token_share", "agent/template_rewrites"}
    assert m["agent/turns"] == pytest.approx((3 + 2 + 1 + 2) / 4)
    assert m["agent/tool_calls"] == pytest.approx((3 + 1 + 0 + 1) / 4)
    assert m["agent/tool_errors"] == pytest.approx(2 / 5)  # of the calls
    assert m["agent/tool_timeouts"] == pytest.approx(1 / 5)
    assert m["agent/malformed_calls"] == pytest.approx(1 / 4)
    assert m["agent/ended/max_turns"] == 0.5 and m["agent/ended/answer"] == 0.5 and m["agent/ended/length"] == 0.0
    assert m["agent/template_rewrites"] == 0.25
    sampled = 3 * (3 + 2 + 1 + 2)  # 3 sampled tokens a turn; 4 put in after every turn but the last
    assert m["agent/trained_token_share"] == pytest.approx(sampled / (sampled + 4 * (2 + 1 + 0 + 1)))
    assert m["len_mean"] == pytest.approx(sampled / 4)  # the length of an episode is what the policy sampled


def test_calls_past_the_episodes_limit_are_no_tool_errors():
    refused = call(error="not run: the episode's limit of 8 tool calls was reached", kind="refused")
    m = agent_metrics([an_episode([[call(), refused]], end="max_tool_calls")])
    assert m["agent/tool_errors"] == 0.0 and m["agent/tool_calls"] == 2.0 and m["agent/ended/max_tool_calls"] == 1.0


def test_a_step_without_tool_calls_has_no_error_rate_to_divide():
    m = agent_metrics([an_episode([]), an_episode([])])
    assert m["agent/tool_calls"] == 0.0 and m["agent/tool_errors"] == 0.0 and m["agent/trained_token_share"] == 1.0
