"""DP count of distance-based outliers, ``q_count(X, k, r, S)`` (Okada et al. 2015, Theorems 4-6 and Algorithms 1-2).

    rel = dp_outlier_count(X, k=3, r=1.1, epsilon=0.5, delta=0.01,
                           method="smooth", accountant=acct, dataset="sensors")
    rel.value                       # the released, noisy count

Definitions (Okada et al. 2015, definitions): replace-one neighbours (N fixed); the normalised subspace
distance ``dist_S(x, y) = sqrt(sum_{i in S} (x_i - y_i)**2 / |S|)``; ``deg(x)`` counts
the *other* records (by index, duplicates included) within ``r``; x is an outlier when
``deg(x) < k``.

Two mechanisms, both (epsilon, delta)-DP by default:

* ``method="global"``: Gaussian with the global sensitivity of Theorem 4. The
  guarantee needs an *upper* bound, ``GS <= min(N, k K_d + 1)`` with the kissing
  number ``K_d`` (``gs="upper"``, the default). ``gs="lower"`` uses the lower bound
  ``min(N, 2 d k + 1)``, the paper's "Global" baseline; it is exact for ``d = 1`` and
  **not a DP guarantee for d >= 2** (the true GS can be larger; for d = 2 it is
  5k + 1 empirically, Okada et al. 2015, Theorem 4).
* ``method="smooth"``: the NRS Gaussian ``q + (S(X)/alpha) Z`` with the beta-smooth
  bound ``S`` of :mod:`dpsense.cloud.privacy.smooth` (exact ball counts for ``|S| <= 2``).
  For ``|S| > 2`` the ball count ``C_t`` is replaced by the size of the whole level
  set ``|{x : |deg(x) - m| <= t}|``, which is larger, still a bound by Theorem 6,
  and still beta-smooth (each other degree moves by at most 1 and one record
  changes, so ``|P_t(X)| <= |P_{t+1}(X')| + 1``); it is looser than the paper's.
  ``paper_mode=True`` uses the printed calibration (beta = epsilon, sigma =
  S sqrt(2 ln(2/delta))/epsilon) and is **NOT differentially private** (docs/paper4.md);
  it cannot be charged to an accountant.

Order of work (as ``queries.py``): validate the parameters, ``accountant.check``,
compute, randomise, ``accountant.spend``, return.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

import numpy as np

from . import smooth
from .accountant import BudgetAccountant
from .mechanisms import Gaussian, SmoothSensitivityGaussian
from .validation import Rng, check_delta, check_epsilon

__all__ = ["CountRelease", "KISSING_UPPER", "dp_outlier_count", "global_sensitivity", "kissing_upper",
           "level_set_bounds", "project", "smooth_bound", "subspace_degrees", "subspace_outlier_count"]

#: Kissing numbers: exact for d = 1, 2, 3, 4, 8, 24; for the others a published upper bound
#: (Mittelmann-Vallentin 2010 and earlier SDP bounds), which is all a DP guarantee needs.
KISSING_UPPER = {1: 2, 2: 6, 3: 12, 4: 24, 5: 44, 6: 78, 7: 134, 8: 240, 9: 364, 10: 554, 24: 196560}

NOT_DP = "NOT differentially private (paper_mode: printed calibration, docs/paper4.md)"


def kissing_upper(d: int) -> int:
    """An upper bound on the kissing number ``K_d``.

    From :data:`KISSING_UPPER`, else the volume bound ``3**d - 1`` (unit balls touching
    a central one lie in a ball of radius 3 and are disjoint from it and each other).
    """
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 1:
        raise ValueError("d must be an int >= 1")
    return KISSING_UPPER.get(int(d), 3 ** int(d) - 1)


def global_sensitivity(d: int, k: int, n: int, bound: Literal["upper", "lower"] = "upper") -> int:
    """Theorem 4: ``min(N, 2dk+1) <= GS_{q_count,d}(k) <= min(N, k K_d + 1)``.

    ``bound="upper"`` is what a DP guarantee needs; ``"lower"`` is the paper's
    baseline (exact, ``2k + 1``, only for ``d = 1``).
    """
    _check_k(k)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError("n must be an int >= 1")
    if bound == "upper":
        return int(min(n, k * kissing_upper(d) + 1))
    if bound == "lower":
        kissing_upper(d)
        return int(min(n, 2 * d * k + 1))
    raise ValueError("bound must be 'upper' or 'lower', got %r" % (bound,))


def _check_k(k: object) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError("k must be an int")
    if k < 1:
        raise ValueError("k must be >= 1")
    return int(k)


def _check_r(r: object) -> float:
    if isinstance(r, bool) or not isinstance(r, (int, float, np.floating, np.integer)):
        raise TypeError("r must be a number")
    if not (r > 0 and math.isfinite(r)):
        raise ValueError("r must be a positive finite number")
    return float(r)


def _check_data(X: object) -> np.ndarray:
    a = np.asarray(X, dtype=np.float64)
    if a.ndim == 1:
        a = a[:, None]
    if a.ndim != 2 or a.shape[0] < 1 or a.shape[1] < 1:
        raise ValueError("X must be an (N, d) array with N >= 1")
    if not np.all(np.isfinite(a)):
        raise ValueError("X must be finite")
    return a


def _check_subspace(subspace: object, d: int) -> tuple[int, ...]:
    if subspace is None:
        return tuple(range(d))
    if isinstance(subspace, (str, bytes)) or not isinstance(subspace, Iterable):
        raise TypeError("subspace must be a sequence of column indices")
    cols = tuple(subspace)
    if not cols or any(isinstance(c, bool) or not isinstance(c, (int, np.integer)) for c in cols):
        raise ValueError("subspace must be a non-empty sequence of int column indices")
    if len(set(cols)) != len(cols) or min(cols) < 0 or max(cols) >= d:
        raise ValueError("subspace must hold distinct column indices in [0, %d)" % d)
    return tuple(int(c) for c in cols)


def project(X: object, subspace: object = None) -> np.ndarray:
    """The columns ``subspace`` of ``X`` (all when None), validated, as float64."""
    a = _check_data(X)
    return a[:, list(_check_subspace(subspace, a.shape[1]))]


def subspace_degrees(Xs: np.ndarray, r: float) -> np.ndarray:
    """``deg(x)`` in the normalised metric of the (already projected) ``Xs``.

    Same arithmetic as :func:`dpsense.cloud.privacy.smooth.degrees` for every dimension,
    so counts and bounds agree on boundary cases; rows in chunks to bound memory.
    """
    a = _check_data(Xs)
    n, d = a.shape
    if d <= 2:
        return smooth.degrees(a, r)
    lim = r * r * d
    deg = np.empty(n, dtype=np.int64)
    step = max(1, 4_000_000 // max(1, n * d))
    for s in range(0, n, step):
        d2 = ((a[s:s + step, None, :] - a[None, :, :]) ** 2).sum(axis=2)
        deg[s:s + step] = (d2 <= lim).sum(axis=1) - 1
    return deg


def subspace_outlier_count(X: object, k: int, r: float, subspace: object = None) -> int:
    """``q_count(X, k, r, S)``: records with fewer than ``k`` neighbours in subspace ``S``."""
    k, r = _check_k(k), _check_r(r)
    return int(np.count_nonzero(subspace_degrees(project(X, subspace), r) < k))


def level_set_bounds(Xs: np.ndarray, k: int, r: float) -> np.ndarray:
    """``U_t = min(N, max(|P_t(k)|, |P_t(k-1)|) + t + 1)``, ``P_t(m) = {x : |deg(x) - m| <= t}``.

    A valid and beta-smooth (looser) replacement of Theorem 6's ball counts, for any
    dimension (see the module docstring).
    """
    k, r = _check_k(k), _check_r(r)
    deg = subspace_degrees(Xs, r)
    n = deg.size
    t = np.arange(n + 1)
    out = np.zeros(n + 1, dtype=np.int64)
    for m in (k, k - 1):
        lev = np.minimum(np.abs(deg - m), n)
        cum = np.cumsum(np.bincount(lev, minlength=n + 1))
        np.maximum(out, cum, out=out)
    res: np.ndarray = np.minimum(n, out + t + 1)
    return res


def smooth_bound(Xs: np.ndarray, k: int, r: float, beta: float) -> tuple[float, str]:
    """A beta-smooth upper bound of the local sensitivity of ``q_count`` on projected ``Xs``.

    Returns ``(S, kind)``, kind ``"exact ball counts"`` (|S| <= 2, Theorem 6) or
    ``"level sets"`` (|S| > 2, the looser bound of :func:`level_set_bounds`).
    """
    a = _check_data(Xs)
    if a.shape[1] <= 2:
        return smooth.smooth_sensitivity(a, k, r, beta).value, "exact ball counts"
    if not (beta > 0 and math.isfinite(beta)):
        raise ValueError("beta must be a positive finite number")
    u = level_set_bounds(a, k, r)
    return float(np.max(np.exp(-beta * np.arange(u.size)) * u)), "level sets"


@dataclass(frozen=True)
class CountRelease:
    """A released outlier count and what it guarantees.

    ``value`` is the mechanism's output (unbiased, may fall outside ``[0, n]``); ``clamped``
    is it post-processed into the valid range ``[0, n]`` (``n`` is public under replace-one
    neighbours), which is never further from the true count. ``sigma`` is given for
    ``method="global"`` only: for the smooth mechanism the noise scale ``S(X)/alpha`` depends
    on the data and releasing it is not private. ``sigma_bound`` is a public upper bound of
    the noise's standard deviation: ``sigma`` itself (global), or the scale at ``S = n``
    (smooth: every smooth bound of a count is at most ``n``).
    """

    value: float
    method: str
    subspace: tuple[int, ...]
    epsilon: Fraction
    delta: Fraction
    guarantee: str
    sigma: float | None = None
    n: int = 0
    sigma_bound: float | None = None

    @property
    def clamped(self) -> float:
        """``value`` cut to ``[0, n]``: post-processing, no further privacy cost."""
        return float(min(max(self.value, 0.0), float(self.n)))


def dp_outlier_count(X: object, *, k: int, r: float, epsilon: object, delta: object,
                     subspace: object = None, method: Literal["smooth", "global"] = "smooth",
                     gs: Literal["upper", "lower"] = "upper", calibration: Literal["zcdp", "classical"] = "zcdp",
                     paper_mode: bool = False, accountant: BudgetAccountant | None = None,
                     dataset: str | None = None, rng: Rng | None = None,
                     query: str = "outlier count") -> CountRelease:
    """Release ``q_count(X, k, r, S)`` with the global or the smooth Gaussian mechanism.

    Parameters
    ----------
    X : array_like, shape (N, d)
        The records (held by the curator).
    k : int
        Outliers have fewer than ``k`` neighbours, ``k >= 1``.
    r : float
        Radius in the normalised subspace distance, ``> 0``.
    epsilon, delta : float
        Privacy parameters, ``epsilon > 0``, ``0 < delta < 1``.
    subspace : sequence of int, optional
        Column indices ``S``; default all columns.
    method : {"smooth", "global"}
        Smooth-sensitivity Gaussian (NRS constants) or Gaussian with Theorem 4's GS.
    gs : {"upper", "lower"}
        Global method only. ``"lower"`` is the paper's baseline and NOT a DP
        guarantee for ``|S| >= 2``; it cannot be charged.
    calibration : {"zcdp", "classical"}
        Global method only, see :class:`~dpsense.cloud.privacy.mechanisms.Gaussian`.
    paper_mode : bool
        Smooth method only: the printed calibration, NOT differentially private;
        refused when an accountant is given.
    accountant, dataset : optional
        When given, the release is checked before any computation and charged after.
    rng : Rng, optional
        Random source; default ``secrets.SystemRandom()``.

    Returns
    -------
    CountRelease

    Notes
    -----
    Replace-one neighbours. Guarantee: (epsilon, delta)-DP for ``method="global",
    gs="upper"``; (epsilon, delta + slack)-DP for ``method="smooth"`` (slack < 1e-12,
    see ``SmoothSensitivityGaussian``). Time ``O(N**3)`` for ``|S| = 2`` (smooth),
    ``O(N**2 |S|)`` otherwise.

    References
    ----------
    R. Okada, K. Fukuchi, K. Kakizaki, J. Sakuma, "Differentially Private Analysis
    of Outliers", ECML-PKDD 2015, Theorems 1, 2, 4-6.
    """
    a = _check_data(X)
    cols = _check_subspace(subspace, a.shape[1])
    k, r = _check_k(k), _check_r(r)
    check_epsilon(epsilon)
    check_delta(delta, allow_zero=False)
    if method not in ("smooth", "global"):
        raise ValueError("method must be 'smooth' or 'global', got %r" % (method,))
    if gs not in ("upper", "lower"):
        raise ValueError("gs must be 'upper' or 'lower', got %r" % (gs,))
    if not isinstance(paper_mode, bool):
        raise TypeError("paper_mode must be a bool")
    if method == "global" and paper_mode:
        raise ValueError("paper_mode applies to method='smooth' only")
    if (accountant is None) != (dataset is None):
        raise ValueError("give both accountant and dataset, or neither")
    n, dim = a.shape[0], len(cols)
    sound_gs = gs == "upper" or dim == 1
    if accountant is not None and (paper_mode or not sound_gs):
        raise ValueError("this release is %s and cannot be charged to a budget"
                         % (NOT_DP if paper_mode else "NOT differentially private (GS lower bound, |S| >= 2)"))
    if method == "global":
        sens = global_sensitivity(dim, k, n, gs)
        gmech = Gaussian(epsilon=epsilon, delta=delta, sensitivity=sens, calibration=calibration,
                         granularity=1, values_on_grid=True, rng=rng)
        eps, dlt = gmech.privacy_cost()
        guarantee = ("(%s, %s)-DP, Gaussian, GS = %d (Theorem 4 %s bound)" % (eps, dlt, sens, gs)
                     if sound_gs else "NOT differentially private (GS lower bound %d for |S| = %d)" % (sens, dim))
        if accountant is not None:
            assert dataset is not None    # checked with the accountant: both or neither
            accountant.check(dataset, eps, dlt)
        q = int(np.count_nonzero(subspace_degrees(a[:, list(cols)], r) < k))
        value = gmech.randomise(q)
        if accountant is not None:
            assert dataset is not None    # checked with the accountant: both or neither
            accountant.spend(dataset, eps, dlt, query=query)
        return CountRelease(value, "global", cols, eps, dlt, guarantee, gmech.sigma, n, gmech.sigma)
    smech = SmoothSensitivityGaussian(epsilon=epsilon, delta=delta, paper_mode=paper_mode, rng=rng)
    if paper_mode:
        eps, dlt = Fraction(smech.epsilon), Fraction(smech.delta)
        guarantee = NOT_DP
    else:
        eps, dlt = smech.privacy_cost()
        guarantee = "(%s, %.6g)-DP, smooth-sensitivity Gaussian (NRS)" % (eps, float(dlt))
    if accountant is not None:
        assert dataset is not None    # checked with the accountant: both or neither
        accountant.check(dataset, eps, dlt)
    xs = a[:, list(cols)]
    q = int(np.count_nonzero(subspace_degrees(xs, r) < k))
    s, _ = smooth_bound(xs, k, r, smech.beta)
    value = smech.randomise(q, s)
    if accountant is not None:
        assert dataset is not None    # checked with the accountant: both or neither
        accountant.spend(dataset, eps, dlt, query=query)
    return CountRelease(value, "smooth", cols, eps, dlt, guarantee, None, n, smech.sigma(n))
