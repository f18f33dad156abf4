"""Empirical checks that released noise is what the privacy proof assumes.

Two questions are asked of samples rather than of code:

* Is the sampler's output distributed as the exact discrete Laplace pmf?
  :func:`chi_square_discrete_laplace` is a goodness-of-fit test against the exact
  distribution; it catches a wrong scale, a biased Bernoulli or a broken random
  source, which no unit test on a handful of values can.
* Does the released output obey the epsilon-DP ratio bound for two neighbouring
  inputs? :func:`privacy_ratio_check` tests every output class for a probability
  ratio above ``exp(epsilon)``. Classes seen under one input only are the
  floating-point leaks of Mironov ("On Significance of the Least Significant Bits
  for Differential Privacy", CCS 2012), which :func:`float32_class` exposes for
  float32 boards.

A passing audit is evidence, not proof: it only sees departures large enough for
the sample size. The tests in ``tests/statistical`` state the power they have.
"""

from __future__ import annotations

import math
import struct
from collections import Counter
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
from scipy import stats

__all__ = [
    "Bins",
    "ChiSquare",
    "ClassCount",
    "PrivacyReport",
    "chi_square_discrete_laplace",
    "discrete_laplace_bins",
    "discrete_laplace_cdf",
    "discrete_laplace_interval",
    "discrete_laplace_pmf",
    "discrete_laplace_ppf",
    "discrete_laplace_sf",
    "float32_class",
    "privacy_ratio_check",
]


# --------------------------------------------------------------------------------------
# The exact distribution
#
# With q = exp(-1/b) the pmf is c * q**|y|, c = (1 - q)/(1 + q) = tanh(1/(2b)), and
# every tail is geometric: P(Y <= -m) = P(Y >= m) = q**m / (1 + q) for m >= 1.
# For large b, q is within 1/b of 1, so 1 - q and 1 - q**k are computed with expm1:
# the naive differences would lose about log10(b) digits.
# --------------------------------------------------------------------------------------


def _check_scale(b: float) -> float:
    b = float(b)
    if not (b > 0.0 and math.isfinite(b)):
        raise ValueError(f"scale must be a positive finite number, got {b!r}")
    return b


def discrete_laplace_pmf(y: npt.ArrayLike, b: float) -> np.ndarray:
    """Exact pmf ``P(Y = y) = tanh(1/(2b)) * exp(-|y|/b)`` of the discrete Laplace.

    Parameters
    ----------
    y : array_like of int
        Points of the support (integers).
    b : float
        Scale in quanta, ``b > 0``.

    Returns
    -------
    numpy.ndarray
        float64 probabilities, same shape as ``y``.

    Notes
    -----
    ``tanh`` of a small argument is accurate to the last bit, whereas the textbook
    ``(1 - exp(-1/b)) / (1 + exp(-1/b))`` loses about ``log10(b)`` digits.
    """
    b = _check_scale(b)
    ya = np.abs(np.asarray(y, dtype=np.float64))
    return math.tanh(0.5 / b) * np.exp(-ya / b)


def discrete_laplace_cdf(y: npt.ArrayLike, b: float) -> np.ndarray:
    """Exact cdf ``P(Y <= y)``; non-integer ``y`` is floored.

    Parameters
    ----------
    y : array_like of float
        Points at which to evaluate; ``-inf`` and ``inf`` are allowed.
    b : float
        Scale in quanta, ``b > 0``.

    Returns
    -------
    numpy.ndarray
        float64 values in ``[0, 1]``, same shape as ``y``.

    Notes
    -----
    Left of zero the cdf is the geometric tail ``q**m / (1 + q)`` (no cancellation);
    right of zero it is at least ``1/2``, so ``1 - sf`` is accurate. Use
    :func:`discrete_laplace_sf` for small upper-tail probabilities.
    """
    b = _check_scale(b)
    yf = np.floor(np.asarray(y, dtype=np.float64))
    one_plus_q = 1.0 + math.exp(-1.0 / b)
    with np.errstate(over="ignore", invalid="ignore"):
        left = np.exp(np.minimum(yf, 0.0) / b) / one_plus_q
        right = 1.0 - np.exp(-(np.maximum(yf, 0.0) + 1.0) / b) / one_plus_q
    return np.where(yf < 0, left, right)


def discrete_laplace_sf(y: npt.ArrayLike, b: float) -> np.ndarray:
    """Exact survival function ``P(Y > y)``, accurate in the upper tail.

    Parameters
    ----------
    y : array_like of float
        Points at which to evaluate; non-integer ``y`` is floored.
    b : float
        Scale in quanta, ``b > 0``.

    Returns
    -------
    numpy.ndarray
        float64 values in ``[0, 1]``, same shape as ``y``.
    """
    b = _check_scale(b)
    yf = np.floor(np.asarray(y, dtype=np.float64))
    return discrete_laplace_cdf(-yf - 1.0, b)


def discrete_laplace_interval(lo: npt.ArrayLike, hi: npt.ArrayLike, b: float) -> np.ndarray:
    """Exact ``P(lo <= Y <= hi)`` for integer bounds, without cancellation.

    Parameters
    ----------
    lo, hi : array_like of float
        Inclusive integer bounds, broadcast together; ``lo`` may be ``-inf`` and
        ``hi`` may be ``inf``. Empty intervals (``lo > hi``) have probability 0.
    b : float
        Scale in quanta, ``b > 0``.

    Returns
    -------
    numpy.ndarray
        float64 probabilities.

    Notes
    -----
    The interval is split at zero and each half is a difference of two geometric
    tails, ``q**a * (1 - q**(h - a + 1)) / (1 + q)``, evaluated with ``expm1``. At
    ``b = 1e5`` a one-integer bin has probability ``5e-6``; as a difference of two
    cdf values near ``1/2`` it would keep only 11 of its 16 digits.
    """
    b = _check_scale(b)
    lo_a, hi_a = np.broadcast_arrays(
        np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
    )
    one_plus_q = 1.0 + math.exp(-1.0 / b)

    def upper_part(a: np.ndarray, h: np.ndarray) -> np.ndarray:
        # P(a <= Y <= h) for 0 <= a, valid when a <= h.
        with np.errstate(invalid="ignore", over="ignore"):
            p = np.exp(-a / b) * -np.expm1(-(h - a + 1.0) / b) / one_plus_q
        return np.where(a <= h, p, 0.0)

    pos = upper_part(np.maximum(lo_a, 0.0), hi_a)
    neg = upper_part(-np.minimum(hi_a, -1.0), -lo_a)  # mirror of [lo, min(hi, -1)]
    return np.where(lo_a <= hi_a, pos + neg, 0.0)


def discrete_laplace_ppf(p: npt.ArrayLike, b: float) -> np.ndarray:
    """Quantile function: the smallest integer ``y`` with ``cdf(y) >= p``.

    Parameters
    ----------
    p : array_like of float
        Probabilities in the open interval ``(0, 1)``.
    b : float
        Scale in quanta, ``b > 0``.

    Returns
    -------
    numpy.ndarray
        int64 quantiles, same shape as ``p``.

    Notes
    -----
    The geometric tails invert in closed form; one step of correction against the
    exact cdf absorbs rounding in the logarithms.
    """
    b = _check_scale(b)
    pa = np.asarray(p, dtype=np.float64)
    if np.any((pa <= 0.0) | (pa >= 1.0)):
        raise ValueError("probabilities must be in (0, 1)")
    q = math.exp(-1.0 / b)
    log_one_plus_q = math.log1p(q)
    # y = -m <= -1:  q**m / (1 + q) >= p  <=>  m <= -b * (log p + log1p(q))
    m = np.maximum(np.floor(-b * (np.log(pa) + log_one_plus_q)), 1.0)
    # y >= 0:  1 - q**(y + 1) / (1 + q) >= p  <=>  y + 1 >= -b * (log1p(-p) + log1p(q))
    y_pos = np.maximum(np.ceil(-b * (np.log1p(-pa) + log_one_plus_q)) - 1.0, 0.0)
    y = np.where(pa <= q / (1.0 + q), -m, y_pos)
    y = np.where(discrete_laplace_cdf(y, b) < pa, y + 1.0, y)
    y = np.where(discrete_laplace_cdf(y - 1.0, b) >= pa, y - 1.0, y)
    return y.astype(np.int64)


# --------------------------------------------------------------------------------------
# Goodness of fit
# --------------------------------------------------------------------------------------


class Bins(NamedTuple):
    """A partition of the integers into consecutive intervals.

    Attributes
    ----------
    upper : numpy.ndarray
        int64 inclusive upper edges of every bin but the last (which ends at
        ``+inf``); bin ``i`` is ``(upper[i-1], upper[i]]``.
    prob : numpy.ndarray
        Exact float64 probability of each bin, ``len(upper) + 1`` entries.
    """

    upper: np.ndarray
    prob: np.ndarray


class ChiSquare(NamedTuple):
    """Result of a chi-square goodness-of-fit test."""

    statistic: float
    dof: int
    pvalue: float


def _bin_probabilities(upper: np.ndarray, b: float) -> np.ndarray:
    lo = np.concatenate(([-np.inf], upper.astype(np.float64) + 1.0))
    hi = np.concatenate((upper.astype(np.float64), [np.inf]))
    return discrete_laplace_interval(lo, hi, b)


def discrete_laplace_bins(
    b: float, n: int, *, min_expected: float = 5.0, max_bins: int = 100
) -> Bins:
    """Bins for a chi-square test of ``n`` samples against the exact discrete Laplace.

    Parameters
    ----------
    b : float
        Scale in quanta, ``b > 0``.
    n : int
        Number of samples the bins are for.
    min_expected : float, optional
        Smallest expected count allowed in any bin (the usual validity condition of
        the chi-square approximation).
    max_bins : int, optional
        Largest number of bins. Power against a smooth alternative (such as a wrong
        scale) is spread over the degrees of freedom, so a few dozen well-filled
        bins detect it with far fewer samples than thousands of sparse ones.

    Returns
    -------
    Bins
        Edges and exact probabilities; every bin has ``n * prob >= min_expected``.

    Notes
    -----
    Small scales: one bin per integer ``y`` with ``n * pmf(y) >= min_expected``,
    the two tails pooled. When that would exceed ``max_bins`` (large scales), the
    bins are intervals of equal probability under the exact cdf, cut at its
    quantiles. In both cases a bin that still falls short of ``min_expected`` (a
    thin tail, or a sliver left between two quantiles that share an integer) is
    merged with its lighter neighbour.
    """
    b = _check_scale(b)
    if n < 1:
        raise ValueError("n must be >= 1")
    if max_bins < 2:
        raise ValueError("max_bins must be >= 2")
    p_min = min_expected / n
    c = math.tanh(0.5 / b)
    big_m = math.floor(b * math.log(c / p_min)) if c >= p_min else -1
    if 0 <= big_m and 2 * big_m + 3 <= max_bins:
        upper = np.arange(-big_m - 1, big_m + 1, dtype=np.int64)
    else:
        k = max(2, min(max_bins, int(n / min_expected)))
        upper = np.unique(discrete_laplace_ppf(np.arange(1, k) / k, b))
    prob = _bin_probabilities(upper, b)
    upper_list = upper.tolist()
    prob_list = prob.tolist()
    while len(prob_list) > 1:
        i = min(range(len(prob_list)), key=prob_list.__getitem__)
        if n * prob_list[i] >= min_expected:
            break
        if i == 0:
            j = 1
        elif i == len(prob_list) - 1:
            j = i - 1
        else:
            j = i - 1 if prob_list[i - 1] <= prob_list[i + 1] else i + 1
        lo = min(i, j)
        prob_list[lo : lo + 2] = [prob_list[lo] + prob_list[lo + 1]]
        del upper_list[lo]
    upper = np.asarray(upper_list, dtype=np.int64)
    return Bins(upper, _bin_probabilities(upper, b))


def chi_square_discrete_laplace(
    samples: npt.ArrayLike,
    num: int,
    den: int,
    *,
    min_expected: float = 5.0,
    max_bins: int = 100,
) -> ChiSquare:
    """Chi-square goodness of fit of integer samples to the exact discrete Laplace.

    Parameters
    ----------
    samples : array_like of int
        Draws of a sampler that claims scale ``num/den``.
    num, den : int
        The claimed scale as a fraction, as passed to ``DiscreteLaplace``.
    min_expected : float, optional
        Smallest expected count per bin, see :func:`discrete_laplace_bins`.
    max_bins : int, optional
        Largest number of bins, see :func:`discrete_laplace_bins`.

    Returns
    -------
    ChiSquare
        ``(statistic, dof, pvalue)``; ``dof`` is the number of bins minus one, as
        no parameter is estimated from the samples.

    Raises
    ------
    ValueError
        If a sample is not an integer, or there are too few samples for two bins.
    """
    if isinstance(num, bool) or isinstance(den, bool) or num <= 0 or den <= 0:
        raise ValueError("num and den must be positive ints")
    x = np.asarray(samples).ravel()
    if x.dtype.kind == "f":
        if not np.all(np.isfinite(x)) or np.any(x != np.round(x)):
            raise ValueError("samples must be integers")
    elif x.dtype.kind not in "iu":
        x = x.astype(np.int64)
    n = int(x.size)
    bins = discrete_laplace_bins(num / den, n, min_expected=min_expected, max_bins=max_bins)
    if bins.prob.size < 2:
        raise ValueError(f"{n} samples are too few for bins of {min_expected} expected")
    observed = np.bincount(np.searchsorted(bins.upper, x, side="left"), minlength=bins.prob.size)
    expected = n * bins.prob / bins.prob.sum()
    statistic = float(np.sum((observed - expected) ** 2 / expected))
    dof = int(bins.prob.size - 1)
    return ChiSquare(statistic, dof, float(stats.chi2.sf(statistic, dof)))


# --------------------------------------------------------------------------------------
# The privacy ratio
# --------------------------------------------------------------------------------------


def float32_class(x: float) -> tuple[int, int, int]:
    """Class of a value by its IEEE float32 encoding: ``(sign, exponent, low 2 bits)``.

    Parameters
    ----------
    x : float or int
        A value; it is first rounded to float32, as a float32 board would hold it.

    Returns
    -------
    tuple of int
        Sign bit, unbiased exponent (``-127`` for zero and subnormals, ``128`` for
        inf and nan) and the two lowest mantissa bits.

    Notes
    -----
    Mironov's attack distinguishes ``x + Y`` from ``x' + Y`` by which float32
    values can occur at all: the lattice reachable by the rounded sum depends on
    ``x``. The exponent and the lowest mantissa bits expose that lattice while
    pooling enough outputs per class for a count-based test; a mechanism that is
    DP over exact values remains DP over any such grouping.
    """
    (bits,) = struct.unpack("<I", struct.pack("<f", float(x)))
    return (bits >> 31, ((bits >> 23) & 0xFF) - 127, bits & 3)


@dataclass(frozen=True)
class ClassCount:
    """One output class flagged by :func:`privacy_ratio_check`.

    Attributes
    ----------
    key : Hashable
        The class, as returned by the key function.
    count_a, count_b : int
        How often the class was output under input A and under input B.
    pvalue : float
        One-sided exact p-value of the flagged direction at the DP boundary.
    direction : str
        ``"A>B"`` if the class is too likely under A, ``"B>A"`` otherwise.
    """

    key: Hashable
    count_a: int
    count_b: int
    pvalue: float
    direction: str


@dataclass(frozen=True)
class PrivacyReport:
    """Outcome of :func:`privacy_ratio_check`.

    Attributes
    ----------
    epsilon : float
        The claimed privacy parameter.
    alpha : float
        Family-wise false-alarm probability at the DP boundary.
    n_a, n_b : int
        Sample sizes under input A and input B.
    classes : int
        Number of distinct output classes observed.
    threshold : float
        Per-test level, ``alpha / (2 * classes)``.
    violations : tuple of ClassCount
        Classes whose ratio exceeds ``exp(epsilon)`` significantly, by p-value.
    impossible : tuple of ClassCount
        The violations never seen under the other input.
    """

    epsilon: float
    alpha: float
    n_a: int
    n_b: int
    classes: int
    threshold: float
    violations: tuple[ClassCount, ...]
    impossible: tuple[ClassCount, ...]

    @property
    def ok(self) -> bool:
        """True when no class violates the ratio bound."""
        return not self.violations

    def __str__(self) -> str:
        verdict = "ok" if self.ok else "FAIL"
        lines = [
            f"privacy ratio check at epsilon={self.epsilon:g}: {verdict}",
            f"  {self.n_a} vs {self.n_b} outputs in {self.classes} classes; "
            f"per-class level {self.threshold:.3g} (family-wise alpha {self.alpha:g})",
        ]
        if self.violations:
            lines.append(
                f"  {len(self.violations)} violating classes, {len(self.impossible)} "
                "of them impossible outputs (never seen under the other input)"
            )
            lines.append(f"  {'class':<28} {'A':>9} {'B':>9} {'dir':>4} {'p-value':>10}")
            shown = 10
            for v in self.violations[:shown]:
                lines.append(
                    f"  {str(v.key):<28} {v.count_a:>9} {v.count_b:>9} "
                    f"{v.direction:>4} {v.pvalue:>10.3g}"
                )
            if len(self.violations) > shown:
                lines.append(f"  ... and {len(self.violations) - shown} more")
        return "\n".join(lines)


def _count(
    outputs: Iterable[object], key: Callable[[object], Hashable] | None
) -> Counter[Hashable]:
    if isinstance(outputs, np.ndarray):
        outputs = outputs.ravel().tolist()
    if key is None:
        return Counter(outputs)
    return Counter(map(key, outputs))


def privacy_ratio_check(
    out_a: Iterable[object],
    out_b: Iterable[object],
    epsilon: float,
    *,
    key: Callable[[object], Hashable] | None = None,
    alpha: float = 1e-6,
) -> PrivacyReport:
    """Test outputs under two neighbouring inputs for a ratio above ``exp(epsilon)``.

    Parameters
    ----------
    out_a, out_b : iterable
        Released outputs for input A and input B, two inputs that differ by the
        sensitivity (so the mechanism claims ``P_A(S) <= exp(epsilon) P_B(S)`` and
        the converse for every set of outputs ``S``).
    epsilon : float
        The claimed privacy parameter, ``>= 0``.
    key : callable, optional
        Maps an output to its class; default: the exact value. Use
        :func:`float32_class` to look for float32 lattice leaks.
    alpha : float, optional
        Family-wise probability of a false alarm when the mechanism sits exactly
        on the DP boundary (a mechanism inside it alarms less often).

    Returns
    -------
    PrivacyReport
        ``.ok``, ``.violations`` (by increasing p-value) and ``.impossible``.

    Notes
    -----
    For a class with counts ``cA`` and ``cB``, conditioning on ``n = cA + cB``
    removes the unknown class probability: at the boundary ``pA = exp(eps) pB``,
    ``cA ~ Binomial(n, NA e^eps / (NA e^eps + NB))`` exactly, with ``NA``, ``NB``
    the sample sizes. The class is flagged when ``P(Binomial >= cA)`` is below
    ``alpha / (2 * classes)``, and likewise with A and B swapped (Bonferroni over
    both directions of every observed class). The test needs no model of the
    mechanism and no binning choice beyond ``key``; its power is limited to
    classes with many outputs, e.g. at ``epsilon = 1`` an output seen ``k`` times
    under one input only is flagged once ``(e/(1+e))**k`` drops below the level.
    """
    epsilon = float(epsilon)
    if not (epsilon >= 0.0 and math.isfinite(epsilon)):
        raise ValueError("epsilon must be a finite number >= 0")
    if not 0.0 < alpha < 1.0:
        raise ValueError("alpha must be in (0, 1)")
    count_a = _count(out_a, key)
    count_b = _count(out_b, key)
    n_a = sum(count_a.values())
    n_b = sum(count_b.values())
    if n_a == 0 or n_b == 0:
        raise ValueError("both output samples must be non-empty")
    keys = list(count_a.keys() | count_b.keys())
    ca = np.array([count_a.get(k, 0) for k in keys], dtype=np.int64)
    cb = np.array([count_b.get(k, 0) for k in keys], dtype=np.int64)
    n = ca + cb
    # exp(eps) NA / (exp(eps) NA + NB), written to stay finite for large epsilon
    p_a = 1.0 / (1.0 + math.exp(-epsilon) * n_b / n_a)
    p_b = 1.0 / (1.0 + math.exp(-epsilon) * n_a / n_b)
    # Arrays in, arrays out; the stubs type sf() as float-or-array.
    pv_a = np.asarray(stats.binom.sf(ca - 1, n, p_a), dtype=float)
    pv_b = np.asarray(stats.binom.sf(cb - 1, n, p_b), dtype=float)
    threshold = alpha / (2 * len(keys))
    flagged: list[ClassCount] = []
    for i in np.flatnonzero((pv_a < threshold) | (pv_b < threshold)).tolist():
        a_side = pv_a[i] <= pv_b[i]
        flagged.append(
            ClassCount(
                keys[i],
                int(ca[i]),
                int(cb[i]),
                float(pv_a[i] if a_side else pv_b[i]),
                "A>B" if a_side else "B>A",
            )
        )
    flagged.sort(key=lambda v: (v.pvalue, -(v.count_a + v.count_b), repr(v.key)))
    impossible = tuple(v for v in flagged if v.count_a == 0 or v.count_b == 0)
    return PrivacyReport(
        epsilon=epsilon,
        alpha=alpha,
        n_a=n_a,
        n_b=n_b,
        classes=len(keys),
        threshold=threshold,
        violations=tuple(flagged),
        impossible=impossible,
    )
