"""Data families that a fleet produces and paper 1's radial model does not all fit, with ground truth.

    data = family("elongated", n=5_000, seed=7)     # Labelled(x, outlier), x in scaled units
    for name in FAMILIES: ...

Every generator draws ``n`` points in R^2 in the unit of paper 1's generator (normal readings
with a spread of about 3 per column), ``round(outlier_share * n)`` of them constructed outliers
(``outlier`` True). Paper 1's radial model (cloud/correction/bands.py, rules.py) assumes the
normal readings within a normal radius rho of one centre and the outliers beyond it:

* ``paper1``: paper 1's own data (datasets.paper1_synthetic, separation 220): fits;
* ``drift``: the same with a slow drift: the window's readings move by ``drift`` in both columns
  from its first row to its last (sensor ageing within one window): fits, with a wider core;
* ``radial_groups``: two such groups, centres 30 apart on one axis, in one window (two sites
  in one device group): the pooled centre lies between them, so the cores sit off it;
* ``elongated``: normals along a line 120 long (a sensor sweeping its range), outliers 12-25
  off the line: most outliers are nearer the centre than the line's ends;
* ``two_clusters``: two cores 80 apart, outliers scattered between them, around the centre;
* ``ring``: normals on a ring of radius 40, outliers inside it: every outlier is nearer the
  centre than every normal reading.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from dpsense.cloud.sim.datasets import Labelled, paper1_synthetic

SD = 3.0


def _check(n: int, outlier_share: float) -> int:
    if n < 20:
        raise ValueError("n must be >= 20")
    if not 0 < outlier_share < 0.5:
        raise ValueError("outlier_share must be in (0, 0.5)")
    return int(round(outlier_share * n))


def _shuffle(rng: np.random.Generator, normal: np.ndarray, outliers: np.ndarray) -> Labelled:
    """Normals and outliers in one random arrival order."""
    x = np.vstack([normal, outliers])
    truth = np.r_[np.zeros(len(normal), dtype=bool), np.ones(len(outliers), dtype=bool)]
    order = rng.permutation(len(x))
    return Labelled(x=x[order], outlier=truth[order])


def paper1(n: int, seed: int, outlier_share: float = 0.10) -> Labelled:
    _check(n, outlier_share)
    return paper1_synthetic(n, 220.0, "scale", outlier_share, SD, seed)


def drift(n: int, seed: int, outlier_share: float = 0.10, shift: float = 3.0) -> Labelled:
    """Paper 1's data, each row moved by ``shift * i / n`` in both columns (i: its arrival order)."""
    d = paper1(n, seed, outlier_share)
    ramp = shift * np.arange(n, dtype=float) / n
    return Labelled(x=d.x + ramp[:, None], outlier=d.outlier)


def radial_groups(n: int, seed: int, outlier_share: float = 0.10, offset: float = 30.0) -> Labelled:
    """Two paper-1 groups of n/2 each (separation 220), centred at (-offset/2, 0) and (offset/2, 0)."""
    _check(n, outlier_share)
    rng = np.random.default_rng([seed, 4])
    half = n // 2
    a = paper1_synthetic(half, 220.0, "scale", outlier_share, SD, seed)
    b = paper1_synthetic(n - half, 220.0, "scale", outlier_share, SD, seed + 50_000)
    x = np.vstack([a.x - [offset / 2, 0.0], b.x + [offset / 2, 0.0]])
    truth = np.r_[a.outlier, b.outlier]
    order = rng.permutation(n)
    return Labelled(x=x[order], outlier=truth[order])


def elongated(n: int, seed: int, outlier_share: float = 0.10) -> Labelled:
    k = _check(n, outlier_share)
    rng = np.random.default_rng([seed, 1])
    normal = np.c_[rng.uniform(-60.0, 60.0, n - k), rng.normal(0.0, 1.0, n - k)]
    side = rng.choice([-1.0, 1.0], k)
    out = np.c_[rng.uniform(-50.0, 50.0, k), side * rng.uniform(12.0, 25.0, k)]
    return _shuffle(rng, normal, out)


def two_clusters(n: int, seed: int, outlier_share: float = 0.10) -> Labelled:
    k = _check(n, outlier_share)
    rng = np.random.default_rng([seed, 2])
    m = n - k
    normal = rng.normal(0.0, SD, (m, 2)) + np.where(rng.random(m) < 0.5, -40.0, 40.0)[:, None] * [1.0, 0.0]
    out = np.c_[rng.uniform(-25.0, 25.0, k), rng.uniform(-20.0, 20.0, k)]
    return _shuffle(rng, normal, out)


def ring(n: int, seed: int, outlier_share: float = 0.10) -> Labelled:
    k = _check(n, outlier_share)
    rng = np.random.default_rng([seed, 3])
    m = n - k
    angle = rng.uniform(0.0, 2 * np.pi, m)
    radius = 40.0 + rng.normal(0.0, 1.0, m)
    normal = np.c_[radius * np.cos(angle), radius * np.sin(angle)]
    a2 = rng.uniform(0.0, 2 * np.pi, k)
    r2 = 25.0 * np.sqrt(rng.random(k))
    out = np.c_[r2 * np.cos(a2), r2 * np.sin(a2)]
    return _shuffle(rng, normal, out)


FAMILIES: dict[str, Callable[..., Labelled]] = {
    "paper1": paper1, "drift": drift, "radial_groups": radial_groups, "elongated": elongated,
    "two_clusters": two_clusters, "ring": ring,
}


def family(name: str, n: int, seed: int, outlier_share: float = 0.10) -> Labelled:
    """``n`` points of family ``name`` (one of ``FAMILIES``) from ``seed``."""
    if name not in FAMILIES:
        raise ValueError("family must be one of %s, got %r" % (sorted(FAMILIES), name))
    return FAMILIES[name](n, seed, outlier_share)
