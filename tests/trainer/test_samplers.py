"""Prompt samplers: probabilities against hand-computed values, pools by step, state across a resume."""

from __future__ import annotations

import copy
from collections import Counter

import pytest

from kitae.errors import ConfigError
from kitae.trainer.samplers import SAMPLERS, CurriculumSampler, PrioritizedSampler, SuccessRates

ROWS = [{"difficulty": d} for d in ("easy", "hard", "medium", "hard")]


@pytest.mark.parametrize(
    "floor, updates, expected",
    [
        (0.05, [], [0.25] * 4),  # nothing graded: every s_i = 0, weight 1
        (0.05, [([0, 1, 2], [0.0, 0.5, 1.0])], [1 / 2.55, 0.5 / 2.55, 0.05 / 2.55, 1 / 2.55]),
        (0.2, [([0, 1, 2], [0.0, 0.5, 1.0])], [1 / 2.7, 0.5 / 2.7, 0.2 / 2.7, 1 / 2.7]),  # floor 0.2 for s_2 = 1
        (0.05, [([0], [1.0]), ([0], [0.5])], [0.25 / 3.25, 1 / 3.25, 1 / 3.25, 1 / 3.25]),  # s_0 = mean 0.75
        (0.05, [([0, 1], [None, 0.25])], [1 / 3.75, 0.75 / 3.75, 1 / 3.75, 1 / 3.75]),  # None: not graded
        (0.05, [([3, 3, 3], [1.0, 1.0, 0.0])], [x / (3 + 1 / 3) for x in (1, 1, 1, 1 / 3)]),  # s_3 = 2/3
    ],
)
def test_prioritized_probabilities(floor, updates, expected):
    s = PrioritizedSampler(4, floor=floor)
    for idx, rates in updates:
        s.update(idx, rates)
    assert s.probabilities() == pytest.approx(expected)


@pytest.mark.parametrize(
    "ema, rates, expected",
    [
        (0.0, [1.0, 0.0, 0.5], 0.5),  # mean of all attempts
        (0.5, [1.0, 0.0], 0.5),  # 0.5 * 1 + 0.5 * 0
        (0.5, [1.0, 0.0, 0.0], 0.25),
        (0.1, [0.0, 1.0], 0.1),
    ],
)
def test_success_rate_memory(ema, rates, expected):
    r = SuccessRates(1, ema)
    for x in rates:
        r.update([0], [x])
    assert r.rate[0] == pytest.approx(expected) and r.count[0] == len(rates)


def test_prioritized_first_draw_frequencies_follow_the_probabilities():
    s = PrioritizedSampler(4, seed=3, floor=0.05)
    s.update([0, 1, 2], [0.0, 0.5, 1.0])
    counts = Counter(s.sample(1)[0] for _ in range(20_000))
    freq = [counts[i] / 20_000 for i in range(4)]
    assert freq == pytest.approx([1 / 2.55, 0.5 / 2.55, 0.05 / 2.55, 1 / 2.55], abs=0.012)


@pytest.mark.parametrize("name", ["uniform", "prioritized", "curriculum"])
def test_no_prompt_twice_in_one_step(name):
    s = SAMPLERS.get(name)(6, seed=1, rows=[{"difficulty": "easy"}] * 6)
    for step in range(1, 5):
        assert sorted(s.sample(6, step)) == list(range(6))


@pytest.mark.parametrize(
    "kwargs, updates, step, expected",
    [
        ({"warmup_steps": 2}, [], 2, [0.25] * 4),  # warm-up: the whole set
        ({"warmup_steps": 2}, [], 3, [0, 0.5, 0, 0.5]),  # then the hard label only
        ({"warmup_steps": 2, "hard_levels": ["medium", "hard"]}, [], 3, [0, 1 / 3, 1 / 3, 1 / 3]),
        ({"warmup_steps": 0, "difficulty_key": None}, [([0, 1, 2], [1.0, 0.25, 0.5])], 1, [0, 0.5, 0, 0.5]),
        ({"warmup_steps": 0, "difficulty_key": None}, [([0, 1, 2, 3], [1.0] * 4)], 1, [0.25] * 4),  # all solved
        ({"schedule": "easy_to_hard", "ramp_steps": 6}, [], 1, [1, 0, 0, 0]),
        ({"schedule": "easy_to_hard", "ramp_steps": 6}, [], 2, [1, 0, 0, 0]),
        ({"schedule": "easy_to_hard", "ramp_steps": 6}, [], 3, [0.5, 0, 0.5, 0]),  # medium joins at 1 + 6/3
        ({"schedule": "easy_to_hard", "ramp_steps": 6}, [], 5, [0.25] * 4),  # hard joins at 1 + 12/3
        ({"schedule": "easy_to_hard", "ramp_steps": 6}, [], 100, [0.25] * 4),
    ],
)
def test_curriculum_pool_by_step(kwargs, updates, step, expected):
    s = CurriculumSampler(4, rows=ROWS, **kwargs)
    for idx, rates in updates:
        s.update(idx, rates)
    assert s.probabilities(step) == pytest.approx(expected)
    pool = {i for i, p in enumerate(expected) if p}
    assert set(s.sample(len(pool), step)) == pool


def test_curriculum_pool_smaller_than_the_batch_is_used_whole():
    s = CurriculumSampler(4, rows=ROWS, warmup_steps=0)
    got = s.sample(3, step=1)
    assert {1, 3} <= set(got) and len(set(got)) == 3


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"levels": ["easy", "hard"]}, "data.sampler.levels: row 3 has difficulty='medium'"),
        ({"schedule": "easy_to_hard", "difficulty_key": None}, "data.sampler.difficulty_key: easy_to_hard needs"),
        ({"schedule": "hardest"}, "data.sampler.schedule: got 'hardest'"),
    ],
)
def test_curriculum_errors_name_the_key(kwargs, message):
    with pytest.raises(ConfigError) as err:
        CurriculumSampler(4, rows=ROWS, **kwargs)
    assert message in str(err.value)


@pytest.mark.parametrize("name", ["uniform", "prioritized", "curriculum"])
def test_state_survives_resume(name):
    """Five steps straight equal two steps, a save and load into a fresh sampler, and three more."""
    make = lambda: SAMPLERS.get(name)(10, seed=7, rows=[{"difficulty": d} for d in ["easy", "hard"] * 5],
                                      warmup_steps=2, difficulty_key=None, floor=0.1)

    def step(s, t):
        idx = s.sample(3, t)
        s.update(idx, [((i * 7 + t) % 5) / 4 for i in idx])
        return idx

    straight = make()
    expected = [step(straight, t) for t in range(1, 6)]
    first = make()
    got = [step(first, t) for t in range(1, 3)]
    state = copy.deepcopy(first.state_dict())
    resumed = make()
    resumed.load_state_dict(state)
    got += [step(resumed, t) for t in range(3, 6)]
    assert got == expected
    assert resumed.probabilities(6) == pytest.approx(straight.probabilities(6))
    if name != "uniform":
        assert resumed.state_dict()["rates"] == straight.state_dict()["rates"]
