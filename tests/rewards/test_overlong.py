"""Seed 000's overlong penalty and DAPO's soft overlong punishment (arXiv 2503.14476 Eq. 13)."""

import pytest

from kitae.rewards.overlong import (
    OverlongConfig,
    SoftOverlongConfig,
    Zone,
    near_limit,
    overlong_penalty,
    soft_overlong_punishment,
)


@pytest.mark.parametrize(
    "tokens,finish,cfg,score",
    [
        (50, "stop", OverlongConfig(), 0.0),
        (85, "stop", OverlongConfig(), 0.0),  # the soft zone starts after 85% of 100
        (90, "stop", OverlongConfig(), -0.8 / 9),  # progress 5/15 = 1/3
        (99, "stop", OverlongConfig(), -0.8 * (14 / 15) ** 2),
        (100, "stop", OverlongConfig(), -0.8),  # ended properly at exactly the limit: not cut
        (100, "length", OverlongConfig(), -1.5),  # cut at the limit
        (100, None, OverlongConfig(), -1.5),  # no finish reason: reaching the limit means cut
        (60, "length", OverlongConfig(), -1.5),  # the engine says cut: trust it
        (75, "stop", OverlongConfig(soft_start=0.5, coef=1.0, power=1.0), -0.5),  # progress 25/50
        (100, "length", OverlongConfig(hard_penalty=-3.0), -3.0),
    ],
)
def test_overlong_penalty(tokens, finish, cfg, score):
    assert overlong_penalty(tokens, 100, finish, cfg).score == pytest.approx(score)


@pytest.mark.parametrize(
    "tokens,cfg,score",
    [
        (80, SoftOverlongConfig(), 0.0),  # L_max - L_cache = 100 - 20
        (90, SoftOverlongConfig(), -0.5),  # (80 - 90) / 20
        (100, SoftOverlongConfig(), -1.0),  # a cut completion has |y| = L_max
        (101, SoftOverlongConfig(), -1.0),  # beyond L_max
        (95, SoftOverlongConfig(cache_tokens=10), -0.5),  # (90 - 95) / 10
        (90, SoftOverlongConfig(scale=2.0), -1.0),
        (60, SoftOverlongConfig(cache_fraction=0.5), -0.2),  # (50 - 60) / 50
    ],
)
def test_soft_overlong_punishment(tokens, cfg, score):
    assert soft_overlong_punishment(tokens, 100, cfg).score == pytest.approx(score)


@pytest.mark.parametrize(
    "tokens,cut,zone,expected",
    [
        (80, False, Zone(80, 20), (0.0, 0.0)),  # up to the start: nothing
        (85, False, Zone(80, 20), (-0.25, 0.25)),  # linear through the zone
        (90, False, Zone(80, 20, coef=0.8, power=2.0), (-0.8 * 0.25, 0.5)),  # squared, scaled
        (130, False, Zone(80, 20), (-1.0, 1.0)),  # past the limit without being cut: the zone's end
        (10, True, Zone(80, 20, hard=-1.5), (-1.5, 1.0)),  # cut: the hard value, whatever the length
    ],
)
def test_near_limit_the_shape_both_penalties_share(tokens, cut, zone, expected):
    assert near_limit(tokens, 100, cut, zone) == pytest.approx(expected)
