"""pass@1 of an evaluation: an abstention counts as a fail, but when nothing was scored pass@1 is None, not 0."""

from __future__ import annotations

import pytest

from kitae.scoring.evaluate import summarize


def result(prompt: int, score: float | None, lang: str = "en", threshold: float = 1.0) -> dict:
    return {"prompt_index": prompt, "score": score, "passed": score is not None and score >= threshold,
            "compliant": True, "completion_tokens": 4, "finish_reason": "stop", "lang": lang}


@pytest.mark.parametrize("scores, pass_at_1, abstain_rate", [
    ([1.0, 0.0, 1.0, 1.0], 0.75, 0.0),
    ([1.0, None, 1.0, None], 0.5, 0.5),  # an abstention counts as a fail (abstain_rate says how many)
    ([None, None, None, None], None, 1.0),  # was 0.0: the grader scored nothing, so there is no pass@1
    ([0.0, 0.0, None, None], 0.0, 0.5),  # scored and all wrong: 0
])
def test_pass_at_1(scores, pass_at_1, abstain_rate):
    m = summarize([result(i // 2, s) for i, s in enumerate(scores)])
    assert (m["pass@1"], m["abstain_rate"]) == (pass_at_1, abstain_rate)


def test_a_slice_the_grader_scored_nothing_of_has_no_pass_at_1():
    m = summarize([result(0, 1.0, "en"), result(1, None, "ja"), result(1, None, "ja")])
    assert (m["pass@1/en"], m["pass@1/ja"], m["pass@1"]) == (1.0, None, 0.5)


def _episode_result(prompt: int, passed: bool, calls: list[str | None], turns: int) -> dict:
    """An evaluated episode: ``calls`` holds each tool call's error (None: it worked)."""
    return {"prompt_index": prompt, "score": float(passed), "passed": passed, "compliant": True,
            "completion_tokens": 10, "finish_reason": "stop", "turns": turns,
            "tool_calls": [{"name": "calculator", "error": e} for e in calls]}


def test_an_evaluation_of_episodes_says_how_often_the_tool_was_called_and_how_that_went():
    results = [_episode_result(0, True, [None], 2), _episode_result(0, False, [], 1),
               _episode_result(1, True, [None, "timeout after 5 s"], 3), _episode_result(1, False, [], 1)]
    m = summarize(results)
    assert m["tool_use"] == 0.5  # episodes that called a tool
    assert m["turns_mean"] == 1.75
    assert m["tool_error_rate"] == pytest.approx(1 / 3)  # of the calls made
    assert m["pass@1/with_tool"] == 1.0 and m["pass@1/without_tool"] == 0.0


def test_an_evaluation_of_single_turn_samples_has_no_episode_metrics():
    m = summarize([{"prompt_index": 0, "score": 1.0, "passed": True, "compliant": True, "completion_tokens": 3,
                    "finish_reason": "stop"}])
    assert not {"tool_use", "turns_mean", "tool_error_rate", "pass@1/with_tool"} & set(m)
