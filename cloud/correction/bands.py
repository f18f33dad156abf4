"""Correction mode ``bands``: radial bands from the analyst, provable outliers from the correction server.

    bands = make_bands(dist, width)                        # A: index sets, one per band
    lower = lower_edges(n, bands)                          # CS: each row's band edge
    r = band_candidates(d_diff, lower, normal_radius)      # CS: the candidate rows
    res = run_bands(d_diff, dist, width, normal_radius)    # both, in-process

The analyst A measures ``dist[i] = |x'_i - c|`` from the provisioned centre c and cuts
[0, inf) into bands ``[e_k, e_k + w)`` of one width w. It sends the lower edge of every
non-empty band and the positions of its rows: index sets like the paper's I_L2 and I_L3
(Böhler et al. 2017, Sect. 6, line 4), only more of them. For a row in the band with lower edge e the
correction server CS knows ``e <= |x' - c| < e + w`` and, because ``d_diff`` is the
difference of two distances each rounded to a quantum, ``|d_diff - (|x' - c| - |x - c|)| <= 1``:

    e - d_diff - 1  <=  |x - c|  <=  e + w - d_diff + 1.

CS returns R = {i : e(i) - d_diff[i] - 1 > rho}, the rows whose raw distance from c
provably exceeds the normal radius rho (half the diagonal of the relaxed-sensitivity
box: every reading inside the box is within rho of c).

Guarantee, for every window and any noise (tests/cloud/test_never_worse.py):

* no row within rho of c is ever a candidate;
* every row with a correction record farther than ``rho + w + 2`` from c is one.

So R differs from O' only by adding rows beyond rho and dropping rows within
``rho + w + 2``. Under the paper's outlier model (a core within rho, an empty border
layer, outliers beyond it) with a border wider than ``w + 2``, R is exactly the set of
outliers and never worse than O' in recall or precision; the width w is the analyst's
choice, and also all that CS learns about a row's raw distance (it lies in an interval
of width ``w + 2``). Rows without a correction record are never decided on: CS
returns them as unknown and A keeps its own verdict (O') for them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

_EMPTY = np.empty(0, dtype=np.intp)


@dataclass(frozen=True, eq=False)
class Bands:
    """Lower edges of the non-empty bands (ascending), the rows of each, and the width."""

    edges: np.ndarray
    members: list[np.ndarray]
    width: float


@dataclass(frozen=True, eq=False)
class BandsResult:
    """One in-process bands round: A's bands, each row's lower edge, and R."""

    bands: Bands
    lower: np.ndarray
    r: np.ndarray


def check_width(width: float) -> float:
    w = float(width)
    if not math.isfinite(w) or w <= 0:
        raise ValueError("band width must be finite and > 0, got %r" % (width,))
    return w


def width_from_history(outlier_radii: object, normal_radius: float) -> float:
    """Half the border layer seen in history: ``(min outlier radius - rho) / 2``, 0 if none.

    Half leaves a margin for windows whose border is narrower than the reference's; the
    guarantee needs the border wider than ``w + 2``.
    """
    r = np.asarray(outlier_radii, dtype=float)
    if r.size == 0:
        return 0.0
    return max(0.0, (float(r.min()) - float(normal_radius)) / 2.0)


def make_bands(dist: object, width: float) -> Bands:
    """A: rows grouped by ``floor(dist / width)``; only non-empty bands are listed."""
    w = check_width(width)
    d = np.asarray(dist, dtype=float)
    if d.ndim != 1 or not np.isfinite(d).all() or (d < 0).any():
        raise ValueError("dist must be a 1-D array of finite distances >= 0")
    k = np.floor(d / w).astype(np.int64)
    # A stable sort keeps each band's rows in ascending position order.
    order = np.argsort(k, kind="stable").astype(np.intp)
    ks = k[order]
    if not ks.size:
        return Bands(edges=np.empty(0), members=[], width=w)
    starts = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]])
    return Bands(edges=ks[starts].astype(float) * w, members=np.split(order, starts[1:]), width=w)


def lower_edges(n: int, bands: Bands) -> np.ndarray:
    """CS: each row's band lower edge, NaN for a row in no band.

    Raises ``ValueError`` for a row outside ``[0, n)``, a row in two bands, edges that
    are not finite and ascending, or a band count that does not match the edges.
    """
    edges = np.asarray(bands.edges, dtype=float)
    if edges.ndim != 1 or len(bands.members) != edges.size:
        raise ValueError("bands: %d edges for %d index sets" % (edges.size, len(bands.members)))
    if not np.isfinite(edges).all() or (edges[1:] <= edges[:-1]).any():
        raise ValueError("bands: edges must be finite and strictly ascending")
    check_width(bands.width)
    lower = np.full(n, np.nan)
    if not edges.size:
        return lower
    rows = np.concatenate([np.asarray(r, dtype=np.intp).ravel() for r in bands.members])
    if rows.size and (rows.min() < 0 or rows.max() >= n):
        raise ValueError("bands: row positions outside [0, %d)" % n)
    if rows.size and np.bincount(rows, minlength=n).max() > 1:
        raise ValueError("bands: a row is in more than one band")
    lower[rows] = np.repeat(edges, [len(r) for r in bands.members])
    return lower


def band_candidates(d_diff: object, lower: np.ndarray, normal_radius: float) -> np.ndarray:
    """CS: positions of the rows whose raw distance provably exceeds ``normal_radius``."""
    d = np.asarray(d_diff, dtype=float)
    if d.shape != lower.shape:
        raise ValueError("d_diff has %d rows but the bands cover %d" % (d.size, lower.size))
    rho = float(normal_radius)
    if not math.isfinite(rho) or rho <= 0:
        raise ValueError("normal_radius must be finite and > 0, got %r" % (normal_radius,))
    with np.errstate(invalid="ignore"):
        return np.flatnonzero(lower - d - 1.0 > rho)


def run_bands(d_diff: object, dist: object, width: float, normal_radius: float) -> BandsResult:
    """Both parties in one process (experiments, benchmarks).

    Parameters
    ----------
    d_diff : array of float, shape (n,)
        Distance differences (CS's input), in the unit of ``dist``.
    dist : array of float, shape (n,)
        ``|x'_i - c|`` from the provisioned centre (A's input).
    width : float
        Band width w, ``> 0``.
    normal_radius : float
        rho, ``> 0``.

    Returns
    -------
    BandsResult

    Notes
    -----
    A sort of the band numbers (A) and O(n) passes (CS).
    """
    d = np.asarray(d_diff, dtype=float)
    bands = make_bands(dist, width)
    lower = lower_edges(d.size, bands)
    return BandsResult(bands=bands, lower=lower, r=band_candidates(d, lower, normal_radius))
