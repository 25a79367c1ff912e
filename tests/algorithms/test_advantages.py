"""Advantage estimators against hand-computed values (std is unbiased: sum of squares / (n - 1))."""

import math

import pytest
import torch

from kitae.algorithms import ADVANTAGES, compute_advantages, dynamic_sampling_keep
from kitae.errors import ConfigError

N = float("nan")
T, F = True, False
S3 = math.sqrt(1 / 3)  # unbiased std of {1, 0, 0, 1} and of {1, 0, 1}

CASES = [
    # name, rewards, valid (None: finite rewards), kwargs, expected
    # grpo [1,0,0,1]: mean 0.5, std sqrt(4*0.25/3) = 0.5774 -> +-0.5/0.5774
    ("grpo", [[1, 0, 0, 1]], None, {"eps": 0}, [[0.5 / S3, -0.5 / S3, -0.5 / S3, 0.5 / S3]]),
    # grpo, third sample invalid (its 9 is ignored): mean 2/3, deviations 1/3, -2/3, 1/3, std sqrt((6/9)/2)
    ("grpo", [[1, 0, 9, 1]], [[T, T, F, T]], {"eps": 0}, [[(1 / 3) / S3, (-2 / 3) / S3, 0, (1 / 3) / S3]]),
    # grpo, NaN marks None when valid is omitted; same numbers as above
    ("grpo", [[1, 0, N, 1]], None, {"eps": 0}, [[(1 / 3) / S3, (-2 / 3) / S3, 0, (1 / 3) / S3]]),
    # grpo, all equal: deviations 0, std 0 -> 0 / (0 + 1e-4) = 0, no NaN
    ("grpo", [[2, 2, 2, 2]], None, {}, [[0, 0, 0, 0]]),
    # grpo, a single valid sample: no baseline -> 0 (not NaN from the n-1 = 0 std)
    ("grpo", [[5, N, N]], None, {}, [[0, 0, 0]]),
    # grpo, nothing valid -> 0
    ("grpo", [[N, N]], None, {}, [[0, 0]]),
    # grpo default eps 1e-4 (TRL): [1,0] mean 0.5, std sqrt(0.5) = 0.707107 -> 0.5/0.707207 = 0.707007
    ("grpo", [[1, 0]], None, {}, [[0.5 / (math.sqrt(0.5) + 1e-4), -0.5 / (math.sqrt(0.5) + 1e-4)]]),
    # grpo, two groups are normalized separately: [1,0] -> +-0.7071, [4,2] -> mean 3, std 1.4142 -> +-0.7071
    ("grpo", [[1, 0], [4, 2]], None, {"eps": 0}, [[0.70711, -0.70711], [0.70711, -0.70711]]),
    # dr_grpo: r - mean
    ("dr_grpo", [[1, 0, 0, 1]], None, {}, [[0.5, -0.5, -0.5, 0.5]]),
    # dr_grpo with an invalid sample: mean of {3, 1} = 2
    ("dr_grpo", [[3, 1, N]], None, {}, [[1, -1, 0]]),
    # dr_grpo, all equal and single valid -> 0
    ("dr_grpo", [[2, 2], [4, N]], None, {}, [[0, 0], [0, 0]]),
    # rloo [1,0,0]: 1 - mean(0,0) = 1, 0 - mean(1,0) = -0.5
    ("rloo", [[1, 0, 0]], None, {}, [[1, -0.5, -0.5]]),
    # rloo [1,0,0,1]: 1 - 1/3 = 2/3, 0 - 2/3 = -2/3
    ("rloo", [[1, 0, 0, 1]], None, {}, [[2 / 3, -2 / 3, -2 / 3, 2 / 3]]),
    # rloo, invalid third sample: n = 2, 3 - 1 = 2, 1 - 3 = -2
    ("rloo", [[3, 1, N]], None, {}, [[2, -2, 0]]),
    # rloo, single valid (no "others") and all equal -> 0
    ("rloo", [[4, N], [7, 7]], None, {}, [[0, 0], [0, 0]]),
    # batch_std [[1,0],[1,1]]: centered [[.5,-.5],[0,0]], std of {1,0,1,1}: mean .75, ss .75, /3 -> 0.5
    ("batch_std", [[1, 0], [1, 1]], None, {"eps": 0}, [[1, -1], [0, 0]]),
    # batch_std with None: valid {1,0,3,3,3}: mean 2, ss 8, /4 -> std sqrt(2); centered [[.5,-.5,0],[0,0,0]]
    ("batch_std", [[1, 0, N], [3, 3, 3]], None, {"eps": 0},
     [[0.5 / math.sqrt(2), -0.5 / math.sqrt(2), 0], [0, 0, 0]]),
    # batch_std, single-valid row: {5,1,0} mean 2, ss 14, /2 -> std sqrt(7); the lone 5 gets 0
    ("batch_std", [[5, N], [1, 0]], None, {"eps": 0}, [[0, 0], [0.5 / math.sqrt(7), -0.5 / math.sqrt(7)]]),
    # reinforce_pp [[1,0],[3,1]]: a = [.5,-.5,1,-1], batch mean 0, ss 2.5, /3 -> std 0.91287
    ("reinforce_pp", [[1, 0], [3, 1]], None, {"eps": 0},
     [[0.5 / math.sqrt(2.5 / 3), -0.5 / math.sqrt(2.5 / 3)], [1 / math.sqrt(2.5 / 3), -1 / math.sqrt(2.5 / 3)]]),
    # reinforce_pp, all-equal group stays 0: a = [.5,-.5,0,0], ss .5, /3 -> std 0.40825
    ("reinforce_pp", [[1, 0], [2, 2]], None, {"eps": 0},
     [[0.5 / math.sqrt(0.5 / 3), -0.5 / math.sqrt(0.5 / 3)], [0, 0]]),
    # reinforce_pp, None and single valid: valid a = {0 (lone 4), .5, -.5}, ss .5, /2 -> std 0.5
    ("reinforce_pp", [[4, N], [1, 0]], None, {"eps": 0}, [[0, 0], [1, -1]]),
    # reinforce_pp, everything equal: a = 0, std 0 -> 0 / 1e-4 = 0
    ("reinforce_pp", [[1, 1], [3, 3]], None, {}, [[0, 0], [0, 0]]),
]


@pytest.mark.parametrize("name, rewards, valid, kw, expected", CASES)
def test_estimator_hand_values(name, rewards, valid, kw, expected):
    valid_t = None if valid is None else torch.tensor(valid)
    adv = compute_advantages(name, torch.tensor(rewards, dtype=torch.float32), valid_t, **kw)
    assert not torch.isnan(adv).any()
    torch.testing.assert_close(adv, torch.tensor(expected, dtype=torch.float32), atol=1e-5, rtol=1e-5)


def test_every_registered_estimator_has_a_case():
    assert set(ADVANTAGES.names()) == {c[0] for c in CASES}


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo", "batch_std", "reinforce_pp"])
def test_invalid_samples_do_not_change_valid_ones(name):
    # the same valid rewards with garbage (1e6 or NaN) in the invalid slot give the same advantages
    valid = torch.tensor([[T, T, F, T], [T, F, T, T]])
    a = compute_advantages(name, torch.tensor([[1.0, 0.0, 1e6, 2.0], [3.0, -1e6, 1.0, 0.0]]), valid)
    b = compute_advantages(name, torch.tensor([[1.0, 0.0, N, 2.0], [3.0, N, 1.0, 0.0]]), valid)
    torch.testing.assert_close(a, b)
    assert a[0, 2] == 0 and a[1, 1] == 0


def test_unknown_estimator_suggests_the_closest_name():
    message = r"algorithm\.advantage: unknown advantage estimator 'gpro'; did you mean 'grpo'"
    with pytest.raises(ConfigError, match=message):
        compute_advantages("gpro", torch.zeros(1, 2))


@pytest.mark.parametrize("rewards, valid, match", [
    (torch.zeros(4), None, r"\[num_groups, G\]"),  # 1-D rewards
    (torch.zeros(2, 3), torch.ones(3, 2, dtype=torch.bool), "must match"),  # valid of another shape
])
def test_shape_errors(rewards, valid, match):
    with pytest.raises(ValueError, match=match):
        compute_advantages("grpo", rewards, valid)


KEEP_CASES = [
    # rewards, valid, atol, expected keep
    ([[1, 0, 1]], None, 0.0, [True]),  # mixed rewards
    ([[1, 1, 1]], None, 0.0, [False]),  # all correct
    ([[0, 0, 0]], None, 0.0, [False]),  # all wrong
    ([[2, N, 2]], None, 0.0, [False]),  # the valid ones are equal
    ([[2, N, N]], None, 0.0, [False]),  # one valid sample: nothing to compare
    ([[2, 9, 2]], [[T, F, T]], 0.0, [False]),  # the 9 is invalid
    ([[0.3, 0.3000001, 0.3]], None, 0.0, [True]),  # exact test by default
    ([[0.3, 0.3000001, 0.3]], None, 1e-6, [False]),  # ... tolerant with atol
    ([[1, 0], [1, 1], [0.5, 0.25]], None, 0.0, [True, False, True]),  # several groups
]


@pytest.mark.parametrize("rewards, valid, atol, expected", KEEP_CASES)
def test_dynamic_sampling_keep(rewards, valid, atol, expected):
    valid_t = None if valid is None else torch.tensor(valid)
    keep = dynamic_sampling_keep(torch.tensor(rewards, dtype=torch.float32), valid_t, atol=atol)
    assert keep.dtype == torch.bool
    assert keep.tolist() == expected
