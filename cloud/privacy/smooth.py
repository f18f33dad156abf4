"""Smooth upper bound of the local sensitivity of the outlier count (Okada et al. 2015, Theorems 4-6 and Algorithms 1-2).

    X = np.array([[0.0, 0.1], [0.2, 0.0], [5.0, 5.0], ...])       # N points, d = 1 or 2
    b = smooth_sensitivity(X, k=3, r=1.1, beta=mech.beta)
    mech.randomise(outlier_count(X, 3, 1.1), b.value)              # SmoothSensitivityGaussian

Definitions (Okada et al. 2015, definitions and Theorems 5-6). ``dist(x, y) = ||x - y|| / sqrt(d)`` (the normalised
distance), ``deg(x)`` = number of *other* records (by index) within ``r``, and x is
an outlier when ``deg(x) < k``. For ``t >= 0`` and ``m`` in ``{k, k-1}``,
``C_t(m)`` is the largest number of records with ``|deg - m| <= t`` that one closed
ball of radius ``r`` (centred anywhere) can hold. Theorem 6 bounds the local
sensitivity at distance ``t`` by ``U_t = min(N, max(C_t(k), C_t(k-1)) + t + 1)``
and the bound released is ``S(X) = max_{t=0..N} exp(-t beta) U_t``.

Why ``S`` is a ``beta``-smooth upper bound (Okada et al. 2015 do not prove it for Algorithm 2): ``U_0`` bounds
the local sensitivity (Theorem 5/6). Replacing one record moves every other degree
by at most one and removes at most one record from any fixed ball, so
``C_t(X) <= C_{t+1}(X') + 1`` and ``U_t(X) <= U_{t+1}(X')`` for neighbours ``X'``;
hence ``S(X) <= exp(beta) S(X')``. Algorithm 2's early stopping returns the same
maximum, so computing every ``t`` directly gives the paper's value.

``C_t`` is computed exactly, in polynomial time, instead of the ``2**|P|`` search
of Algorithm 1: an optimal ball can be moved until a record is on its boundary
and rotated about it until a second one is (or it is centred on a record). The
candidates are therefore the balls centred on each record and, in 2-D, the two
balls of radius ``r`` through each pair of records at most ``2r`` apart (in 1-D,
the intervals ``[x_i, x_i + 2r]``). That candidate family serves every ``t`` and
both ``m`` at once: per candidate, a histogram of ``|deg - m|`` over its members,
cumulated, gives its count for every ``t``. Cost ``O(N**3)`` in 2-D, ``O(N log N
+ N**2)`` in 1-D. Membership allows a relative ``1e-9`` on the radius, so records
exactly on a boundary count despite rounding; this can only raise the bound.

Above 400 records the pairs, the candidates and the ball members are found with
KD-trees (a binary search in 1-D) queried with a slightly larger radius, and then
filtered with the same exact tests, so the result is identical to the dense code. The
(candidate, member) pairs of a block of candidates come from one KD-tree-to-KD-tree
query, and a (candidate x level) histogram, cumulated along the levels, gives every
ball's count for every t at once (levels are at most the largest degree plus k, so the
histogram is narrow; when it would not be, the pairs are sorted by candidate and
level, and the j-th smallest level of a ball gives count j from that t on). The cost
then grows with the number of members per ball instead of ``N**3``: about 2.5 s for
10,000 records at the density of paper 4's Synthetic 1 (``bench/smooth.py``).
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from scipy.spatial import cKDTree

__all__ = ["SmoothBound", "degrees", "local_sensitivity_bounds", "outlier_count", "smooth_sensitivity"]

_TOL = 1e-9
_CHUNK = 4096
#: Up to this many records the dense O(N**2)-memory code runs; above it, KD-tree pruning.
_DENSE_MAX = 400
#: Relative margin of the KD-tree queries: they return a superset, filtered exactly afterwards.
_SLACK = 1e-6
_SPARSE_CHUNK = 20_000
#: A block's level histogram is used while it has at most this many bins per member pair
#: (it costs O(bins), the sort it replaces O(pairs log pairs)).
_HIST_FACTOR = 8
#: ... and at most this many bins (8 bytes each, twice: the histogram and its cumsum).
_HIST_MAX_BINS = 1 << 22


def _check_points(X: object) -> np.ndarray:
    a = np.asarray(X, dtype=np.float64)
    if a.ndim == 1:
        a = a[:, None]
    if a.ndim != 2 or a.shape[0] < 1:
        raise ValueError("X must be an (N, d) array with N >= 1")
    if a.shape[1] not in (1, 2):
        raise ValueError("only d = 1 and d = 2 have an exact method here; project X onto a 1- or 2-D subspace")
    if not np.all(np.isfinite(a)):
        raise ValueError("X must be finite")
    return a


def _check_kr(k: object, r: object) -> tuple[int, float]:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError("k must be an int")
    if k < 1:
        raise ValueError("k must be >= 1")
    if isinstance(r, bool) or not isinstance(r, (int, float, np.floating, np.integer)):
        raise TypeError("r must be a number")
    if not (r > 0 and math.isfinite(r)):
        raise ValueError("r must be a positive finite number")
    return int(k), float(r)


def degrees(X: object, r: float) -> np.ndarray:
    """Number of other records within normalised distance ``r`` of each record (duplicates count)."""
    a = _check_points(X)
    n = a.shape[0]
    lim = r * r * a.shape[1]
    if n <= _DENSE_MAX:
        d2 = ((a[:, None, :] - a[None, :, :]) ** 2).sum(axis=2)
        within = d2 <= lim
        deg: np.ndarray = within.sum(axis=1) - 1
        return deg
    # KD-tree pairs with a slightly larger radius, then the same exact test as above.
    pairs = cKDTree(a).query_pairs(math.sqrt(lim) * (1 + _SLACK), output_type="ndarray")
    i, j = pairs[:, 0], pairs[:, 1]
    keep = ((a[i] - a[j]) ** 2).sum(axis=1) <= lim
    deg = np.bincount(i[keep], minlength=n) + np.bincount(j[keep], minlength=n)
    return deg.astype(np.int64)


def outlier_count(X: object, k: int, r: float) -> int:
    """``q_count(X, k, r)``: records with fewer than ``k`` neighbours within ``r``."""
    k, r = _check_kr(k, r)
    return int(np.count_nonzero(degrees(X, r) < k))


def _ball_members_1d(x: np.ndarray, radius: float) -> np.ndarray:
    """Membership of the intervals ``[x_i, x_i + 2 radius]`` (rows) for the records (columns)."""
    lo = x - radius * _TOL
    hi = x + 2 * radius * (1 + _TOL)
    return (x[None, :] >= lo[:, None]) & (x[None, :] <= hi[:, None])


def _candidate_centres_2d(a: np.ndarray, radius: float) -> np.ndarray:
    """Records, and the centres of the two radius-``radius`` circles through each close pair."""
    if a.shape[0] <= _DENSE_MAX:
        i, j = np.triu_indices(a.shape[0], k=1)
    else:
        pairs = cKDTree(a).query_pairs(2 * radius * (1 + _TOL) * (1 + _SLACK), output_type="ndarray")
        i, j = pairs[:, 0], pairs[:, 1]
    diff = a[j] - a[i]
    dist2 = (diff**2).sum(axis=1)
    keep = (dist2 > 0) & (dist2 <= 4 * radius * radius * (1 + _TOL) ** 2)
    i, j, diff, dist2 = i[keep], j[keep], diff[keep], dist2[keep]
    mid = 0.5 * (a[i] + a[j])
    h = np.sqrt(np.maximum(radius * radius - dist2 / 4, 0.0) / dist2)
    normal = np.stack([-diff[:, 1], diff[:, 0]], axis=1) * h[:, None]
    return np.concatenate([a, mid + normal, mid - normal])


def _member_blocks(a: np.ndarray, radius: float) -> Iterable[tuple[np.ndarray, np.ndarray]]:
    """(candidate, record) index pairs of the candidate balls' members, in blocks of candidates.

    The same candidates and the same exact membership tests as the dense code; the
    KD-trees (2-D) or a binary search (1-D) only skip pairs that cannot pass them.
    Candidate indices lie in ``[s, s + _SPARSE_CHUNK)`` for the block starting at
    candidate ``s``, blocks in ascending order; within a block the pairs are in no
    particular order.
    """
    if a.shape[1] == 1:
        order = np.argsort(a[:, 0], kind="stable")
        x = a[order, 0]
        lo = np.searchsorted(x, x - radius * _TOL, side="left")
        hi = np.searchsorted(x, x + 2 * radius * (1 + _TOL), side="right")
        lengths = hi - lo
        ci = np.repeat(np.arange(x.size), lengths)
        pj = np.arange(ci.size) - np.repeat(np.cumsum(lengths) - lengths, lengths) + np.repeat(lo, lengths)
        cut = np.searchsorted(ci, np.arange(0, x.size + _SPARSE_CHUNK, _SPARSE_CHUNK))
        for lo_i, hi_i in zip(cut[:-1], cut[1:], strict=True):
            yield ci[lo_i:hi_i], order[pj[lo_i:hi_i]]
        return
    centres = _candidate_centres_2d(a, radius)
    limit = radius * radius * (1 + _TOL) ** 2
    tree = cKDTree(a)
    for s in range(0, centres.shape[0], _SPARSE_CHUNK):
        c = centres[s:s + _SPARSE_CHUNK]
        # Every (centre, record) pair within the slightly larger radius, built in C: no
        # per-centre Python lists.
        hits = cKDTree(c).sparse_distance_matrix(tree, math.sqrt(limit) * (1 + _SLACK), output_type="ndarray")
        ci, pj = hits["i"], hits["j"]
        # The dense code's test, spelt out per axis (a sum of two terms rounds the same).
        dx = c[ci, 0] - a[pj, 0]
        dy = c[ci, 1] - a[pj, 1]
        keep = dx * dx + dy * dy <= limit
        yield ci[keep] + s, pj[keep]


def _best_counts_sparse(a: np.ndarray, levels: list[np.ndarray], radius: float) -> list[np.ndarray]:
    """``_best_counts`` from member pairs, with levels capped at ``N``.

    Per block of candidates, a (candidate x level) histogram cumulated along the levels
    gives each ball's count for every t, as in the dense code; its width is the largest
    level present plus one, so it is narrow when degrees are (the usual case). When
    it would be wide, the pairs are sorted by (candidate, level) instead: in a ball, the
    j-th smallest level ``l`` gives count j for t >= l.
    """
    n = a.shape[0]
    capped = [np.minimum(lev, n) for lev in levels]
    widths = [int(lev.max()) + 1 for lev in capped]
    best = [np.zeros(n + 1, dtype=np.int64) for _ in levels]
    for ci, pj in _member_blocks(a, radius):
        if ci.size == 0:
            continue
        first = int(ci.min())
        rows = int(ci.max()) - first + 1
        ci = ci - first
        for b, lev, width in zip(best, capped, widths, strict=True):
            lv = lev[pj]
            if rows * width <= min(_HIST_FACTOR * ci.size, _HIST_MAX_BINS):
                hist = np.bincount(ci * width + lv, minlength=rows * width)
                cum = np.cumsum(hist.reshape(rows, width), axis=1)
                np.maximum(b[:width], cum.max(axis=0), out=b[:width])
                continue
            key = np.sort(ci * width + lv)
            c_s, l_s = np.divmod(key, width)
            start = np.flatnonzero(np.r_[True, c_s[1:] != c_s[:-1]])
            rank = np.arange(c_s.size) - np.repeat(start, np.diff(np.r_[start, c_s.size])) + 1
            np.maximum.at(b, l_s, rank)
    return [np.maximum.accumulate(b) for b in best]


def _best_counts(a: np.ndarray, levels: list[np.ndarray], radius: float) -> list[np.ndarray]:
    """For each level vector: ``best[t]`` = most records with level <= t in one candidate ball."""
    n = a.shape[0]
    if n > _DENSE_MAX:
        return _best_counts_sparse(a, levels, radius)
    width = n + 1
    best = [np.zeros(width, dtype=np.int64) for _ in levels]
    if a.shape[1] == 1:
        order = np.argsort(a[:, 0], kind="stable")
        blocks: Iterable[tuple[np.ndarray, list[np.ndarray]]] = [
            (_ball_members_1d(a[order, 0], radius), [lev[order] for lev in levels])]
    else:
        centres = _candidate_centres_2d(a, radius)
        limit = radius * radius * (1 + _TOL) ** 2
        blocks = (
            ((((centres[s:s + _CHUNK, None, :] - a[None, :, :]) ** 2).sum(axis=2) <= limit), levels)
            for s in range(0, centres.shape[0], _CHUNK)
        )
    for member, lv in blocks:
        rows = member.shape[0]
        ci, pj = np.nonzero(member)
        for b, lev in zip(best, lv, strict=True):
            hist = np.bincount(ci * width + np.minimum(lev[pj], n), minlength=rows * width)
            cum = np.cumsum(hist.reshape(rows, width), axis=1)
            np.maximum(b, cum.max(axis=0), out=b)
    return best


def local_sensitivity_bounds(X: object, k: int, r: float) -> np.ndarray:
    """``U_t`` for ``t = 0..N``: Theorem 6's bound on the local sensitivity at distance ``t``.

    Returns
    -------
    numpy.ndarray
        int64 array of length ``N + 1``; ``U_0`` bounds the local sensitivity at ``X``.
    """
    a = _check_points(X)
    k, r = _check_kr(k, r)
    n = a.shape[0]
    deg = degrees(a, r)
    radius = r * math.sqrt(a.shape[1])
    best_k, best_k1 = _best_counts(a, [np.abs(deg - k), np.abs(deg - (k - 1))], radius)
    t = np.arange(n + 1)
    u: np.ndarray = np.minimum(n, np.maximum(best_k, best_k1) + t + 1)
    return u


@dataclass(frozen=True)
class SmoothBound:
    """A ``beta``-smooth upper bound of the local sensitivity of ``q_count``.

    Attributes
    ----------
    value : float
        ``S(X) = max_t exp(-t beta) U_t``.
    t : int
        The distance ``t`` attaining the maximum.
    beta : float
        The smoothness parameter used.
    bounds : tuple of int
        ``U_0 .. U_N``.
    """

    value: float
    t: int
    beta: float
    bounds: tuple[int, ...]

    def __post_init__(self) -> None:
        if not (self.value >= 1 and self.beta > 0 and 0 <= self.t < len(self.bounds)):
            raise ValueError("inconsistent smooth bound")


def smooth_sensitivity(X: object, k: int, r: float, beta: float) -> SmoothBound:
    """Okada et al.'s smooth upper bound of the local sensitivity of ``q_count(X, k, r)``.

    Parameters
    ----------
    X : array_like, shape (N,) or (N, d), d in {1, 2}
        The records (project onto a subspace first for ``q_count(..., S)``).
    k : int
        Outliers have fewer than ``k`` neighbours, ``k >= 1``.
    r : float
        Neighbourhood radius in the normalised distance, ``> 0``.
    beta : float
        Smoothness, ``> 0``: the ``beta`` of the mechanism that will use the bound
        (``SmoothSensitivityGaussian.beta``).

    Returns
    -------
    SmoothBound

    Notes
    -----
    Sensitivity: replace-one neighbours (N fixed), as in the paper. ``S(X) >= 1``
    always (``U_t >= t + 1``). Complexity ``O(N**3)`` time in 2-D in the worst case
    (every record near every other); above 400 records, time in proportion to the
    (candidate ball, member) pairs, memory to those of one block of candidates.

    References
    ----------
    R. Okada, K. Fukuchi, K. Kakizaki, J. Sakuma, "Differentially Private Analysis
    of Outliers", ECML-PKDD 2015, Theorems 5-6, Algorithms 1-2.
    K. Nissim, S. Raskhodnikova, A. Smith, "Smooth Sensitivity and Sampling in
    Private Data Analysis", STOC 2007 (smooth upper bounds).
    """
    if isinstance(beta, bool) or not isinstance(beta, (int, float, np.floating)):
        raise TypeError("beta must be a number")
    if not (beta > 0 and math.isfinite(beta)):
        raise ValueError("beta must be a positive finite number")
    u = local_sensitivity_bounds(X, k, r)
    scaled = np.exp(-float(beta) * np.arange(u.size)) * u
    t = int(np.argmax(scaled))
    return SmoothBound(float(scaled[t]), t, float(beta), tuple(int(v) for v in u))
