"""Small statistics without numpy/scipy: percentiles, Student-t intervals, paired differences.

Repeats are few (3 on a CPU), so intervals use Student's t with n - 1 degrees of freedom,
not the normal 1.96; with 3 repeats the 95 % half-width is 4.30 standard errors.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

# two-sided 95 % critical values of Student's t, df = 1..30
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t95(df: int) -> float:
    if df < 1:
        return math.inf
    return _T95[df - 1] if df <= len(_T95) else 1.96


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between order statistics (numpy's default); q in [0, 100]."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def mean_ci(values: Sequence[float]) -> tuple[float | None, float | None]:
    """(mean, 95 % half-width); the half-width is None below two values."""
    if not values:
        return None, None
    mu = sum(values) / len(values)
    if len(values) < 2:
        return mu, None
    var = sum((v - mu) ** 2 for v in values) / (len(values) - 1)
    return mu, t95(len(values) - 1) * math.sqrt(var / len(values))


def paired_diff(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float] | None:
    """Mean of a_i - b_i with its 95 % interval (lo, hi); repeats are paired by their seed."""
    pairs = [(x, y) for x, y in zip(a, b, strict=False) if x is not None and y is not None]
    if not pairs:
        return None
    diffs = [x - y for x, y in pairs]
    mu, half = mean_ci(diffs)
    assert mu is not None
    if half is None:
        return mu, -math.inf, math.inf
    return mu, mu - half, mu + half
