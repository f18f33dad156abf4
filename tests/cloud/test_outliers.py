"""Outlier detectors: DBSCAN noise equals scikit-learn's, distance-based toy cases."""
import tracemalloc

import numpy as np
import pytest
from sklearn.cluster import DBSCAN
from sklearn.neighbors import KDTree

from dpsense.cloud.outliers import BetaRAnomalies, DBSCANOutliers, DistanceOutliers


def _sklearn_noise(x, eps, min_samples):
    return DBSCAN(eps=eps, min_samples=min_samples).fit(x).labels_ == -1


@pytest.mark.parametrize("seed", range(12))
def test_dbscan_noise_equals_sklearn_on_random_data(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(30, 500))
    blobs = rng.normal(size=(n, 2)) * rng.uniform(0.3, 2.0) + rng.choice([-4.0, 0.0, 4.0], size=(n, 1))
    x = np.round(blobs, 1) if seed % 3 == 0 else blobs        # rounded: ties and duplicates
    eps = float(rng.uniform(0.1, 1.5))
    min_samples = int(rng.integers(1, 12))
    det = DBSCANOutliers(eps=eps, min_samples=min_samples).fit(x)
    np.testing.assert_array_equal(det.outlier_mask_, _sklearn_noise(x, eps, min_samples))


@pytest.mark.parametrize("dim", [1, 3, 5])
def test_dbscan_noise_equals_sklearn_in_other_dimensions(dim):
    rng = np.random.default_rng(dim)
    x = rng.normal(size=(300, dim))
    det = DBSCANOutliers(eps=0.6, min_samples=4).fit(x)
    np.testing.assert_array_equal(det.outlier_mask_, _sklearn_noise(x, 0.6, 4))


def test_dbscan_border_points_are_not_outliers():
    # On a line with eps = 1 and min_samples = 3: point 1 sees {0, 1, 2} and is core;
    # 0 and 2 see only two points but lie within eps of the core point (border);
    # 5 sees only itself (noise). Distance exactly eps counts.
    x = np.array([[0.0], [1.0], [2.0], [5.0]])
    det = DBSCANOutliers(eps=1.0, min_samples=3).fit(x)
    assert det.core_mask_.tolist() == [False, True, False, False]
    assert det.outlier_mask_.tolist() == [False, False, False, True]
    assert det.fit_predict(x).tolist() == [1, 1, 1, -1]
    assert det.n_outliers_ == 1


def test_dbscan_min_samples_counts_the_point_itself():
    x = np.array([[0.0, 0.0], [0.0, 0.0], [9.0, 9.0]])
    assert DBSCANOutliers(eps=0.5, min_samples=2).fit_predict(x).tolist() == [1, 1, -1]
    assert DBSCANOutliers(eps=0.5, min_samples=1).fit_predict(x).tolist() == [1, 1, 1]


def test_dbscan_threads_give_the_same_answer():
    x = np.random.default_rng(5).normal(size=(20_000, 2))
    one = DBSCANOutliers(eps=0.05, min_samples=4).fit(x).outlier_mask_
    two = DBSCANOutliers(eps=0.05, min_samples=4, n_jobs=2).fit(x).outlier_mask_
    np.testing.assert_array_equal(one, two)


def test_dbscan_on_100k_dense_points_runs_in_bounded_memory():
    # One dense blob: every point has ~1,800 neighbours within eps, so a neighbourhood
    # list (what sklearn's DBSCAN builds) needs ~1.4 GB of int64 indices. The detector
    # keeps one count per point instead.
    x = np.random.default_rng(0).normal(size=(100_000, 2))
    tracemalloc.start()
    try:
        det = DBSCANOutliers(eps=0.3, min_samples=5, n_jobs=2).fit(x)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 32e6
    assert 0 < det.n_outliers_ < 1000
    sample = np.random.default_rng(1).choice(100_000, 500, replace=False)
    neighbours = KDTree(x).query_radius(x[sample], 0.3, count_only=True)
    assert neighbours.mean() * 100_000 * 8 > 1e9


@pytest.mark.parametrize("kwargs, exc", [
    ({"eps": 0.0}, ValueError),
    ({"eps": -1.0}, ValueError),
    ({"eps": float("nan")}, ValueError),
    ({"eps": "1"}, TypeError),
    ({"min_samples": 0}, ValueError),
    ({"min_samples": 2.5}, TypeError),
    ({"min_samples": True}, TypeError),
    ({"n_jobs": 0}, ValueError),
    ({"n_jobs": -2}, ValueError),
])
def test_dbscan_validates_in_fit(kwargs, exc):
    det = DBSCANOutliers(**kwargs)               # __init__ only stores
    with pytest.raises(exc):
        det.fit(np.zeros((3, 2)))


@pytest.mark.parametrize("x", [np.zeros((0, 2)), np.array([[0.0, np.nan]]), np.zeros((2, 2, 2))])
def test_detectors_reject_bad_input(x):
    for det in (DBSCANOutliers(), DistanceOutliers(), BetaRAnomalies()):
        with pytest.raises(ValueError):
            det.fit(x)


def test_distance_outliers_on_a_line():
    # Points 0, 1, 2, 10 with r = 1: neighbour counts (itself excluded) are 1, 2, 1, 0.
    x = np.array([[0.0], [1.0], [2.0], [10.0]])
    det = DistanceOutliers(k=1, r=1.0).fit(x)
    assert det.neighbour_counts_.tolist() == [1, 2, 1, 0]
    assert det.fit_predict(x).tolist() == [1, 1, 1, -1]
    assert DistanceOutliers(k=2, r=1.0).fit_predict(x).tolist() == [-1, 1, -1, -1]


def test_distance_outliers_count_duplicates_as_neighbours():
    # The point is excluded by index, so its copy is a neighbour at distance 0.
    x = np.array([[5.0], [5.0], [7.0]])
    assert DistanceOutliers(k=1, r=0.0).fit_predict(x).tolist() == [1, 1, -1]


def test_distance_outliers_in_a_subspace():
    # Column 1 scatters the points; in column 0 alone they are all within 0.1.
    x = np.array([[0.0, 0.0], [0.1, 50.0], [0.05, -80.0]])
    assert DistanceOutliers(k=2, r=0.1).fit_predict(x).tolist() == [-1, -1, -1]
    assert DistanceOutliers(k=2, r=0.1, subspace=[0]).fit_predict(x).tolist() == [1, 1, 1]


def test_normalised_metric_divides_by_the_subspace_dimension():
    # The two points differ by 2 in each of 4 columns: Euclidean distance 4,
    # normalised distance sqrt(16 / 4) = 2.
    x = np.array([[0.0, 0.0, 0.0, 0.0], [2.0, 2.0, 2.0, 2.0]])
    assert DistanceOutliers(k=1, r=2.0).fit_predict(x).tolist() == [-1, -1]
    assert DistanceOutliers(k=1, r=2.0, metric="normalised").fit_predict(x).tolist() == [1, 1]
    assert DistanceOutliers(k=1, r=4.0).fit_predict(x).tolist() == [1, 1]


@pytest.mark.parametrize("kwargs, exc", [
    ({"k": 0}, ValueError),
    ({"k": 1.5}, TypeError),
    ({"r": -0.1}, ValueError),
    ({"metric": "manhattan"}, ValueError),
    ({"subspace": [0, 0]}, ValueError),
    ({"subspace": [2]}, ValueError),
    ({"subspace": []}, ValueError),
])
def test_distance_outliers_validate_in_fit(kwargs, exc):
    det = DistanceOutliers(**kwargs)
    with pytest.raises(exc):
        det.fit(np.zeros((3, 2)))


def test_beta_r_anomalies_count_the_point_itself():
    # r = 1: the pair at 0 and 1 has ball count 2 each, the point at 10 has 1.
    x = np.array([[0.0], [1.0], [10.0]])
    det = BetaRAnomalies(beta=1, r=1.0).fit(x)
    assert det.ball_counts_.tolist() == [2, 2, 1]
    assert det.fit_predict(x).tolist() == [1, 1, -1]
    assert BetaRAnomalies(beta=2, r=1.0).fit_predict(x).tolist() == [-1, -1, -1]
    assert BetaRAnomalies(beta=0, r=1.0).fit_predict(x).tolist() == [1, 1, 1]


@pytest.mark.parametrize("k", [1, 2, 5, 10])
def test_k_r_outliers_are_beta_r_anomalies_with_beta_k(k):
    x = np.round(np.random.default_rng(k).normal(size=(400, 3)), 1)
    a = DistanceOutliers(k=k, r=0.5).fit(x).outlier_mask_
    b = BetaRAnomalies(beta=k, r=0.5).fit(x).outlier_mask_
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("kwargs, exc", [({"beta": -1}, ValueError), ({"beta": "3"}, TypeError),
                                         ({"r": float("inf")}, ValueError), ({"metric": "l1"}, ValueError)])
def test_beta_r_anomalies_validate_in_fit(kwargs, exc):
    with pytest.raises(exc):
        BetaRAnomalies(**kwargs).fit(np.zeros((3, 2)))
