"""What graders see of an episode (kitae.scoring.sample_and_grade.sample_dict) and the shaping rewards over it
(kitae.graders.tool_use): tool_format, tool_cost, environment_reward."""

from __future__ import annotations

import pytest

from kitae.graders import build_grader, grader_from_callable
from kitae.rollout.base import Completion
from kitae.scoring.sample_and_grade import sample_dict
from tests.agents._core_fixtures import an_episode, call

ITEM = {"messages": [{"role": "user", "content": "6*7?"}], "reference_answer": "42"}


def test_a_one_turn_sample_dict_is_unchanged():
    c = Completion("42<|im_end|>", [1, 2], [5, 6, 7], [-0.1] * 3, "stop")
    assert sample_dict(c, 16) == {"output_text": "42<|im_end|>", "finish_reason": "stop", "completion_tokens": 3,
                                  "max_completion_length": 16, "completion_ids": [5, 6, 7]}


def test_an_episode_shows_its_turns_calls_and_end_and_counts_its_sampled_tokens():
    c = an_episode([[call(), call(error="timeout after 10 s", kind="timeout")]], malformed=[1], end="max_turns",
                   environment_reward=0.5)
    s = sample_dict(c, 64)
    assert s["output_text"] == "42<|im_end|>"  # the final answer: every existing grader scores it
    assert s["completion_tokens"] == 6 == c.sampled_tokens < len(s["completion_ids"]) == 10  # 4 tool tokens
    assert s["turns"] == 2 and s["episode_end"] == "max_turns" and s["environment_reward"] == 0.5
    assert s["malformed_calls"] == 1
    assert s["tool_calls"] == [
        {"name": "calculator", "arguments": {"expression": "6*7"}, "result": "42", "error": None,
         "error_kind": None, "seconds": 0.01, "turn": 0},
        {"name": "calculator", "arguments": {"expression": "6*7"}, "result": None, "error": "timeout after 10 s",
         "error_kind": "timeout", "seconds": 0.01, "turn": 0}]
    assert [m["role"] for m in s["messages"]] == ["assistant", "tool", "tool", "assistant"]
    s["messages"][0]["content"] = "changed"  # a grader that writes into its sample changes no episode
    assert c.episode.messages[0]["content"] != "changed"


# each case: the episode's calls per turn, malformed calls per turn, spec -> score (None: abstains)
@pytest.mark.parametrize("turn_calls, malformed, spec, score", [
    ([[call()], [call()]], [0, 0], {"type": "tool_format"}, 1.0),  # every call well-formed
    ([[call()], []], [0, 1], {"type": "tool_format"}, 0.5),  # one call, one that could not be read
    ([[call(name="search", error="unknown tool 'search'", kind="unknown_tool")]], [0], {"type": "tool_format"}, 0.0),
    ([[call(error="ValueError: bad")]], [0], {"type": "tool_format"}, 1.0),  # a tool that failed: the call itself
    # was well-formed
    ([[call(error="unknown tool 'x' in the backend")]], [0], {"type": "tool_format"}, 1.0),  # the tool's own
    # failure, whatever its text says: the kind counts, not the words
    ([], [], {"type": "tool_format"}, None),  # no call: abstains ...
    ([], [], {"type": "tool_format", "no_calls": 0.0}, 0.0),  # ... or scores what the spec says
    ([[call(), call()], [call()]], [0, 0], {"type": "tool_cost"}, -0.15),  # -0.05 per call, 3 calls
    ([[call()]], [1], {"type": "tool_cost", "per_call": -0.1, "per_turn": -0.01}, -0.22),  # 2 calls, 2 turns
    ([], [], {"type": "tool_cost"}, 0.0),  # answered at once: no cost
])
def test_shaping_rewards(turn_calls, malformed, spec, score):
    grade = build_grader(spec).grade_group(ITEM, [sample_dict(an_episode(turn_calls, malformed=malformed), 64)])[0]
    assert grade.score == (None if score is None else pytest.approx(score))
    assert grade.error is None


@pytest.mark.parametrize("reward, score", [(0.75, 0.75), (None, None), (float("nan"), None)])
def test_environment_reward_is_the_environments_get_reward(reward, score):
    grade = build_grader({"type": "environment_reward"}).grade_group(
        ITEM, [sample_dict(an_episode([[call()]], environment_reward=reward), 64)])[0]
    assert grade.score == score
    assert (grade.error is not None) == (reward is not None and score is None)  # NaN is an error, None is not


@pytest.mark.parametrize("kind", ["tool_format", "tool_cost", "environment_reward"])
def test_a_one_turn_sample_has_no_tool_use_to_grade(kind):
    grade = build_grader({"type": kind}).grade_group(ITEM, [{"output_text": "42", "completion_tokens": 2}])[0]
    assert grade.score is None and grade.error is None and "not an agent episode" in grade.reason


def test_a_trl_reward_function_reads_the_episode_as_its_messages():
    seen = {}

    def uses_tool(prompts, completions, completion_ids, **kwargs):
        seen.update(completions=completions, ids=completion_ids)
        return [float(any(m["role"] == "tool" for m in c)) for c in completions]

    samples = [sample_dict(an_episode([[call()]]), 64), sample_dict(an_episode([]), 64)]
    grades = grader_from_callable(uses_tool).grade_group(ITEM, samples)
    assert [g.score for g in grades] == [1.0, 0.0]
    assert seen["completions"][0][-1] == {"role": "assistant", "content": "42"}  # the final answer, last
    assert len(seen["ids"][0]) == 10  # every token after the prompt, tool results included (as TRL's)


def test_the_python_grader_reads_the_transcript():
    grader = build_grader({"type": "python", "source": (
        "def grade(sample, item):\n"
        "    used = [c for c in sample['tool_calls'] if c['error'] is None]\n"
        "    said = [m['content'] for m in sample['messages'] if m['role'] == 'tool']\n"
        "    return float(bool(used) and item['reference_answer'] in said and sample['turns'] == 2)\n")})
    try:
        grades = grader.grade_group(ITEM, [sample_dict(an_episode([[call()]]), 64),
                                           sample_dict(an_episode([[call(result="41")]]), 64)])
    finally:
        grader.close()
    assert [g.score for g in grades] == [1.0, 0.0], [g.error for g in grades]
