"""Downsampling long metric series for plots: Largest-Triangle-Three-Buckets (LTTB).

Algorithm: S. Steinarsson, "Downsampling Time Series for Visual Representation" (MSc thesis, University of
Iceland, 2013), section 4.2. The first and last points are kept; the points between are cut into
``max_points - 2`` buckets of equal count, and each bucket keeps the point that makes the largest triangle
with the point kept before it and the mean of the next bucket. Spikes survive (a lone KL spike is the
largest triangle of its bucket), which a plain every-k-th-point decimation would drop.

Departure from the thesis: a value that is None (a metric not logged at a step, or NaN stored as NULL) is
kept as a gap when the series is short enough to plot whole, and left out when the series is downsampled.

    lttb([(0, 0.0), (1, 1.0), (2, 0.0), (3, 5.0), (4, 0.0)], 3)  ->  [(0, 0.0), (3, 5.0), (4, 0.0)]
"""

from __future__ import annotations

from typing import Sequence

Point = tuple[int, float | None]


def downsample(points: Sequence[Point], max_points: int) -> list[Point]:
    """The series itself when it has at most `max_points` points, else its LTTB downsampling."""
    if max_points < 3:
        raise ValueError(f"max_points must be at least 3, got {max_points}")
    if len(points) <= max_points:
        return list(points)
    present = [(x, y) for x, y in points if y is not None]
    return lttb(present, max_points)


def lttb(points: Sequence[tuple[int, float]], max_points: int) -> list[tuple[int, float]]:
    """Keep `max_points` of `points` (sorted by x, no None values), the first and the last among them."""
    n = len(points)
    if n <= max_points:
        return list(points)
    every = (n - 2) / (max_points - 2)  # points per bucket, fractional
    kept = [points[0]]
    a = 0  # index of the point kept in the previous bucket
    for i in range(max_points - 2):
        start, end = int(i * every) + 1, int((i + 1) * every) + 1
        next_start, next_end = end, min(int((i + 2) * every) + 1, n)
        if next_start >= n - 1:
            next_start, next_end = n - 1, n  # the last bucket looks ahead to the last point
        cx, cy = _mean(points[next_start:next_end])
        ax, ay = points[a]
        best, best_area = start, -1.0
        for j in range(start, end):
            bx, by = points[j]
            area = abs((ax - cx) * (by - ay) - (ax - bx) * (cy - ay))  # twice the triangle's area
            if area > best_area:
                best, best_area = j, area
        kept.append(points[best])
        a = best
    kept.append(points[-1])
    return kept


def _mean(points: Sequence[tuple[int, float]]) -> tuple[float, float]:
    return sum(p[0] for p in points) / len(points), sum(p[1] for p in points) / len(points)
