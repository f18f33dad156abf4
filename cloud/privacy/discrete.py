"""Exact integer noise on a grid, and the zCDP arithmetic of the discrete Gaussian.

    from fractions import Fraction
    y = sample_discrete_gaussian(random.Random(1), Fraction(49, 4))   # N_Z(0, 3.5**2)

The mechanisms release ``granularity * (round(value / granularity) + Y)`` with an
integer ``Y`` drawn by rejection from Bernoulli trials whose probabilities are exact
rationals (Canonne, Kamath, Steinke 2020). No floating-point number is ever formed
from the data before the final, data-independent conversion of the released grid
point, so the float lattice attack of Mironov (CCS 2012) has nothing to read: the
release is a function of the exact integer ``round(value / granularity) + Y`` only.
"""
from __future__ import annotations

import math
from fractions import Fraction

from dpsense.protocol.noise import DiscreteLaplace, bernoulli_exp

from .validation import Rng

__all__ = [
    "GRID_BITS",
    "default_granularity",
    "discrete_gaussian_variance_bound",
    "discrete_laplace_variance",
    "grid_sensitivity",
    "rho_for",
    "sample_discrete_gaussian",
    "to_grid",
    "from_grid",
    "zcdp_delta",
]

GRID_BITS = 30
"""Default grid: ``2**(floor(log2(scale)) - GRID_BITS)``, about a billionth of the scale."""


def default_granularity(scale: Fraction, bits: int = GRID_BITS) -> Fraction:
    """Largest power of two not above ``scale * 2**-bits`` (``scale > 0``)."""
    k = scale.numerator.bit_length() - scale.denominator.bit_length()
    if Fraction(2) ** k > scale:
        k -= 1
    return Fraction(2) ** (k - bits)


def grid_sensitivity(sensitivity: Fraction, granularity: Fraction, values_on_grid: bool) -> int:
    """Largest change of the rounded answer, in grid steps, between neighbours.

    Two answers at most ``sensitivity`` apart round to grid points at most
    ``floor(sensitivity / granularity) + 1`` steps apart (the bound is attained:
    0.5 and 1.5 round to 0 and 2 under round-half-even). When every possible answer
    is already on the grid nothing is rounded, and ``ceil(sensitivity / granularity)``
    steps suffice.
    """
    ratio = sensitivity / granularity
    if values_on_grid:
        return max(1, math.ceil(ratio))
    return math.floor(ratio) + 1


def to_grid(value: Fraction, granularity: Fraction, values_on_grid: bool) -> int:
    """Exact nearest grid index (ties to even); with ``values_on_grid``, refuse other values."""
    q = value / granularity
    if values_on_grid and q.denominator != 1:
        raise ValueError("value %s is not a multiple of the granularity %s" % (value, granularity))
    return round(q)


def from_grid(index: int, granularity: Fraction) -> float:
    """The released float: a data-independent rounding of the exact grid point."""
    return float(index * granularity)


def sample_discrete_gaussian(rng: Rng, sigma2: Fraction) -> int:
    """One draw of ``N_Z(0, sigma2)``: ``P(y) ~ exp(-y**2 / (2 sigma2))`` on the integers.

    Parameters
    ----------
    rng : Rng
        Source of ``getrandbits``.
    sigma2 : fractions.Fraction
        Variance parameter, ``> 0``, exact.

    Returns
    -------
    int

    Notes
    -----
    Canonne-Kamath-Steinke Algorithm 3: propose ``Y`` from the discrete Laplace of
    scale ``t = floor(sigma) + 1`` and accept with probability
    ``exp(-(|Y| - sigma2/t)**2 / (2 sigma2))``, written as the exact rational
    ``(|Y| d t - n)**2 / (2 n d t**2)`` for ``sigma2 = n/d``. The expected number of
    proposals is below 2 for every ``sigma2``.

    References
    ----------
    C. Canonne, G. Kamath, T. Steinke, "The Discrete Gaussian for Differential
    Privacy", NeurIPS 2020, Algorithm 3.
    """
    if sigma2 <= 0:
        raise ValueError("sigma2 must be > 0")
    n, d = sigma2.numerator, sigma2.denominator
    t = math.isqrt(n // d) + 1
    lap = DiscreteLaplace(t, 1, rng)
    den = 2 * n * d * t * t
    while True:
        y: int = lap.sample()
        if bernoulli_exp(rng, (abs(y) * d * t - n) ** 2, den):
            return y


def discrete_laplace_variance(scale: Fraction) -> float:
    """Variance ``2q / (1 - q)**2``, ``q = exp(-1/scale)``, of the discrete Laplace."""
    b = float(scale)
    return 2.0 * math.exp(-1.0 / b) / math.expm1(-1.0 / b) ** 2


def discrete_gaussian_variance_bound(sigma2: Fraction) -> float:
    """``sigma2``: an upper bound on the variance of ``N_Z(0, sigma2)`` (CKS 2020, Sect. 2.1).

    The bound is tight to a relative ``4 pi**2 sigma2 exp(-2 pi**2 sigma2)``, below
    ``1e-30`` once ``sigma2 >= 4``.
    """
    return float(sigma2)


def zcdp_delta(rho: float, epsilon: float) -> float:
    """Smallest ``delta`` the CKS conversion gives for ``rho``-zCDP at ``epsilon``.

    Parameters
    ----------
    rho : float
        zCDP parameter, ``>= 0``.
    epsilon : float
        Target epsilon, ``>= 0``.

    Returns
    -------
    float
        ``min(1, inf over a > 1 of exp((a-1)(a rho - eps)) / (a-1) * (1 - 1/a)**a)``.

    Notes
    -----
    Any ``a > 1`` gives a valid upper bound on ``delta``, so an inexact minimiser
    only makes the answer conservative. The exponent is convex in ``a``; the
    minimiser is found by bisection on its derivative
    ``(2a - 1) rho - eps + log(1 - 1/a)``.

    References
    ----------
    C. Canonne, G. Kamath, T. Steinke, "The Discrete Gaussian for Differential
    Privacy", NeurIPS 2020, Sect. 2.3.
    M. Bun, T. Steinke, "Concentrated Differential Privacy", TCC 2016.
    """
    if rho < 0 or epsilon < 0:
        raise ValueError("rho and epsilon must be >= 0")
    if rho == 0:
        return 0.0
    lo, hi = 1.0 + 1e-9, (epsilon + 1.0) / (2.0 * rho) + 2.0
    for _ in range(200):
        a = 0.5 * (lo + hi)
        if (2.0 * a - 1.0) * rho - epsilon + math.log1p(-1.0 / a) < 0.0:
            lo = a
        else:
            hi = a
    a = 0.5 * (lo + hi)
    log_delta = (a - 1.0) * (a * rho - epsilon) + a * math.log1p(-1.0 / a) - math.log(a - 1.0)
    return 1.0 if log_delta >= 0.0 else math.exp(log_delta)


def rho_for(epsilon: float, delta: float, *, margin: float = 1e-9) -> float:
    """Largest ``rho`` whose zCDP guarantee converts to ``(epsilon, delta * (1 - margin))``-DP.

    The margin absorbs the float rounding of :func:`zcdp_delta` (a few ulps).
    """
    if not (epsilon > 0 and 0 < delta < 1):
        raise ValueError("need epsilon > 0 and 0 < delta < 1")
    target = delta * (1.0 - margin)
    lo, hi = 0.0, epsilon + 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if zcdp_delta(mid, epsilon) <= target:
            lo = mid
        else:
            hi = mid
    return lo
