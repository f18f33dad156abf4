"""Estimates with confidence intervals from readings as the boards released them.

    law = NoiseLaw.for_column(delta_q=125, epsilon="0.5")    # discrete Laplace, scale 250 quanta
    est = mean(y, law, level=0.95)                            # y: one column's released quanta
    est.value, est.lo, est.hi, est.n

A board releases ``y = q + Z`` per column (shared_protocol/mechanism.py): ``q`` is the reading
scaled to integer quanta and clamped to the column's domain, ``Z`` is exact discrete Laplace
noise, ``P(Z = z) = tanh(1/(2b)) exp(-|z|/b)`` with ``b = delta_q / epsilon`` quanta
(shared_protocol/noise.py), drawn afresh for every reading. With ``p = exp(-1/b)`` the law is
``(1-p)/(1+p) p^|z|``; its variance is ``2p/(1-p)^2`` and its fourth cumulant
``2p(1+4p+p^2)/(1-p)^4``, both exact.

What is estimated
-----------------
The statistic of the window's *raw* values ``q`` (the readings the boards measured, in quanta),
conditional on them: the estimators are unbiased for every set of raw values, and the intervals
cover the raw statistic at the stated level over the noise alone. Every estimate is a function
of released values only.

* ``mean``/``sum``: ``mean(y)``. The interval is ``mean(y) -+ t/n`` with ``t`` the smallest
  integer such that ``P(|Z_1 + ... + Z_n| <= t) >= level``, from the exact law of the sum
  (inverse FFT of its characteristic function ``phi(w)^n``, ``phi(w) = (1-p)^2 / (1 - 2p cos w
  + p^2)``) while its grid fits in 2^21 points; coverage is then at least ``level``, exact up
  to the lattice step of ``t``. Beyond that grid (thousands of readings at large scales, or a
  scale above about 25,000 quanta) the Cornish-Fisher quantile with the exact variance and
  fourth cumulant is used, an approximation (within 0.1 % of the normal limit at 4,000
  readings, tests/cloud/test_aggregate_command.py).
* ``count_between`` (counts above/below a threshold, histogram bins): exact lattice
  deconvolution. ``1/phi(w) = (1 + p^2 - 2p cos w)/(1-p)^2`` is a trigonometric polynomial, so
  the convolution with the noise law has a three-tap inverse: for an indicator ``h``,
  ``g(y) = ((1+p^2) h(y) - p h(y-1) - p h(y+1)) / (1-p)^2`` has ``E[g(q + Z)] = h(q)`` for
  every integer ``q``, and ``sum g(y_i)`` is the unbiased count (the only unbiased one whose
  growth is below ``p^-|y|``). ``g`` differs from ``h`` only at the two lattice points next to
  each edge, where it is of order ``+-b^2``: the variance of a count is about ``b^3`` per raw
  value lying within ``b`` quanta of an edge, so counts and histograms need many more readings
  than means. The interval is normal. ``Var = sum_e (g_e^2 - h_e) E[N_e] + E[N_in] - count``,
  with ``N_e`` the released values on edge point ``e`` and ``N_in`` those inside; ``E[N_e]`` is
  estimated from the released values within ``b/2`` of ``e`` (the noise makes their law smooth on
  the scale ``b``, so the average over that span has a small bias and far less spread than
  ``N_e`` itself). Where every edge point expects at least 2 released values, this interval
  covers at its level within the margin of 2,000 simulated windows
  (tests/statistical/test_aggregate_coverage.py; method COUNT_METHOD). With fewer (small
  windows, wide noise) the normal law of a few large terms is poor, and the variance is the
  larger of the unbiased ``sum g(y_i)^2 - count`` and the plug-in ``sum v(y_i)``, ``v(q)`` the
  exact variance of ``g(q + Z)`` at the released values: conservative (coverage at least the
  level; method COUNT_METHOD_FEW), and then often all of ``[0, n]``.
  Intervals are cut to ``[0, n]``; the estimate itself is not (cutting it would bias it).
* ``quantile``: the smallest lattice point whose deconvolved CDF reaches ``q`` (consistent, not
  unbiased: no unbiased quantile exists); the interval inverts the CDF's pointwise intervals.

Clamping and rounding: a board rounds a reading to the quantum and clamps it to the domain
``[-span, span]`` before adding noise (noise is never clamped). The estimates are unbiased for
those rounded, clamped values. Against the physical readings a mean is off by at most half a
quantum from rounding, and biased towards zero by the part of any reading beyond the domain.
Counts and quantiles at thresholds inside the domain are not affected by clamping (a clamped
reading stays on the same side of any such threshold).

Privacy: every function here spends no privacy budget. Its input is readings the boards
already released, each epsilon-DP towards the analyst (and anyone the analyst shows them to);
any function of them is post-processing (Dwork and Roth 2014, Proposition 2.1) and reveals
nothing more about a raw reading than the released readings do.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from dpsense.protocol.fixedpoint import parse_decimal

__all__ = ["NO_BUDGET", "Estimate", "NoiseLaw", "count_between", "mean", "quantile",
           "sum_halfwidth", "total"]

NO_BUDGET = ("spends no privacy budget: post-processing of readings already released, each epsilon-DP "
             "towards the analyst")
_FFT_MAX = 1 << 21
_Z = {0.8: 1.2815515655446004, 0.9: 1.6448536269514722, 0.95: 1.959963984540054, 0.98: 2.3263478740408408,
      0.99: 2.5758293035489004, 0.995: 2.807033768343811, 0.999: 3.2905267314918945}

Values = npt.NDArray[np.int64]


@dataclass(frozen=True)
class NoiseLaw:
    """Discrete Laplace noise of scale ``num/den`` quanta (the board's ``DiscreteLaplace``).

    Public parameters only (the profile's sensitivity and epsilon): spends no privacy budget."""

    num: int
    den: int

    def __post_init__(self) -> None:
        for name, v in (("num", self.num), ("den", self.den)):
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ValueError("noise scale %s must be a positive int, got %r" % (name, v))

    @classmethod
    def for_column(cls, delta_q: int, epsilon: str | tuple[int, int]) -> NoiseLaw:
        """The law of a column with relaxed sensitivity ``delta_q`` quanta and ``epsilon``
        (a decimal string as in the profile, or ``(num, den)``): scale ``delta_q / epsilon``.
        Reads public profile parameters only, never data: spends no privacy budget."""
        if isinstance(delta_q, bool) or not isinstance(delta_q, int) or delta_q <= 0:
            raise ValueError("delta_q must be a positive int (quanta), got %r" % (delta_q,))
        if not isinstance(epsilon, (str, tuple)):
            raise ValueError("epsilon must be a decimal string or a (num, den) pair, got %r" % (epsilon,))
        en, ed = parse_decimal(epsilon) if isinstance(epsilon, str) else epsilon
        if any(isinstance(v, bool) or not isinstance(v, int) or v <= 0 for v in (en, ed)):
            raise ValueError("epsilon must be positive, got %r" % (epsilon,))
        f = Fraction(delta_q * ed, en)
        return cls(f.numerator, f.denominator)

    @property
    def scale(self) -> float:
        return self.num / self.den

    @property
    def p(self) -> float:
        """``exp(-1/b)``: the ratio of neighbouring probabilities."""
        return math.exp(-self.den / self.num)

    @property
    def variance(self) -> float:
        p = self.p
        return 2 * p / (1 - p) ** 2

    @property
    def kappa4(self) -> float:
        p = self.p
        return 2 * p * (1 + 4 * p + p * p) / (1 - p) ** 4


def _check_level(level: float) -> float:
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0.5 <= float(level) < 1:
        raise ValueError("level must be a number in [0.5, 1), got %r" % (level,))
    return float(level)


def _normal_quantile(u: float) -> float:
    """Phi^-1(u) for u in (0, 1): Acklam's rational approximation with one Newton step (|err| < 1e-12)."""
    a = (-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02, 1.383577518672690e+02,
         -3.066479806614716e+01, 2.506628277459239e+00)
    b = (-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02, 6.680131188771972e+01,
         -1.328068155288572e+01)
    c = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00, -2.549732539343734e+00,
         4.374664141464968e+00, 2.938163982698783e+00)
    d = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00, 3.754408661907416e+00)
    if u < 0.02425:
        s = math.sqrt(-2 * math.log(u))
        x = (((((c[0] * s + c[1]) * s + c[2]) * s + c[3]) * s + c[4]) * s + c[5]) / \
            ((((d[0] * s + d[1]) * s + d[2]) * s + d[3]) * s + 1)
    elif u > 1 - 0.02425:
        return -_normal_quantile(1 - u)
    else:
        s = u - 0.5
        r = s * s
        x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * s / \
            (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1)
    e = 0.5 * math.erfc(-x / math.sqrt(2)) - u
    return x - e * math.sqrt(2 * math.pi) * math.exp(x * x / 2)


def _z(level: float) -> float:
    """Two-sided standard normal quantile for ``level``."""
    return _Z.get(level) or _normal_quantile(0.5 + level / 2)


@lru_cache(maxsize=4096)
def sum_halfwidth(law: NoiseLaw, n: int, level: float) -> int:
    """The smallest integer ``t`` with ``P(|Z_1 + ... + Z_n| <= t) >= level`` (iid noise of ``law``).

    Exact (inverse FFT of ``phi^n``) while the grid fits in 2^21 points, else Cornish-Fisher with
    the exact variance and fourth cumulant (an approximation). Spends no privacy budget: a
    function of public parameters only, it reads no data."""
    if not isinstance(law, NoiseLaw):
        raise TypeError("law must be a NoiseLaw")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError("n must be an int >= 1, got %r" % (n,))
    level = _check_level(level)
    p = law.p
    if n == 1:      # P(|Z| > t) = 2 p^(t+1) / (1+p)
        t = math.log((1 - level) * (1 + p) / 2) / math.log(p) - 1
        return max(0, math.ceil(t - 1e-9))
    sd = math.sqrt(n * law.variance)
    half = int(12 * sd + 40 * law.scale) + 16
    size = 1 << max(4, (2 * half).bit_length())
    if size <= _FFT_MAX:
        w = 2 * math.pi * np.arange(size // 2 + 1) / size
        phi = (1 - p) ** 2 / (1 - 2 * p * np.cos(w) + p * p)
        pmf = np.fft.irfft(phi ** n, size)
        cdf = pmf[0] + 2 * np.cumsum(pmf[1:size // 2])      # P(|S| <= t) for t = 1, 2, ...
        if pmf[0] >= level:
            return 0
        idx = int(np.searchsorted(cdf, level - 1e-12))
        if idx < cdf.size:
            return idx + 1
    z = _z(level)
    g2 = law.kappa4 / (n * law.variance ** 2)
    zcf = z + (z ** 3 - 3 * z) * g2 / 24
    return math.ceil(zcf * sd)


@dataclass(frozen=True)
class Estimate:
    """An estimate, its interval at ``level`` and the readings it used, in quanta (``scaled``
    gives physical units). ``method`` names the interval's construction."""

    value: float
    lo: float
    hi: float
    n: int
    level: float
    method: str

    def scaled(self, quantum: float) -> Estimate:
        """The estimate in physical units (``quanta x quantum``): arithmetic on a released
        estimate, no privacy cost."""
        if not (isinstance(quantum, (int, float)) and math.isfinite(quantum) and quantum > 0):
            raise ValueError("quantum must be a number > 0, got %r" % (quantum,))
        return Estimate(self.value * quantum, self.lo * quantum, self.hi * quantum, self.n, self.level,
                        self.method)


def _column(y: object) -> Values:
    a = np.asarray(y)
    if a.ndim != 1:
        raise ValueError("released values must be one column (a 1-d array), got shape %r" % (a.shape,))
    if a.size == 0:
        raise ValueError("no released values: a window needs at least one reading")
    if not np.issubdtype(a.dtype, np.integer):
        raise ValueError("released values are integer quanta, got dtype %s" % a.dtype)
    return a.astype(np.int64)


def mean(y: object, law: NoiseLaw, level: float = 0.95) -> Estimate:
    """Unbiased mean of the raw values (quanta) behind released ``y``, interval from the exact
    law of the noise sum. Spends no privacy budget: post-processing of released readings, each
    epsilon-DP towards the analyst."""
    a = _column(y)
    level = _check_level(level)
    n = int(a.size)
    m = float(a.mean())
    t = sum_halfwidth(law, n, level) / n
    return Estimate(m, m - t, m + t, n, level, "exact noise-sum law")


def total(y: object, law: NoiseLaw, level: float = 0.95) -> Estimate:
    """Unbiased sum of the raw values (quanta); ``n`` times :func:`mean`. Spends no privacy
    budget: post-processing of released readings, each epsilon-DP towards the analyst."""
    e = mean(y, law, level)
    return Estimate(e.value * e.n, e.lo * e.n, e.hi * e.n, e.n, e.level, e.method)


def _edge_weights(law: NoiseLaw) -> tuple[float, float]:
    """``g`` on an edge's inner point (inside the interval) and outer point (next to it)."""
    p = law.p
    return (1 - p + p * p) / (1 - p) ** 2, -p / (1 - p) ** 2


def _cdf(law: NoiseLaw, k: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """``P(Z <= k)`` for integer (or infinite) ``k``."""
    p = law.p
    with np.errstate(over="ignore", under="ignore"):
        pos = 1 - np.power(p, np.maximum(k, 0) + 1) / (1 + p)
        neg = np.power(p, np.maximum(-k, 0)) / (1 + p)
    out: npt.NDArray[np.float64] = np.where(k >= 0, pos, neg)
    return out


def _pmf(law: NoiseLaw, k: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    p = law.p
    out: npt.NDArray[np.float64] = (1 - p) / (1 + p) * np.power(p, np.abs(k))
    return out


def _point_g(law: NoiseLaw, lo: float, hi: float, pts: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """``g`` = the three-tap inverse applied to the indicator of ``[lo, hi]``, at ``pts``."""
    p = law.p

    def h(v: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        return ((v >= lo) & (v <= hi)).astype(np.float64)

    out: npt.NDArray[np.float64] = ((1 + p * p) * h(pts) - p * h(pts - 1) - p * h(pts + 1)) / (1 - p) ** 2
    return out


def _raw_variance(law: NoiseLaw, lo: float, hi: float, q: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """``Var g(q + Z)`` for raw values ``q``: ``E[g^2] - h(q)``, exact."""
    edges = [e for e in (lo - 1, lo, hi, hi + 1) if math.isfinite(e)]
    pts = np.array(sorted(set(edges)), dtype=np.float64)
    g = _point_g(law, lo, hi, pts)
    h = ((pts >= lo) & (pts <= hi)).astype(np.float64)
    inside = _cdf(law, hi - q) - _cdf(law, lo - q - 1)          # P(lo <= q + Z <= hi)
    extra = _pmf(law, pts[None, :] - q[:, None]) @ (g * g - h)
    out: npt.NDArray[np.float64] = np.maximum(inside + extra - ((q >= lo) & (q <= hi)), 0.0)
    return out


COUNT_METHOD = "lattice deconvolution, normal interval (variance from the edge points' neighbourhood)"
COUNT_METHOD_FEW = ("lattice deconvolution, conservative normal interval (fewer than 2 readings expected at an "
                    "edge point)")
# Released values expected on each edge point for the calibrated interval (module docstring).
_EDGE_READINGS = 2.0


def _interval_count(s: Values, lo: float, hi: float, law: NoiseLaw, level: float) -> tuple[float, float, float, str]:
    """(unbiased count of raw values in [lo, hi], interval lo, interval hi, method) from sorted ``s``."""
    n = s.size
    edges = sorted({e for e in (lo - 1, lo, hi, hi + 1) if math.isfinite(e)})
    pts = np.array(edges, dtype=np.float64)
    at = (np.searchsorted(s, pts, side="right") - np.searchsorted(s, pts, side="left")).astype(np.float64)
    h = ((pts >= lo) & (pts <= hi)).astype(np.float64)
    inside = float(np.searchsorted(s, hi, side="right") - np.searchsorted(s, lo, side="left"))
    g = _point_g(law, lo, hi, pts)
    value = inside + float(at @ (g - h))
    w = max(1, round(law.scale / 2))
    near = (np.searchsorted(s, pts + w, side="right") - np.searchsorted(s, pts - w, side="left")) / (2 * w + 1)
    if float(near.min()) >= _EDGE_READINGS:
        var = float(near @ (g * g - h)) + inside - value
        method = COUNT_METHOD
    else:
        var = max(inside + float(at @ (g * g - h)) - value, _plugin_variance(s, lo, hi, law, edges))
        method = COUNT_METHOD_FEW
    half = _z(level) * math.sqrt(max(var, 0.0))
    return value, min(max(0.0, value - half), float(n)), max(min(float(n), value + half), 0.0), method


def _plugin_variance(s: Values, lo: float, hi: float, law: NoiseLaw, edges: list[float]) -> float:
    """``sum v(y_i)``: the exact per-reading variance at the released values near an edge
    (further away it is below 1e-12 of its peak)."""
    reach = 40 * law.scale + 2
    spans: list[list[int]] = []
    for e in edges:         # sorted, so the index ranges come sorted by start: merge overlaps
        a, b = int(np.searchsorted(s, e - reach)), int(np.searchsorted(s, e + reach, side="right"))
        if spans and a <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], b)
        else:
            spans.append([a, b])
    plug = 0.0
    for a, b in spans:
        seg = s[a:b]
        if seg.size == 0:
            continue
        starts = np.r_[0, np.flatnonzero(np.diff(seg)) + 1]       # distinct values of a sorted run
        mult = np.diff(np.r_[starts, seg.size])
        plug += float(mult @ _raw_variance(law, lo, hi, seg[starts].astype(np.float64)))
    return plug


def count_between(y: object, law: NoiseLaw, lo: int | None = None, hi: int | None = None,
                  level: float = 0.95, *, presorted: bool = False) -> Estimate:
    """Unbiased count of raw values ``q`` with ``lo <= q <= hi`` (quanta; None: unbounded), by
    exact lattice deconvolution, with a normal interval cut to ``[0, n]`` (module docstring).
    ``presorted``: ``y`` is already sorted (several counts of one window sort it once).
    Spends no privacy budget: post-processing of released readings, each epsilon-DP towards
    the analyst."""
    a = _column(y)
    level = _check_level(level)
    if not isinstance(presorted, bool):
        raise ValueError("presorted must be a bool")
    for name, v in (("lo", lo), ("hi", hi)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer))):
            raise ValueError("%s must be an int (quanta) or None, got %r" % (name, v))
    if lo is not None and hi is not None and lo > hi:
        raise ValueError("lo must be <= hi, got %d > %d" % (lo, hi))
    n = int(a.size)
    if lo is None and hi is None:
        return Estimate(float(n), float(n), float(n), n, level, "all readings")
    value, l, h, method = _interval_count(a if presorted else np.sort(a), -math.inf if lo is None else float(lo),
                                  math.inf if hi is None else float(hi), law, level)
    return Estimate(value, l, h, n, level, method)


def quantile(y: object, law: NoiseLaw, q: float, level: float = 0.95) -> Estimate:
    """The ``q``-quantile of the raw values (quanta): the smallest lattice point ``t`` whose
    deconvolved count of raw values ``<= t`` reaches ``q n``; its interval runs from the
    smallest ``t`` whose count interval's upper end reaches ``q n`` to the smallest whose lower
    end does. Consistent, not unbiased (no unbiased quantile exists). Spends no privacy
    budget: post-processing of released readings, each epsilon-DP towards the analyst."""
    a = _column(y)
    level = _check_level(level)
    if isinstance(q, bool) or not isinstance(q, (int, float)) or not 0 < float(q) < 1:
        raise ValueError("q must be a number in (0, 1), got %r" % (q,))
    s = np.sort(a)
    n = int(s.size)
    need = float(q) * n
    inner, outer = _edge_weights(law)
    # The deconvolved CDF changes only next to released values: evaluate it there.
    pts = np.unique(np.concatenate([s - 1, s, s + 1])).astype(np.float64)
    le_m1 = np.searchsorted(s, pts - 1, side="right")
    at_t = np.searchsorted(s, pts, side="right") - le_m1
    at_t1 = np.searchsorted(s, pts + 1, side="right") - le_m1 - at_t
    c = le_m1 + inner * at_t + outer * at_t1
    hit = np.flatnonzero(c >= need)
    est = float(pts[hit[0]]) if hit.size else float(pts[-1])

    def end(t: float, which: int) -> float:
        _, lo_end, hi_end, _ = _interval_count(s, -math.inf, t, law, level)
        return lo_end if which == 1 else hi_end

    def first(which: int) -> float:
        """Smallest lattice point whose count interval end ``which`` (1 lower, 2 upper) reaches
        ``need``, by bisection (the ends grow with t up to noise of their own)."""
        lo_t, hi_t = float(s[0]) - 60 * law.scale - 2, float(s[-1]) + 60 * law.scale + 2
        if end(hi_t, which) < need:
            return math.inf
        while hi_t - lo_t > 1:
            mid = math.floor((lo_t + hi_t) / 2)
            if end(mid, which) >= need:
                hi_t = mid
            else:
                lo_t = mid
        return hi_t

    return Estimate(est, first(2), first(1), n, level, "deconvolved CDF, inverted count intervals")
