"""Distance-based outliers: Knorr-Ng (k, r) outliers and (beta, r)-anomalies.

    DistanceOutliers(k=3, r=1.0).fit_predict(x)      # fewer than 3 others within 1.0
    BetaRAnomalies(beta=3, r=1.0).fit_predict(x)     # at most 3 points (itself too) within 1.0
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sklearn.neighbors import KDTree

from dpsense.cloud.analyst.outliers._base import check_int, check_points, check_real, labels_from_mask
from dpsense.cloud.analyst.outliers.dbscan import counts_within

METRICS = ("euclidean", "normalised")


def ball_counts(x: np.ndarray, r: float, metric: str = "euclidean",
                subspace: Sequence[int] | None = None) -> np.ndarray:
    """Points within distance ``<= r`` of each row of ``x``, the row itself included.

    ``subspace`` selects columns (all when None). ``metric="normalised"`` is Okada et al. 2015's normalised subspace distance
    ``dist_S(x, y) = sqrt(sum_{i in S} (x_i - y_i)^2 / |S|)``; it is evaluated as a
    Euclidean ball of radius ``r * sqrt(|S|)``.
    """
    pts = check_points(x)
    cols = _check_subspace(subspace, pts.shape[1])
    if metric not in METRICS:
        raise ValueError("metric must be one of %s, got %r" % (METRICS, metric))
    if cols is not None:
        pts = pts[:, cols]
    radius = float(np.sqrt(r * r * pts.shape[1])) if metric == "normalised" else r
    return counts_within(KDTree(pts), pts, radius)


def _check_subspace(subspace: Sequence[int] | None, n_features: int) -> np.ndarray | None:
    if subspace is None:
        return None
    cols = np.asarray(subspace)
    if cols.ndim != 1 or cols.size == 0 or not np.issubdtype(cols.dtype, np.integer):
        raise ValueError("subspace must be a non-empty sequence of column indices")
    if np.unique(cols).size != cols.size or cols.min() < 0 or cols.max() >= n_features:
        raise ValueError("subspace must hold distinct column indices in [0, %d)" % n_features)
    return cols


class DistanceOutliers:
    """Distance-based (k, r) outliers: points with fewer than ``k`` neighbours within ``r``.

    Parameters
    ----------
    k : int
        Minimum number of neighbours of an inlier, ``>= 1``.
    r : float
        Neighbourhood radius, ``>= 0`` (``dist <= r``).
    metric : {"euclidean", "normalised"}
        ``"normalised"`` divides the squared distance by the subspace dimension
        (Okada et al.'s ``dist_S``); a radius ``r`` there is ``r * sqrt(|S|)`` in plain
        Euclidean distance.
    subspace : sequence of int, optional
        Columns ``S`` to measure the distance in; all columns when None.

    Attributes
    ----------
    neighbour_counts_ : ndarray of int, shape (n_samples,)
        ``|N_S(X, r, x)|``: points within ``r``, the point itself excluded by index.
    outlier_mask_ : ndarray of bool, shape (n_samples,)
        True where ``neighbour_counts_ < k``.
    labels_ : ndarray of int, shape (n_samples,)
        1 for inliers, -1 for outliers.

    Notes
    -----
    The point is excluded by index, not by value: duplicates of a point count as its
    neighbours (Okada et al. 2015, definitions; the sensitivity proofs rely on it). A (k, r) outlier is a
    (beta = k, r)-anomaly of :class:`BetaRAnomalies` with the same metric. One counting
    KD-tree query per point: O(n log n) typical time, O(n) memory.

    References
    ----------
    .. [1] E. M. Knorr, R. T. Ng, "Algorithms for mining distance-based outliers in large
       datasets", VLDB 1998.
    .. [2] R. Okada, K. Fukuchi, K. Kakizaki, J. Sakuma, "Differentially private analysis
       of outliers", ECML-PKDD 2015 (arXiv:1507.06763), Sect. 3.
    """

    def __init__(self, k: int = 5, r: float = 1.0, metric: str = "euclidean",
                 subspace: Sequence[int] | None = None) -> None:
        self.k = k
        self.r = r
        self.metric = metric
        self.subspace = subspace

    def _validate_params(self) -> tuple[int, float]:
        if self.metric not in METRICS:
            raise ValueError("metric must be one of %s, got %r" % (METRICS, self.metric))
        return check_int("k", self.k, 1), check_real("r", self.r)

    def fit(self, X: object, y: object = None) -> DistanceOutliers:
        """Count the neighbours of every row of ``X``; ``y`` is ignored."""
        k, r = self._validate_params()
        counts = ball_counts(check_points(X), r, self.metric, self.subspace) - 1
        self.neighbour_counts_ = counts
        self.outlier_mask_ = counts < k
        self.labels_ = labels_from_mask(self.outlier_mask_)
        return self

    def fit_predict(self, X: object, y: object = None) -> np.ndarray:
        """Fit and return the labels: 1 for inliers, -1 for outliers."""
        return self.fit(X).labels_


class BetaRAnomalies:
    """(beta, r)-anomalies: points whose ball of radius ``r`` holds at most ``beta`` points.

    Parameters
    ----------
    beta : int
        Largest ball count of an anomaly, ``>= 0``.
    r : float
        Ball radius, ``>= 0`` (``dist <= r``).
    metric : {"euclidean", "normalised"}
        As in :class:`DistanceOutliers`.

    Attributes
    ----------
    ball_counts_ : ndarray of int, shape (n_samples,)
        ``B_x(i, r)``: points within ``r``, the point itself and its duplicates included.
    outlier_mask_ : ndarray of bool, shape (n_samples,)
        True where ``ball_counts_ <= beta``.
    labels_ : ndarray of int, shape (n_samples,)
        1 for normal points, -1 for anomalies.

    Notes
    -----
    Every row of ``X`` is a present record (``x_i > 0`` in the histogram view of Asif et al. 2019, data model),
    so the presence condition always holds. The ball count includes the point itself, so
    ``BetaRAnomalies(beta=k, r)`` flags exactly the ``DistanceOutliers(k, r)`` outliers.
    O(n log n) typical time, O(n) memory.

    References
    ----------
    .. [1] H. Asif, P. A. Papakonstantinou, J. Vaidya, "How to accurately and privately
       identify anomalies", ACM CCS 2019, Sect. 3.
    .. [2] E. M. Knorr, R. T. Ng, "Algorithms for mining distance-based outliers in large
       datasets", VLDB 1998.
    """

    def __init__(self, beta: int = 5, r: float = 1.0, metric: str = "euclidean") -> None:
        self.beta = beta
        self.r = r
        self.metric = metric

    def _validate_params(self) -> tuple[int, float]:
        if self.metric not in METRICS:
            raise ValueError("metric must be one of %s, got %r" % (METRICS, self.metric))
        return check_int("beta", self.beta, 0), check_real("r", self.r)

    def fit(self, X: object, y: object = None) -> BetaRAnomalies:
        """Count every row's ball of radius ``r``; ``y`` is ignored."""
        beta, r = self._validate_params()
        counts = ball_counts(check_points(X), r, self.metric)
        self.ball_counts_ = counts
        self.outlier_mask_ = counts <= beta
        self.labels_ = labels_from_mask(self.outlier_mask_)
        return self

    def fit_predict(self, X: object, y: object = None) -> np.ndarray:
        """Fit and return the labels: 1 for normal points, -1 for anomalies."""
        return self.fit(X).labels_
