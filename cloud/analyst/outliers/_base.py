"""Shared pieces of the detectors: input checks and the fit_predict convention."""
from __future__ import annotations

import numbers

import numpy as np


def check_points(x: object) -> np.ndarray:
    """``x`` as a finite 2-D float array with at least one row (ValueError otherwise)."""
    a = np.asarray(x, dtype=float)
    if a.ndim == 1:
        a = a[:, None]
    if a.ndim != 2 or a.shape[0] == 0 or a.shape[1] == 0:
        raise ValueError("X must be a non-empty 2-D array, got shape %s" % (a.shape,))
    if not np.all(np.isfinite(a)):
        raise ValueError("X contains NaN or infinity")
    return a


def check_real(name: str, value: object, *, positive: bool = False) -> float:
    """A finite real number (TypeError for other types, ValueError for the range)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError("%s must be a real number, got %r" % (name, value))
    v = float(value)
    if not np.isfinite(v) or v < 0 or (positive and v == 0):
        raise ValueError("%s must be %s and finite, got %r" % (name, "> 0" if positive else ">= 0", value))
    return v


def check_int(name: str, value: object, minimum: int) -> int:
    """An integer ``>= minimum`` (TypeError for other types, ValueError for the range)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError("%s must be an int, got %r" % (name, value))
    if value < minimum:
        raise ValueError("%s must be >= %d, got %r" % (name, minimum, value))
    return int(value)


def labels_from_mask(outlier_mask: np.ndarray) -> np.ndarray:
    """sklearn's outlier-detector labels: 1 for inliers, -1 for outliers."""
    return np.where(outlier_mask, -1, 1)
