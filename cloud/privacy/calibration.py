"""Differentially private calibration of the device parameters from raw calibration data.

    acct = BudgetAccountant("budget.db"); acct.set_budget("calibration", epsilon=1)
    profile = dp_calibrate(reference, bounds=(-2000, 2000), epsilon=1, device_epsilon="0.5",
                           quantum=0.01, accountant=acct, dataset="calibration")
    Path("dpsense-data/profile.json").write_text(profile.to_json())

:func:`dpsense.cloud.sim.calibration.calibrate` computes the provisioning input of the firmware
(:class:`dpsense.cloud.deploy.profile.DeviceProfile`) in the clear: the relaxed sensitivity of every
column from the 5th and 95th percentiles (Böhler et al. 2017, relaxed sensitivity by percentiles), the centre (the mean) and the
outlier-layer width w_O (Böhler et al. 2017, from historical data). When the calibration data are themselves
personal data, those parameters leak them. :func:`dp_calibrate` releases the same
fields with epsilon-DP (replace-one neighbours, n public):

* every percentile by the exponential mechanism over a public grid of the bounded
  domain (:func:`dp_quantile`, utility ``-|#{x < v} - q n|``, sensitivity 1);
* the centre by a clipped sum plus Laplace noise, divided by n;
* w_O as the spread of the radii of the outer layer, from two DP quantiles of the
  radii ``||x - centre||`` (the released centre, so re-using it costs nothing);
* the band width of correction mode bands, half the gap between the normal radius and
  the layer's lower quantile: computed from released values only, so it costs nothing.

The epsilon is split by ``shares`` (default half for the relaxed sensitivity, a
quarter each for the centre and w_O), and evenly among the columns inside a share.
Every part is checked against the accountant before the data are read and spent
before the profile is returned. Everything else in the profile (``quantum``,
``domain``, the device ``epsilon``, the DBSCAN parameters) is public input.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Union

import numpy as np

from dpsense.cloud.correction.bands import width_from_history
from dpsense.cloud.correction.rules import normal_radius
from dpsense.cloud.deploy.profile import DeviceProfile

from .accountant import BudgetAccountant
from .mechanisms import Exponential, Laplace
from .validation import Rng, check_bounds, check_epsilon, check_rng, is_real

__all__ = ["CalibrationShares", "dp_calibrate", "dp_mean", "dp_quantile", "dp_relaxed_sensitivity", "load_csv"]

Data = Union[np.ndarray, Callable[[], Any]]


def _check_q(q: object) -> float:
    if isinstance(q, bool) or not isinstance(q, numbers.Real):
        raise TypeError("q must be a real number")
    if not 0 <= float(q) <= 1:
        raise ValueError("q must be in [0, 1], got %r" % (q,))
    return float(q)


def _check_grid(grid: object) -> int:
    if isinstance(grid, bool) or not isinstance(grid, numbers.Integral):
        raise TypeError("grid must be an int")
    if int(grid) < 2:
        raise ValueError("grid must be >= 2, got %s" % grid)
    return int(grid)


def _quantile(values: np.ndarray, q: float, lo: float, hi: float, grid: int, epsilon: Fraction,
              rng: Rng) -> float:
    cand = np.linspace(lo, hi, grid)
    v = np.clip(values, lo, hi)
    ranks = np.searchsorted(np.sort(v), cand, side="left")         # #{x < c}
    util = -np.abs(ranks - q * len(v))
    return float(cand[Exponential(epsilon=epsilon, sensitivity=1, rng=rng).select(util.tolist())])


def dp_quantile(data: Data, *, q: float, bounds: tuple[float, float], epsilon: object, grid: int = 2001,
                rng: Rng | None = None, accountant: BudgetAccountant | None = None,
                dataset: str | None = None, query: str = "dp quantile") -> float:
    """The ``q``-quantile of a column, by the exponential mechanism over a grid of ``bounds``.

    Parameters
    ----------
    data : 1-d array, or callable returning one (called after the budget check)
    q : float
        Quantile in [0, 1].
    bounds : (float, float)
        Public domain ``lower < upper``; values are clipped to it. Required.
    epsilon : float
        Privacy parameter, ``> 0``.
    grid : int
        Number of equally spaced candidates in ``bounds`` (the resolution).
    rng : Rng, optional
        Random source with ``getrandbits``; default ``secrets.SystemRandom()``.
    accountant, dataset : optional
        Charge ``epsilon`` (checked before the data are read).

    Returns
    -------
    float
        A grid point.

    Notes
    -----
    Guarantee: ``epsilon``-DP under replace-one (and add/remove) neighbours. The
    utility of candidate ``c`` is ``-|#{x < c} - q n|``; replacing one record moves
    every count by at most 1, so the sensitivity is 1. With probability at least
    ``1 - beta`` the released candidate's rank is within
    ``2 (ln(grid) + ln(1/beta)) / epsilon`` of ``q n`` (McSherry-Talwar utility
    bound); the grid adds at most one grid step ``(upper - lower)/(grid - 1)``.
    A value gap around the target rank makes every candidate in it equally good, as
    for any quantile. Cost ``O(n log n + grid)``.

    References
    ----------
    F. McSherry, K. Talwar, FOCS 2007. A. Smith, "Privacy-preserving statistical
    estimation with optimal convergence rates", STOC 2011 (the quantile mechanism).
    """
    qq = _check_q(q)
    lo, hi = check_bounds(bounds)
    if lo == hi:
        raise ValueError("bounds must satisfy lower < upper")
    eps = check_epsilon(epsilon)
    g = _check_grid(grid)
    rng = check_rng(rng)
    if accountant is not None:
        if dataset is None:
            raise ValueError("give dataset with accountant")
        accountant.check(dataset, eps)
    x = np.asarray(data() if callable(data) else data, dtype=float).ravel()
    out = _quantile(x, qq, float(lo), float(hi), g, eps, rng)
    if accountant is not None:
        assert dataset is not None    # checked with the accountant: both or neither
        accountant.spend(dataset, eps, query=query)
    return out


def _mean(x: np.ndarray, lo: float, hi: float, epsilon: Fraction, rng: Rng) -> float:
    clipped = np.clip(x, lo, hi)
    total = sum((Fraction(float(v)) for v in clipped), Fraction(0))
    mech = Laplace(epsilon=epsilon, sensitivity=Fraction(hi) - Fraction(lo), rng=rng)
    return mech.randomise(total) / len(x)


def dp_mean(data: Data, *, bounds: tuple[float, float], epsilon: object, rng: Rng | None = None,
            accountant: BudgetAccountant | None = None, dataset: str | None = None,
            query: str = "dp mean") -> float:
    """Mean of a column clipped to ``bounds``: noisy clipped sum divided by the public n.

    Notes
    -----
    Guarantee: ``epsilon``-DP under replace-one (n public): the clipped sum moves by
    at most ``upper - lower`` (summed exactly as rationals); dividing by n is
    post-processing. Noise sd ``sqrt(2) (upper - lower) / (n epsilon)``.

    References
    ----------
    C. Dwork, A. Roth, "The Algorithmic Foundations of Differential Privacy", 2014, Sect. 3.3.
    """
    lo, hi = check_bounds(bounds)
    if lo == hi:
        raise ValueError("bounds must satisfy lower < upper")
    eps = check_epsilon(epsilon)
    rng = check_rng(rng)
    if accountant is not None:
        if dataset is None:
            raise ValueError("give dataset with accountant")
        accountant.check(dataset, eps)
    x = np.asarray(data() if callable(data) else data, dtype=float).ravel()
    if len(x) == 0:
        raise ValueError("no records")
    out = _mean(x, float(lo), float(hi), eps, rng)
    if accountant is not None:
        assert dataset is not None    # checked with the accountant: both or neither
        accountant.spend(dataset, eps, query=query)
    return out


def dp_relaxed_sensitivity(x: np.ndarray, *, bounds: tuple[float, float], epsilon: object,
                           outlier_percent: float = 10.0, grid: int = 2001, rng: Rng | None = None) -> np.ndarray:
    """Relaxed sensitivity by percentiles (Böhler et al. 2017) per column, ``Q(1 - p/200) - Q(p/200)``, with DP quantiles at ``epsilon / (2 d)`` each.

    ``epsilon``-DP in all (sequential composition over the ``2 d`` quantiles). No
    accountant here: :func:`dp_calibrate` charges it.
    """
    eps = check_epsilon(epsilon)
    lo, hi = check_bounds(bounds)
    rng = check_rng(rng)
    x = np.asarray(x, dtype=float)
    d = x.shape[1]
    each = eps / (2 * d)
    qlo = outlier_percent / 200.0
    return np.array([_quantile(x[:, j], 1 - qlo, float(lo), float(hi), grid, each, rng)
                     - _quantile(x[:, j], qlo, float(lo), float(hi), grid, each, rng) for j in range(d)])


@dataclass(frozen=True)
class CalibrationShares:
    """How ``epsilon`` is split: relaxed sensitivity, centre, w_O (each ``>= 0``, sum 1)."""

    sensitivity: Fraction = Fraction(1, 2)
    centre: Fraction = Fraction(1, 4)
    w_o: Fraction = Fraction(1, 4)

    def __post_init__(self) -> None:
        for name in ("sensitivity", "centre", "w_o"):
            v = Fraction(repr(getattr(self, name))) if isinstance(getattr(self, name), float) \
                else Fraction(getattr(self, name))
            object.__setattr__(self, name, v)
        if self.sensitivity <= 0 or self.centre <= 0 or self.w_o < 0:
            raise ValueError("shares must be > 0 (w_o >= 0)")
        if self.sensitivity + self.centre + self.w_o != 1:
            raise ValueError("shares must sum to 1")


def dp_calibrate(data: Data, *, bounds: tuple[float, float], epsilon: object, device_epsilon: str,
                 quantum: float, outlier_percent: float = 10.0, layer_margin: float = 0.001,
                 grid: int = 2001, shares: CalibrationShares | None = None,
                 dbscan_eps: float = 12.0, dbscan_min_samples: int = 60, config_id: int = 1,
                 rng: Rng | None = None, accountant: BudgetAccountant | None = None,
                 dataset: str | None = None) -> DeviceProfile:
    """A :class:`~dpsense.cloud.deploy.profile.DeviceProfile` computed with ``epsilon``-DP from raw calibration data.

    Parameters
    ----------
    data : ndarray (n, d), or callable returning one (called after the budget check)
        Calibration (historical) readings in data units.
    bounds : (float, float)
        Public range of every column (physical plausibility limits); required.
        Values are clipped to it. It also sets the profile's ``domain``
        (``max(|lower|, |upper|)``).
    epsilon : float
        Curator budget for the whole calibration, ``> 0``.
    device_epsilon : str
        The epsilon per column the devices will use (a decimal string, public).
    quantum : float
        Units per quantum of the device's fixed-point scale, ``> 0``.
    outlier_percent : float
        Outlier percentage ``p_o`` of the percentile estimate (Böhler et al. 2017; default 10): RS = Q(1 - p_o/200) - Q(p_o/200).
    layer_margin : float
        w_O is ``Q_r(1 - m) - Q_r(1 - p_o/100 + m)`` on the radii, with
        ``m = max(layer_margin p_o/100, 2 ln(grid) / (epsilon_q n))`` (default
        ``layer_margin`` 0.001; ``epsilon_q`` is the epsilon of one radius quantile):
        quantiles a little inside the outer layer, because the exact layer edges (the
        largest radius, and the first radius after a gap) have no DP estimate (a
        plateau of equal utility), and the mechanism's rank error is about
        ``2 ln(grid)/epsilon_q``. It under-estimates the non-private w_O by the radial
        extent of the ``2 m n`` outermost and innermost outliers of the layer.
    grid : int
        Candidates per DP quantile (resolution ``(upper - lower)/(grid - 1)``).
    shares : CalibrationShares, optional
        Split of ``epsilon`` (default 1/2, 1/4, 1/4).
    dbscan_eps, dbscan_min_samples, config_id
        Copied into the profile (public).
    rng : Rng, optional
        Random source; default ``secrets.SystemRandom()``.
    accountant, dataset : optional
        Charge the parts to this budget; all are checked before the data are read.

    Returns
    -------
    DeviceProfile

    Notes
    -----
    Guarantee: ``epsilon``-DP under replace-one neighbours (n public), by sequential
    composition of ``2d`` quantiles at ``share_rs epsilon / (2d)``, ``d`` means at
    ``share_c epsilon / d`` and 2 radius quantiles at ``share_w epsilon / 2``. The
    radii use the released centre (post-processing of an earlier release) and the
    public radius range ``[0, sqrt(d) (upper - lower)]``. The relaxed-sensitivity
    caveat of the percentile estimate (Böhler et al. 2017) still applies: RS estimated below the true RS weakens the
    devices' guarantee, and the calibration data must not be the batch the devices
    release.
    """
    lo_f, hi_f = check_bounds(bounds)
    if lo_f == hi_f:
        raise ValueError("bounds must satisfy lower < upper")
    lo, hi = float(lo_f), float(hi_f)
    eps = check_epsilon(epsilon)
    if not isinstance(device_epsilon, str):
        raise TypeError("device_epsilon must be a decimal string, e.g. '0.5'")
    try:
        check_epsilon(float(device_epsilon))
    except ValueError:
        raise ValueError("device_epsilon must be a decimal > 0, got %r" % device_epsilon) from None
    if not is_real(quantum) or not quantum > 0:
        raise ValueError("quantum must be a number > 0")
    if not 0 < outlier_percent < 100:
        raise ValueError("outlier_percent must be in (0, 100)")
    if not 0 <= layer_margin < 0.5:
        raise ValueError("layer_margin must be in [0, 0.5)")
    g = _check_grid(grid)
    sh = shares or CalibrationShares()
    rng = check_rng(rng)
    if (accountant is None) != (dataset is None):
        raise ValueError("give both accountant and dataset, or neither")
    parts = [("relaxed sensitivity", eps * sh.sensitivity), ("centre", eps * sh.centre)]
    if sh.w_o > 0:
        parts.append(("w_O", eps * sh.w_o))
    if accountant is not None:
        assert dataset is not None    # checked with the accountant: both or neither
        accountant.check(dataset, eps)
    x = np.asarray(data() if callable(data) else data, dtype=float)
    if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] < 1:
        raise ValueError("calibration data must be a non-empty (n, d) matrix")
    x = np.clip(np.nan_to_num(x, nan=lo), lo, hi)
    n, d = x.shape
    rs = dp_relaxed_sensitivity(x, bounds=(lo, hi), epsilon=parts[0][1], outlier_percent=outlier_percent,
                                grid=g, rng=rng)
    centre = np.array([_mean(x[:, j], lo, hi, parts[1][1] / d, rng) for j in range(d)])
    w_o = 0.0
    if sh.w_o > 0:
        radii = np.linalg.norm(x - centre, axis=1)
        rmax = math.sqrt(d) * (hi - lo)
        share = outlier_percent / 100.0
        each = parts[2][1] / 2
        # ranks kept inside the layer: the margin asked for, and at least the rank error
        # scale of the exponential mechanism, 2 ln(grid)/epsilon (public: n is public)
        m = max(layer_margin * share, 2 * math.log(g) / float(each) / n)
        if 2 * m >= share:
            # The two quantiles would cross (top below bottom) and w_O come out 0: a width the
            # correction server cannot use, so refuse before anything is spent.
            need = math.floor(4 * math.log(g) / float(each) / share) + 1
            raise ValueError(
                "w_O: %d readings are too few for its share of epsilon (%s per radius quantile): the "
                "quantiles' rank error 2 ln(grid)/epsilon leaves no room inside the outer %g %% of the "
                "radii; give at least %d readings, a larger --epsilon or --outlier-percent, or a "
                "smaller --grid" % (n, float(each), outlier_percent, need))
        top = _quantile(radii, 1 - m, 0.0, rmax, g, each, rng)
        bottom = _quantile(radii, 1 - share + m, 0.0, rmax, g, each, rng)
        w_o = max(0.0, top - bottom)
    delta_q = tuple(max(1, int(round(r / quantum))) for r in rs)
    # Mode bands' width, half the border below the layer: post-processing, no budget.
    band_q = width_from_history([bottom / quantum], normal_radius(delta_q)) if sh.w_o > 0 else 0.0
    if accountant is not None:
        for name, e in parts:
            assert dataset is not None    # checked with the accountant: both or neither
            accountant.spend(dataset, e, query="calibrate: " + name)
    return DeviceProfile(quantum=float(quantum), domain=max(abs(lo), abs(hi)), delta_q=delta_q,
                         epsilon=device_epsilon, centre_q=tuple(int(c) for c in np.rint(centre / quantum)),
                         config_id=config_id, w_o_q=w_o / quantum, dbscan_eps=float(dbscan_eps),
                         dbscan_min_samples=int(dbscan_min_samples), band_width_q=band_q,
                         outlier_share=outlier_percent / 100.0)


def load_csv(path: str) -> np.ndarray:
    """Numeric CSV with a header row; a column named ``outlier`` (ground truth) is dropped."""
    import csv
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if len(rows) < 2:
        raise ValueError("%s: need a header row and at least one data row" % path)
    header = [h.strip() for h in rows[0]]
    cols = [i for i, h in enumerate(header) if h != "outlier"]
    try:
        return np.array([[float(r[i]) for i in cols] for r in rows[1:] if r], dtype=float)
    except (ValueError, IndexError) as e:
        raise ValueError("%s: not a numeric CSV (%s)" % (path, e)) from None
