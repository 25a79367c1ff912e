"""LTTB downsampling, on series small enough to check by hand (area = twice the triangle's area)."""

from __future__ import annotations

import pytest

from kitae.web.downsample import downsample, lttb

CASES = [
    # one bucket between the ends: (3, 5) makes the largest triangle with (0, 0) and (4, 0)
    ([(0, 0.0), (1, 1.0), (2, 0.0), (3, 5.0), (4, 0.0)], 3, [(0, 0.0), (3, 5.0), (4, 0.0)]),
    # two buckets [1, 2] and [3, 4]. Bucket 1 looks from (0, 0) to bucket 2's mean (3.5, 0.5): the spike
    # (2, 9) has area 30.5, (1, 0) 0.5. Bucket 2 looks from (2, 9) to the last point (5, 0): (3, 0) has area
    # 18, (4, 1) only 6
    ([(0, 0.0), (1, 0.0), (2, 9.0), (3, 0.0), (4, 1.0), (5, 0.0)], 4, [(0, 0.0), (2, 9.0), (3, 0.0), (5, 0.0)]),
    # a straight line: every triangle is flat, so each bucket keeps its first point
    ([(i, float(i)) for i in range(7)], 4, [(0, 0.0), (1, 1.0), (3, 3.0), (6, 6.0)]),
]


@pytest.mark.parametrize("points, n, expected", CASES)
def test_lttb_keeps_the_largest_triangles(points, n, expected):
    assert lttb(points, n) == expected


@pytest.mark.parametrize("points, n, expected", [
    ([(1, 0.5), (2, None), (3, 0.7)], 3, [(1, 0.5), (2, None), (3, 0.7)]),  # short: kept whole, gap included
    ([(1, 0.5), (2, None), (3, 0.7), (4, 0.1)], 3, [(1, 0.5), (3, 0.7), (4, 0.1)]),  # long: gaps dropped first
    ([], 3, []),
])
def test_downsample_keeps_short_series_and_drops_gaps_of_long_ones(points, n, expected):
    assert downsample(points, n) == expected


def test_a_long_series_keeps_its_ends_and_a_lone_spike():
    points = [(s, 0.0) for s in range(1, 10_001)]
    points[6_543] = (6_544, 50.0)  # one KL spike in 10,000 steps
    kept = downsample(points, 500)
    assert len(kept) == 500
    assert kept[0] == (1, 0.0) and kept[-1] == (10_000, 0.0)
    assert (6_544, 50.0) in kept
    assert [s for s, _ in kept] == sorted(s for s, _ in kept)


def test_fewer_than_three_points_is_refused():
    with pytest.raises(ValueError, match="at least 3"):
        downsample([(1, 1.0)] * 10, 2)
