"""KL estimators, KL controllers, KL in the reward, and the masked entropy metric."""

import math

import pytest
import torch

from kitae.algorithms import (
    KL_CONTROLLERS,
    AdaptiveKLController,
    FixedKLController,
    kl_estimate,
    kl_in_reward,
    masked_entropy,
)
from kitae.errors import ConfigError

LN2 = math.log(2)

KL_CASES = [
    # kind, logp, ref_logp, expected (log r = ref_logp - logp)
    ("k1", math.log(0.25), math.log(0.5), -LN2),  # -log r, negative here
    ("k2", math.log(0.25), math.log(0.5), 0.5 * LN2**2),  # 0.2402
    ("k3", math.log(0.25), math.log(0.5), 2 - LN2 - 1),  # r = 2: 0.3069
    ("k1", math.log(0.5), math.log(0.25), LN2),  # log r = -ln 2
    ("k2", math.log(0.5), math.log(0.25), 0.5 * LN2**2),
    ("k3", math.log(0.5), math.log(0.25), 0.5 + LN2 - 1),  # r = 0.5: 0.1931
    ("k3", -1.3, -1.3, 0.0),  # same policy: 0
]


@pytest.mark.parametrize("kind, logp, ref, expected", KL_CASES)
def test_kl_estimators(kind, logp, ref, expected):
    out = kl_estimate(torch.tensor([[logp]]), torch.tensor([[ref]]), kind)
    assert out.shape == (1, 1)
    assert out.item() == pytest.approx(expected, abs=1e-6)


def test_k3_is_never_negative():
    grid = torch.linspace(-8, 8, 161)
    logp, ref = torch.meshgrid(grid, grid, indexing="ij")  # every pair of log-probs
    assert (kl_estimate(logp, ref, "k3") >= 0).all()


def test_clamp_log_ratio():
    # log r = 30 clamped to 20 (verl's bound): k1 = -20
    assert kl_estimate(torch.tensor([[-30.0]]), torch.tensor([[0.0]]), "k1", clamp_log_ratio=20).item() == -20


def test_unknown_estimator():
    with pytest.raises(ConfigError, match=r"algorithm\.kl\.estimator: unknown KL estimator 'k4'"):
        kl_estimate(torch.zeros(1, 1), torch.zeros(1, 1), "k4")


def test_kl_in_reward():
    # [1 - 0.1*0.5, 0 - 0.1*2]
    out = kl_in_reward(torch.tensor([1.0, 0.0]), torch.tensor([0.5, 2.0]), 0.1)
    torch.testing.assert_close(out, torch.tensor([0.95, -0.2]))


ADAPTIVE_STEPS = [
    # observed KL, n_steps, value after the update (init 0.1, target 1, horizon 100)
    (1.5, 10, 0.102),  # e = clip(0.5) = 0.2 -> 0.1 * (1 + 0.2*10/100)
    (0.9, 10, 0.10098),  # e = -0.1 -> 0.102 * 0.99
    (0.0, 50, 0.090882),  # e = clip(-1) = -0.2 -> 0.10098 * 0.9
    (1.1, 100, 0.0999702),  # e = 0.1 -> 0.090882 * 1.1
    (1.0, 100, 0.0999702),  # on target: unchanged
]


def test_adaptive_controller_sequence():
    ctl = AdaptiveKLController(init_kl_coef=0.1, target=1.0, horizon=100)
    for observed, n_steps, expected in ADAPTIVE_STEPS:
        ctl.update(observed, n_steps)
        assert ctl.value == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("make", [
    lambda: AdaptiveKLController(0.1, 1.0, 100),
    lambda: FixedKLController(0.1),
])
def test_state_dict_round_trip(make):
    ctl = make()
    ctl.update(2.0, 10)
    fresh = make()
    fresh.load_state_dict(ctl.state_dict())
    assert fresh.value == ctl.value
    ctl.update(2.0, 10)
    fresh.update(2.0, 10)
    assert fresh.value == ctl.value


def test_fixed_controller_never_moves():
    ctl = FixedKLController(0.05)
    ctl.update(100.0, 1000)
    assert ctl.value == 0.05


@pytest.mark.parametrize("kw, path", [
    ({"target": 0.0, "horizon": 10}, "algorithm.kl.adaptive.target"),
    ({"target": 1.0, "horizon": 0}, "algorithm.kl.adaptive.horizon"),
])
def test_adaptive_controller_errors(kw, path):
    with pytest.raises(ConfigError, match=path.replace(".", r"\.")):
        AdaptiveKLController(0.1, **kw)


def test_controllers_are_registered():
    assert KL_CONTROLLERS.get("adaptive") is AdaptiveKLController
    assert KL_CONTROLLERS.get("fixed") is FixedKLController


ENTROPY_CASES = [
    # logits [1, T, V], mask [1, T], expected mean entropy over counted tokens
    ([[[0.0, 0.0]]], [[1.0]], LN2),  # fair coin
    ([[[0.0, 0.0, 0.0, 0.0]]], [[1.0]], math.log(4)),  # uniform over 4
    ([[[0.0, -float("inf")]]], [[1.0]], 0.0),  # certain (banned token): 0, not NaN
    ([[[0.0, 0.0], [5.0, 5.0], [0.0, -float("inf")]]], [[1.0, 1.0, 0.0]], LN2),  # the masked 0 is left out
    ([[[0.0, 0.0], [0.0, -float("inf")]]], [[1.0, 1.0]], LN2 / 2),  # mean of ln 2 and 0
    ([[[1.0, 2.0]]], [[0.0]], 0.0),  # nothing counted
]


@pytest.mark.parametrize("logits, mask, expected", ENTROPY_CASES)
def test_masked_entropy_hand_values(logits, mask, expected):
    out = masked_entropy(torch.tensor(logits), torch.tensor(mask))
    assert out.item() == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("chunk_size", [1, 4, 1024])
def test_masked_entropy_matches_direct_computation(chunk_size):
    g = torch.Generator().manual_seed(0)
    logits = 3 * torch.randn(3, 5, 7, generator=g)  # [B, T, V]
    mask = (torch.rand(3, 5, generator=g) > 0.3).float()  # [B, T]
    logp = torch.log_softmax(logits, dim=-1)
    direct = -(logp.exp() * logp).sum(-1)  # [B, T]
    expected = (direct * mask).sum() / mask.sum()
    torch.testing.assert_close(masked_entropy(logits, mask, chunk_size=chunk_size), expected)


def test_masked_entropy_of_bf16_logits_is_fp32():
    out = masked_entropy(torch.zeros(1, 2, 4, dtype=torch.bfloat16), torch.ones(1, 2))
    assert out.dtype == torch.float32 and out.item() == pytest.approx(math.log(4), abs=1e-6)
