"""Outlier detectors: DBSCAN noise equals scikit-learn's, distance-based toy cases.

The DBSCAN oracle tests compare with scikit-learn's DBSCAN on hypothesis-generated
points. Lattice coordinates (integers, or quarters, with a large common offset) make every
squared distance exact, so pairs at exactly ``eps`` are real ties, not rounding noise;
hypothesis runs derandomised, so CI is deterministic.
"""
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.cluster import DBSCAN
from sklearn.neighbors import KDTree

from dpsense.cloud.analyst.outliers import BetaRAnomalies, DBSCANOutliers, DistanceOutliers
from dpsense.cloud.analyst.outliers.dbscan import tree_core_noise
from dpsense.cloud.analyst.outliers.grid import grid_core_noise, grid_fits

ORACLE = settings(max_examples=200, deadline=None, derandomize=True)


def _sklearn_noise(x, eps, min_samples):
    return DBSCAN(eps=eps, min_samples=min_samples).fit(x).labels_ == -1


def _sklearn_core_noise(x, eps, min_samples):
    fitted = DBSCAN(eps=eps, min_samples=min_samples).fit(x)
    core = np.zeros(len(x), dtype=bool)
    core[fitted.core_sample_indices_] = True
    return core, fitted.labels_ == -1


# Radii with lattice points at exactly that distance: 1 (unit steps), 2, 3 ((1, 2, 2) in
# 3-D), 5 ((3, 4) and (0, 5)); 0.5 makes only duplicates neighbours.
LATTICE_EPS = {2: [0.5, 1.0, 2.0, 5.0], 3: [0.5, 1.0, 2.0, 3.0]}


@st.composite
def lattice_case(draw, dim):
    """Points on an integer lattice (many duplicates and ties), scaled and shifted exactly."""
    n = draw(st.integers(1, 60))
    side = draw(st.sampled_from([3, 6, 12]))
    pts = draw(st.lists(st.tuples(*[st.integers(0, side)] * dim), min_size=n, max_size=n))
    eps = draw(st.sampled_from(LATTICE_EPS[dim]))
    # Quarters and an offset of 2**20 are exact in float64: the ties stay exact.
    scale = draw(st.sampled_from([1.0, 0.25]))
    shift = draw(st.sampled_from([0.0, 1048576.0, -3.0]))
    min_samples = draw(st.one_of(st.integers(1, 8), st.sampled_from([n, n + 1])))
    return np.array(pts, dtype=float) * scale + shift, eps * scale, min_samples


@pytest.mark.parametrize("dim", [2, 3])
def test_dbscan_noise_and_core_equal_sklearn_on_lattices(dim):
    @ORACLE
    @given(lattice_case(dim))
    def check(case):
        x, eps, min_samples = case
        det = DBSCANOutliers(eps=eps, min_samples=min_samples).fit(x)
        core, noise = _sklearn_core_noise(x, eps, min_samples)
        np.testing.assert_array_equal(det.outlier_mask_, noise)
        np.testing.assert_array_equal(det.core_mask_, core)
    check()


@pytest.mark.parametrize("dim", [2, 3])
def test_dbscan_noise_equals_sklearn_on_random_floats(dim):
    @ORACLE
    @given(st.integers(0, 2**32 - 1), st.integers(5, 400), st.floats(0.05, 2.0), st.integers(1, 15))
    def check(seed, n, eps, min_samples):
        rng = np.random.default_rng(seed)
        x = rng.normal(size=(n, dim)) * rng.uniform(0.2, 2.0) + rng.choice([-3.0, 0.0, 3.0], size=(n, 1))
        det = DBSCANOutliers(eps=eps, min_samples=min_samples).fit(x)
        np.testing.assert_array_equal(det.outlier_mask_, _sklearn_noise(x, eps, min_samples))
    check()


def test_grid_finds_pairs_at_exactly_eps():
    # (0, 0) and (3, 4) are exactly 5 apart, as are (3, 4) and (6, 8): with min_samples 2
    # all three are core; at a hair less than 5 every point is alone and noise.
    x = np.array([[0.0, 0.0], [3.0, 4.0], [6.0, 8.0], [20.0, 20.0]])
    core, noise = grid_core_noise(x, 5.0, 2)
    assert core.tolist() == [True, True, True, False] and noise.tolist() == [False, False, False, True]
    core, noise = grid_core_noise(x, np.nextafter(5.0, 0.0), 2)
    assert not core.any() and noise.all()


def test_grid_border_point_at_exactly_eps_from_a_core_point():
    # Three duplicates at the origin are core (min_samples 3); (0, 2) is 2 away from them:
    # a border point at eps = 2, noise at eps just under 2.
    x = np.array([[0.0, 0.0]] * 3 + [[0.0, 2.0]])
    _, noise = grid_core_noise(x, 2.0, 3)
    assert noise.tolist() == [False, False, False, False]
    _, noise = grid_core_noise(x, np.nextafter(2.0, 0.0), 3)
    assert noise.tolist() == [False, False, False, True]


def test_grid_and_tree_paths_agree_on_a_window():
    # A detection-like window: a dense blob, a sparse layer and a few far points.
    rng = np.random.default_rng(11)
    x = np.vstack([rng.normal(0, 3, (4000, 2)), rng.normal(0, 60, (600, 2)), rng.uniform(-500, 500, (20, 2))])
    for eps, min_samples in ((0.5, 5), (2.0, 20), (12.0, 60)):
        grid = grid_core_noise(x, eps, min_samples)
        tree = tree_core_noise(x, eps, min_samples)
        np.testing.assert_array_equal(grid[0], tree[0])
        np.testing.assert_array_equal(grid[1], tree[1])


def test_too_wide_a_spread_takes_the_tree_path():
    # 2**21 cells per axis do not fit a 3-D grid's keys; the tree path answers instead.
    x = np.array([[0.0, 0.0, 0.0], [0.5, 0.0, 0.0], [1e7, 0.0, 0.0]])
    assert not grid_fits(x, 1.0)
    assert grid_fits(x[:2], 1.0) and not grid_fits(np.zeros((3, 4)), 1.0)
    det = DBSCANOutliers(eps=1.0, min_samples=2).fit(x)
    assert det.outlier_mask_.tolist() == [False, False, True]


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
    # Four columns take the KD-tree path, the one that uses threads; about 12 % is noise.
    x = np.random.default_rng(5).normal(size=(20_000, 4))
    one = DBSCANOutliers(eps=0.4, min_samples=4).fit(x).outlier_mask_
    two = DBSCANOutliers(eps=0.4, min_samples=4, n_jobs=2).fit(x).outlier_mask_
    assert 0.1 < one.mean() < 0.9
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
