"""Data sets for experiments and demos: the paper-1 synthetic generator (SPEC 1.7)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SHAPES = ("scale", "shift")


@dataclass(frozen=True)
class Labelled:
    """Points with ground-truth outlier labels (True = constructed outlier)."""

    x: np.ndarray
    outlier: np.ndarray


def paper1_synthetic(n: int = 100_000, separation: float = 220.0, shape: str = "scale",
                     outlier_share: float = 0.10, sd: float = 3.0, seed: int = 0) -> Labelled:
    """Böhler et al. 2017, Sect. 7: i.i.d. N(0, sd^2) points in R^2, the share farthest
    from the centre made outliers and pushed out so the gap to the core is ``separation``.

    ``shape="scale"`` multiplies the outliers by ``(r90 + sep) / r90`` (a wide, sparse
    layer; SPEC's recommended reading), ``shape="shift"`` moves each one radially by
    ``sep`` (a dense ring of the original width).
    """
    if n < 10:
        raise ValueError("n must be >= 10")
    if separation < 0:
        raise ValueError("separation must be >= 0")
    if shape not in SHAPES:
        raise ValueError("shape must be one of %s" % (SHAPES,))
    if not 0 < outlier_share < 1:
        raise ValueError("outlier_share must be in (0, 1)")
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, sd, size=(n, 2))
    r = np.linalg.norm(x, axis=1)
    k = int(round(outlier_share * n))
    idx = np.argsort(r)[n - k:]
    outlier = np.zeros(n, dtype=bool)
    outlier[idx] = True
    r90 = float(np.max(r[~outlier]))
    if shape == "scale":
        x[idx] *= (r90 + separation) / r90
    else:
        x[idx] *= ((r[idx] + separation) / r[idx])[:, None]
    return Labelled(x=x, outlier=outlier)


def relaxed_sensitivity(reference: np.ndarray, outlier_percent: float = 10.0) -> np.ndarray:
    """SPEC 1.3: per column, the (100 - p/2)th minus the (p/2)th percentile (type 7).

    Compute it from reference (historical) data, never from the batch being released.
    """
    if not 0 < outlier_percent < 100:
        raise ValueError("outlier_percent must be in (0, 100)")
    hi = np.percentile(reference, 100 - outlier_percent / 2, axis=0, method="linear")
    lo = np.percentile(reference, outlier_percent / 2, axis=0, method="linear")
    return hi - lo
