"""Repeat detection: a looping sample ends early with finish reason "repeat"; other samples are untouched."""

from __future__ import annotations

import pytest

from kitae.rollout.base import SamplingParams
from kitae.rollout.hf import repeat_period
from tests.plugins.long_model import LONG_USER, LOOP_USER


@pytest.mark.parametrize(
    "tokens, max_period, min_count, min_span, expected",
    [
        ([7, 7, 7, 7], 4, 4, 4, 1),  # one token four times
        ([7, 7, 7], 4, 4, 4, None),  # three times is not enough
        ([9, 1, 2, 1, 2, 1, 2], 4, 3, 4, 2),  # (1 2) x3 at the end
        ([1, 2, 1, 2, 1, 2, 9], 4, 3, 4, None),  # the loop must be at the end
        ([1, 2, 3, 1, 2, 3], 2, 2, 6, None),  # period 3 > max_period
        ([1, 2, 3, 1, 2, 3], 3, 2, 6, 3),
        ([1, 2, 1, 2, 1, 2], 4, 2, 8, None),  # min_span 8: needs (1 2) x4
        ([5, 5, 1, 2, 1, 2, 1, 2, 1, 2], 4, 2, 8, 2),
        ([4, 4, 4, 4, 4, 4], 4, 2, 6, 1),  # smallest period wins (2 and 3 also fit)
        ([1, 2, 3, 4, 1, 2, 3, 5], 4, 2, 2, None),  # near-repeat
        ([3, 3], 4, 1, 1, 1),  # min_count below 2 still needs two copies
        ([3], 4, 1, 1, None),
    ],
)
def test_repeat_period(tokens, max_period, min_count, min_span, expected):
    assert repeat_period(tokens, max_period, min_count, min_span) == expected


def test_looping_sample_ends_early_with_finish_reason_repeat(long_engine):
    base = SamplingParams(temperature=0, max_new_tokens=60)
    [[loop_off], [long_off]] = long_engine.generate([LOOP_USER, LONG_USER], 1, base)
    assert (loop_off.num_tokens, loop_off.finish_reason) == (60, "length")
    sp = SamplingParams(temperature=0, max_new_tokens=60, repeat_min_count=4, repeat_max_period=8, repeat_min_span=8)
    [[loop], [long]] = long_engine.generate([LOOP_USER, LONG_USER], 1, sp)
    # "the answer is" is 3 tokens, then " 47" repeats: the 8-token span of " 47" x8 completes at token 11
    assert loop.finish_reason == "repeat" and loop.num_tokens == 11
    assert loop.completion_ids == loop_off.completion_ids[:11]
    assert loop.text.endswith(" 47" * 8) and len(loop.logprobs) == 11
    assert long.completion_ids == long_off.completion_ids and long.finish_reason == "stop"
