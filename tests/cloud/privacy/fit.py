"""Chi-square goodness of fit of integer samples to an exact pmf, and its power.

The bins are intervals of (nearly) equal probability under the claimed law, cut at
its quantiles, so every bin is well filled and a wrong scale (a smooth departure)
shows up in many bins at once. ``noncentrality`` gives the power of the same test
against a stated alternative, so a test can assert that its sample size would catch
the error it is meant to catch.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from scipy import stats

LEVEL = 1e-4


class Fit(NamedTuple):
    statistic: float
    dof: int
    pvalue: float


def bins_from_cdf(cdf: Callable[[np.ndarray], np.ndarray], lo: int, hi: int, n_bins: int) -> np.ndarray:
    """Inclusive upper edges (integers) cutting ``[lo, hi]`` into ~equal-probability bins."""
    qs = np.arange(1, n_bins) / n_bins
    a, b = np.full(qs.size, lo, dtype=np.int64), np.full(qs.size, hi, dtype=np.int64)
    while np.any(b - a > 1):   # vectorised bisection: smallest y with cdf(y) >= q
        mid = (a + b) // 2
        below = cdf(mid) < qs
        a = np.where(below, mid, a)
        b = np.where(below, b, mid)
    return np.unique(b)


def bin_probabilities(cdf: Callable[[np.ndarray], np.ndarray], upper: np.ndarray) -> np.ndarray:
    c = cdf(upper.astype(np.int64))
    return np.diff(np.concatenate(([0.0], c, [1.0])))


def chi_square(samples: np.ndarray, upper: np.ndarray, prob: np.ndarray) -> Fit:
    """Chi-square of integer ``samples`` against bins ``(upper[i-1], upper[i]]`` with ``prob``."""
    n = samples.size
    observed = np.bincount(np.searchsorted(upper, samples, side="left"), minlength=prob.size)
    expected = n * prob
    stat = float(np.sum((observed - expected) ** 2 / expected))
    dof = prob.size - 1
    return Fit(stat, dof, float(stats.chi2.sf(stat, dof)))


def noncentrality(n: int, prob: np.ndarray, alt: np.ndarray) -> float:
    """Non-centrality of the chi-square statistic when the samples follow ``alt`` instead."""
    return float(n * np.sum((alt - prob) ** 2 / prob))


def miss_probability(n: int, prob: np.ndarray, alt: np.ndarray, level: float = LEVEL) -> float:
    """Probability that the test at ``level`` passes ``n`` samples drawn from ``alt``."""
    dof = prob.size - 1
    return float(stats.ncx2.cdf(stats.chi2.isf(level, dof), dof, noncentrality(n, prob, alt)))


def discrete_gaussian_cdf(sigma2: float, lo: int, hi: int) -> Callable[[np.ndarray], np.ndarray]:
    """Exact cdf of ``N_Z(0, sigma2)`` by direct summation over ``[lo, hi]`` (small sigma only)."""
    ys = np.arange(lo, hi + 1)
    w = np.exp(-(ys.astype(np.float64) ** 2) / (2.0 * sigma2))
    c = np.cumsum(w) / w.sum()

    def cdf(y: np.ndarray) -> np.ndarray:
        return c[np.clip(np.asarray(y) - lo, 0, c.size - 1)]

    return cdf


def normal_grid_cdf(sigma: float) -> Callable[[np.ndarray], np.ndarray]:
    """``P(Y <= y)`` of ``N_Z(0, sigma**2)`` for large sigma, as the continuous cdf at ``y + 1/2``.

    For every interval the discrete mass and this value differ by at most
    ``2 / (sqrt(2 pi) sigma)``, below ``1e-9`` for the ``sigma >= 2**30`` it is used with.
    """
    def cdf(y: np.ndarray) -> np.ndarray:
        return stats.norm.cdf((np.asarray(y, dtype=np.float64) + 0.5) / sigma)

    return cdf
