"""The smooth upper bound of q_count's local sensitivity: an upper bound, and beta-smooth.

Oracles are brute force on tiny data sets: in 1-D the exact local sensitivity over
the real line (the count changes only where the moved record crosses some
``x_j +- r``, so the breakpoints and the gaps between them are all the positions
there are); in 2-D the local sensitivity over an integer grid domain, with radii
that put records exactly on ball boundaries. Hypothesis runs derandomised, so CI
is deterministic.
"""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsense.cloud.privacy.mechanisms import SmoothSensitivityGaussian
from dpsense.cloud.privacy.smooth import degrees, local_sensitivity_bounds, outlier_count, smooth_sensitivity

SETTINGS = settings(max_examples=250, deadline=None, derandomize=True)


def ls_1d(x: np.ndarray, k: int, r: float) -> int:
    """Exact local sensitivity of q_count over the real line."""
    q = outlier_count(x, k, r)
    worst = 0
    for i in range(x.size):
        others = np.delete(x, i)
        cuts = np.unique(np.concatenate([others - r, others + r]))
        mids = (cuts[:-1] + cuts[1:]) / 2 if cuts.size > 1 else np.array([])
        far = [cuts.min() - 1, cuts.max() + 1] if cuts.size else [0.0]
        for z in np.concatenate([cuts, mids, far]):
            y = x.copy()
            y[i] = z
            worst = max(worst, abs(outlier_count(y, k, r) - q))
    return worst


GRID = 6


def ls_grid_2d(a: np.ndarray, k: int, r: float) -> int:
    """Local sensitivity of q_count over the domain {0..5}^2."""
    q = outlier_count(a, k, r)
    worst = 0
    for i in range(a.shape[0]):
        for u in range(GRID):
            for v in range(GRID):
                b = a.copy()
                b[i] = (u, v)
                worst = max(worst, abs(outlier_count(b, k, r) - q))
    return worst


def smooth_pair_ok(sx: float, sy: float, beta: float) -> bool:
    return sx <= math.exp(beta) * sy * (1 + 1e-12) and sy <= math.exp(beta) * sx * (1 + 1e-12)


points_1d = st.lists(st.integers(0, 12), min_size=1, max_size=7).map(lambda v: np.array(v, dtype=float) / 2)
radii_1d = st.sampled_from([0.5, 1.0, 1.25, 2.5])
ks = st.integers(1, 3)
betas = st.sampled_from([0.01, 0.3, 1.5])


@SETTINGS
@given(points_1d, ks, radii_1d, betas, st.data())
def test_1d_bound_is_above_local_sensitivity_and_smooth(x, k, r, beta, data):
    b = smooth_sensitivity(x, k, r, beta)
    assert ls_1d(x, k, r) <= b.bounds[0] <= b.value
    i = data.draw(st.integers(0, x.size - 1))
    y = x.copy()
    y[i] = data.draw(st.integers(-2, 14)) / 2
    assert smooth_pair_ok(b.value, smooth_sensitivity(y, k, r, beta).value, beta)


points_2d = st.lists(st.tuples(st.integers(0, GRID - 1), st.integers(0, GRID - 1)), min_size=1, max_size=6).map(
    lambda v: np.array(v, dtype=float))
# normalised radius r is Euclidean r * sqrt(2): 1, sqrt(2), 2 and sqrt(5) put lattice points on boundaries
radii_2d = st.sampled_from([1 / math.sqrt(2), 1.0, math.sqrt(2), math.sqrt(2.5)])


@SETTINGS
@given(points_2d, ks, radii_2d, betas, st.data())
def test_2d_bound_is_above_local_sensitivity_and_smooth(a, k, r, beta, data):
    b = smooth_sensitivity(a, k, r, beta)
    assert ls_grid_2d(a, k, r) <= b.bounds[0] <= b.value
    i = data.draw(st.integers(0, a.shape[0] - 1))
    y = a.copy()
    y[i] = (data.draw(st.integers(0, GRID - 1)), data.draw(st.integers(0, GRID - 1)))
    assert smooth_pair_ok(b.value, smooth_sensitivity(y, k, r, beta).value, beta)


def test_bounds_grow_at_most_one_per_step_of_neighbours():
    """The property behind smoothness, U_t(X) <= U_{t+1}(X'), on random 2-D neighbours."""
    rng = np.random.default_rng(7)
    for _ in range(40):
        a = rng.normal(size=(15, 2))
        y = a.copy()
        y[rng.integers(15)] = rng.normal(size=2) * 2
        ua, uy = local_sensitivity_bounds(a, 2, 0.5), local_sensitivity_bounds(y, 2, 0.5)
        assert np.all(ua[:-1] <= uy[1:]) and np.all(uy[:-1] <= ua[1:])


def test_hand_example_1d():
    """x = 0, 0.5, 1, 10; k = 1, r = 1: degrees 2, 2, 2, 0; one outlier (10).

    t = 0: no record has degree 1 (C_0(k) = 0); one has degree 0 (C_0(k-1) = 1),
    so U_0 = 1 + 0 + 1 = 2. t = 1: degrees 0..2 around k = 1 include all, but one
    ball of radius 1 holds at most the three near 0: U_1 = 3 + 1 + 1 = 5, capped at N = 4.
    """
    x = np.array([0, 0.5, 1, 10])
    assert degrees(x, 1.0).tolist() == [2, 2, 2, 0]
    assert outlier_count(x, 1, 1.0) == 1
    u = local_sensitivity_bounds(x, 1, 1.0)
    assert u.tolist() == [2, 4, 4, 4, 4]
    b = smooth_sensitivity(x, 1, 1.0, beta=1.0)
    assert b.t == 0 and b.value == 2.0
    assert smooth_sensitivity(x, 1, 1.0, beta=0.1).value == pytest.approx(4 * math.exp(-0.1))


def test_normalised_distance_in_2d():
    """Two points at Euclidean distance sqrt(2) are neighbours at normalised r = 1, not at r = 0.99."""
    a = np.array([[0.0, 0.0], [1.0, 1.0]])
    assert degrees(a, 1.0).tolist() == [1, 1]
    assert degrees(a, 0.99).tolist() == [0, 0]


def test_pitfall_4_8_on_a_synthetic_1_instance():
    """The calibration pitfall of docs/paper4.md: NRS beta keeps S large (tens for N = 50); beta = epsilon gives a few.

    Synthetic 1 (Okada et al. 2015, experiments; smaller here): 45 inliers N(0, I), 5 outliers N((20, 20), 100 I), k = 3,
    r = 1.1, epsilon = 0.1, delta = 0.01. The sigma of the NRS mechanism then exceeds
    the global-sensitivity Gaussian's 423.2 many times over.
    """
    rng = np.random.default_rng(4)
    X = np.vstack([rng.normal(size=(45, 2)), rng.normal([20, 20], 10, size=(5, 2))])
    mech = SmoothSensitivityGaussian(epsilon=0.1, delta=0.01)
    nrs = smooth_sensitivity(X, 3, 1.1, mech.beta)
    paper = smooth_sensitivity(X, 3, 1.1, 0.1)
    assert 20 <= nrs.value <= 50 and nrs.t >= 10
    assert paper.value < nrs.value / 3
    assert mech.sigma(nrs.value) > 5 * 423.2


@pytest.mark.parametrize("kwargs, exc", [
    ({"X": np.zeros((3, 3)), "k": 1, "r": 1.0, "beta": 0.1}, ValueError),
    ({"X": np.zeros((0, 2)), "k": 1, "r": 1.0, "beta": 0.1}, ValueError),
    ({"X": [[np.nan, 0.0]], "k": 1, "r": 1.0, "beta": 0.1}, ValueError),
    ({"X": np.zeros((3, 2)), "k": 0, "r": 1.0, "beta": 0.1}, ValueError),
    ({"X": np.zeros((3, 2)), "k": 1.5, "r": 1.0, "beta": 0.1}, TypeError),
    ({"X": np.zeros((3, 2)), "k": 1, "r": 0.0, "beta": 0.1}, ValueError),
    ({"X": np.zeros((3, 2)), "k": 1, "r": "1", "beta": 0.1}, TypeError),
    ({"X": np.zeros((3, 2)), "k": 1, "r": 1.0, "beta": 0.0}, ValueError),
    ({"X": np.zeros((3, 2)), "k": 1, "r": 1.0, "beta": None}, TypeError),
])
def test_bad_arguments(kwargs, exc):
    with pytest.raises(exc):
        smooth_sensitivity(**kwargs)


lattice_sets = st.tuples(
    st.integers(1, 2),
    st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9)), min_size=1, max_size=45),
    st.sampled_from([0.5, 1.0, 1 / math.sqrt(2), math.sqrt(2.5), 2.0]),
    st.integers(1, 4),
)


@pytest.mark.parametrize("accumulate", ["histogram", "sort"])
def test_pruned_path_equals_the_dense_path(accumulate, monkeypatch):
    """The path for large N (KD-tree pairs, blocks, histogram or sort) gives the dense code's U_t.

    Lattice points at half-unit steps: many duplicates and records exactly on ball
    boundaries. Blocks of 7 candidates make every block boundary a case.
    """
    import dpsense.cloud.privacy.smooth as sm

    @SETTINGS
    @given(lattice_sets)
    def check(case):
        dim, pts, r, k = case
        a = np.array(pts, dtype=float)[:, :dim] / 2
        with monkeypatch.context() as m:
            m.setattr(sm, "_DENSE_MAX", 10**9)
            dense = sm.local_sensitivity_bounds(a, k, r).tolist()
        with monkeypatch.context() as m:
            m.setattr(sm, "_DENSE_MAX", 0)
            m.setattr(sm, "_SPARSE_CHUNK", 7)
            m.setattr(sm, "_HIST_FACTOR", 10**9 if accumulate == "histogram" else 0)
            assert sm.local_sensitivity_bounds(a, k, r).tolist() == dense
    check()
