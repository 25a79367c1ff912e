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
