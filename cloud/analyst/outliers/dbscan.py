"""DBSCAN noise points as outliers, in memory linear in n.

    det = DBSCANOutliers(eps=12.0, min_samples=60).fit(x)
    det.outlier_mask_          # True for DBSCAN noise points

One to three columns go to the grid of :mod:`dpsense.cloud.analyst.outliers.grid`; more columns
(or a spread too wide for a grid) to two counting KD-tree queries.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from sklearn.neighbors import KDTree

from dpsense.cloud.analyst.outliers._base import check_int, check_points, check_real, labels_from_mask
from dpsense.cloud.analyst.outliers.grid import grid_core_noise, grid_fits

#: Rows per tree query. Each query returns only one count per row, so the chunk bounds the
#: temporaries of the query (there is no neighbourhood list) and is the unit of threading.
CHUNK_ROWS = 8_192


class DBSCANOutliers:
    """Outliers = the noise points of DBSCAN (Ester et al. 1996), without clustering.

    A point is *core* if at least ``min_samples`` points (itself included) lie within
    distance ``eps`` (``dist <= eps``). A non-core point within ``eps`` of a core point is a
    *border* point and belongs to a cluster. Every other point is *noise*, and noise points
    are the outliers. This is exactly the set labelled -1 by
    :class:`sklearn.cluster.DBSCAN` with the same ``eps`` and ``min_samples`` and the
    Euclidean metric, and the set labelled 0 by R's ``fpc::dbscan`` (Böhler et al. 2017, who used R's fpc::dbscan).

    Parameters
    ----------
    eps : float
        Neighbourhood radius (Euclidean, in the units of ``X``), ``> 0``.
    min_samples : int
        Points within ``eps`` (the point itself included) that make a point core, ``>= 1``.
    n_jobs : int, optional
        Threads for the tree queries (they release the GIL); None means 1, -1 all CPUs.
        The grid path (one to three columns) runs in one thread.

    Attributes
    ----------
    core_mask_ : ndarray of bool, shape (n_samples,)
        True for core points.
    outlier_mask_ : ndarray of bool, shape (n_samples,)
        True for noise points.
    labels_ : ndarray of int, shape (n_samples,)
        1 for inliers (core and border points), -1 for outliers.
    n_outliers_ : int
        Number of noise points.

    Notes
    -----
    Cluster labels are never needed to decide noise, so no neighbourhood is stored and
    memory is O(n) whatever the density; scikit-learn's DBSCAN stores every neighbourhood
    (O(n * mean neighbours)), which runs out of memory on 100,000 points in one dense blob.

    With one to three columns the points are binned on a grid of cells of side
    ``eps / sqrt(d)`` (:func:`~dpsense.cloud.analyst.outliers.grid.grid_core_noise`): a cell with
    ``min_samples`` points is all core, other points count their neighbours cell by cell
    (bounding boxes decide whole cells; only cells the ball's boundary cuts are compared
    point by point), and non-core points look for a core point the same way. A pair is
    within ``eps`` when the float64 sum of squared coordinate differences is
    ``<= eps**2``, scikit-learn's KD-tree test, so ties at exactly ``eps`` agree.
    0.05 to 0.4 s for 100,000 readings of a detection window (``bench/detection.py``).

    With more columns one counting radius query over a KD-tree of all points finds the
    core points, and one over a KD-tree of the core points, for the non-core points only,
    finds the border points; counting queries skip whole tree nodes inside the ball.

    References
    ----------
    .. [1] M. Ester, H.-P. Kriegel, J. Sander, X. Xu, "A density-based algorithm for
       discovering clusters in large spatial databases with noise", KDD 1996.
    .. [2] E. Schubert, J. Sander, M. Ester, H.-P. Kriegel, X. Xu, "DBSCAN revisited,
       revisited", ACM TODS 42(3), 2017 (core, border and noise points).
    """

    def __init__(self, eps: float = 0.5, min_samples: int = 5, n_jobs: int | None = None) -> None:
        self.eps = eps
        self.min_samples = min_samples
        self.n_jobs = n_jobs

    def _validate_params(self) -> tuple[float, int, int]:
        return (check_real("eps", self.eps, positive=True),
                check_int("min_samples", self.min_samples, 1),
                check_n_jobs(self.n_jobs))

    def fit(self, X: object, y: object = None) -> DBSCANOutliers:
        """Find the noise points of ``X`` (n_samples, n_features); ``y`` is ignored."""
        eps, min_samples, n_jobs = self._validate_params()
        x = check_points(X)
        if grid_fits(x, eps):
            core, outlier = grid_core_noise(x, eps, min_samples)
        else:
            core, outlier = tree_core_noise(x, eps, min_samples, n_jobs)
        self.core_mask_ = core
        self.outlier_mask_ = outlier
        self.labels_ = labels_from_mask(outlier)
        self.n_outliers_ = int(outlier.sum())
        return self

    def fit_predict(self, X: object, y: object = None) -> np.ndarray:
        """Fit and return the labels: 1 for inliers, -1 for outliers."""
        return self.fit(X).labels_


def tree_core_noise(x: np.ndarray, eps: float, min_samples: int,
                    n_jobs: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Core and noise masks of DBSCAN(eps, min_samples) from two counting KD-tree queries."""
    core = counts_within(KDTree(x), x, eps, n_jobs) >= min_samples
    outlier = ~core
    candidates = np.flatnonzero(outlier)
    if core.any() and candidates.size:
        near_core = counts_within(KDTree(x[core]), x[candidates], eps, n_jobs) > 0
        outlier[candidates[near_core]] = False
    return core, outlier


def check_n_jobs(n_jobs: int | None) -> int:
    """Threads to use: None -> 1, -1 -> every CPU, else a positive int."""
    if n_jobs is None:
        return 1
    jobs = check_int("n_jobs", n_jobs, -1)
    if jobs == 0:
        raise ValueError("n_jobs must be a positive int, -1 or None, got 0")
    return (os.cpu_count() or 1) if jobs == -1 else jobs


def counts_within(tree: KDTree, points: np.ndarray, radius: float, n_jobs: int = 1) -> np.ndarray:
    """For each row of ``points``, the number of tree points at distance ``<= radius``."""
    starts = range(0, points.shape[0], CHUNK_ROWS)

    def count(start: int) -> np.ndarray:
        return tree.query_radius(points[start:start + CHUNK_ROWS], radius, count_only=True)

    if n_jobs == 1 or len(starts) == 1:
        parts = [count(s) for s in starts]
    else:
        with ThreadPoolExecutor(max_workers=n_jobs) as pool:
            parts = list(pool.map(count, starts))
    return np.concatenate(parts).astype(np.intp, copy=False)
