"""DP outlier count (Okada et al. 2015, Theorems 4-6 and Algorithms 1-2): definitions, sensitivity tables, calibration, accountant order."""
import math
import warnings
from fractions import Fraction

import numpy as np
import pytest

from dpsense.cloud.privacy.accountant import BudgetAccountant, BudgetError
from dpsense.cloud.privacy.mechanisms import PaperModeWarning, nrs_alpha_beta
from dpsense.cloud.privacy.outlier_count import (
    NOT_DP, dp_outlier_count, global_sensitivity, kissing_upper, level_set_bounds, smooth_bound,
    subspace_degrees, subspace_outlier_count)
from dpsense.cloud.privacy.smooth import smooth_sensitivity


def synthetic1(seed=1):
    rng = np.random.default_rng(seed)
    return np.vstack([rng.normal(0, 1, (45, 2)), rng.normal(20, 10, (5, 2))])


class SeqRng:
    """Deterministic getrandbits source for reproducible releases."""

    def __init__(self, seed):
        self.r = np.random.default_rng(seed)

    def getrandbits(self, k):
        return int.from_bytes(self.r.bytes((k + 7) // 8), "little") & ((1 << k) - 1)


@pytest.mark.parametrize("d,k,n,lower,upper", [
    (1, 3, 50, 7, 7),          # exact 2k+1
    (2, 3, 50, 13, 19),        # 4k+1 <= GS <= 6k+1
    (7, 3, 50, 43, 50),        # capped at N
    (7, 3, 1000, 43, 403),     # K_7 <= 134
    (3, 1, 10, 7, 10),
    (11, 1, 10**9, 23, 3**11),  # volume bound 3^d - 1, plus 1
])
def test_global_sensitivity_table(d, k, n, lower, upper):
    assert global_sensitivity(d, k, n, "lower") == lower
    assert global_sensitivity(d, k, n, "upper") == upper


def test_kissing_table_and_validation():
    assert [kissing_upper(d) for d in (1, 2, 3, 4, 8, 24)] == [2, 6, 12, 24, 240, 196560]
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError):
            kissing_upper(bad)
    with pytest.raises(ValueError):
        global_sensitivity(2, 3, 50, "middle")


def test_normalised_metric_and_duplicates():
    # dist_S = sqrt(sum/|S|): (0,0)-(1,1) is at distance 1 in the normalised metric, sqrt 2 plain.
    x = np.array([[0.0, 0.0], [1.0, 1.0], [0.0, 0.0], [5.0, 5.0]])
    assert subspace_degrees(x, 1.0).tolist() == [2, 2, 2, 0]      # the duplicate counts
    assert subspace_outlier_count(x, 2, 1.0) == 1
    assert subspace_outlier_count(x, 3, 1.0) == 4
    assert subspace_outlier_count(x, 1, 0.5, subspace=[1]) == 2    # (1,) and (5,) in column 1
    # the same in 3-D (the chunked path) agrees with the 2-D path embedded
    x3 = np.hstack([x, x[:, :1]])
    assert subspace_degrees(x3, 1.0).tolist() == [2, 2, 2, 0]


@pytest.mark.parametrize("kwargs,exc", [
    (dict(k=0), ValueError), (dict(k=2.0), TypeError), (dict(r=0), ValueError), (dict(r="1"), TypeError),
    (dict(epsilon=0), ValueError), (dict(delta=0), ValueError), (dict(delta=1), ValueError),
    (dict(subspace=[0, 0]), ValueError), (dict(subspace=[2]), ValueError), (dict(subspace="01"), TypeError),
    (dict(method="laplace"), ValueError), (dict(gs="exact"), ValueError),
    (dict(method="global", paper_mode=True), ValueError), (dict(paper_mode=1), TypeError),
])
def test_validation_table(kwargs, exc):
    base = dict(k=3, r=1.1, epsilon=0.5, delta=0.01)
    base.update(kwargs)
    with pytest.raises(exc):
        dp_outlier_count(synthetic1(), **base)


def test_global_calibration_classical():
    rel = dp_outlier_count(synthetic1(), k=3, r=1.1, epsilon=0.5, delta=0.01, method="global",
                           calibration="classical", rng=SeqRng(1))
    # sigma = GS sqrt(2 ln(2/delta)) / epsilon with GS = 6k+1 = 19 (up to the mechanism's safety factor)
    assert rel.sigma == pytest.approx(19 * math.sqrt(2 * math.log(200)) / 0.5, rel=1e-6)
    assert rel.value == int(rel.value)
    assert "DP" in rel.guarantee and "NOT" not in rel.guarantee


def test_global_noise_matches_sigma():
    x = synthetic1()
    q = subspace_outlier_count(x, 3, 1.1)
    rng = SeqRng(2)
    vals = np.array([dp_outlier_count(x, k=3, r=1.1, epsilon=2.0, delta=0.01, method="global",
                                      rng=rng).value for _ in range(400)])
    sigma = dp_outlier_count(x, k=3, r=1.1, epsilon=2.0, delta=0.01, method="global").sigma
    assert abs(vals.mean() - q) < 4 * sigma / 20
    assert 0.85 < vals.std() / sigma < 1.15


def test_smooth_uses_nrs_beta_and_alpha():
    x = synthetic1()
    alpha, beta = nrs_alpha_beta(0.5, 0.01)
    s, kind = smooth_bound(x, 3, 1.1, beta)
    assert kind == "exact ball counts"
    assert s == pytest.approx(smooth_sensitivity(x, 3, 1.1, beta).value)
    q = subspace_outlier_count(x, 3, 1.1)
    rng = SeqRng(3)
    vals = np.array([dp_outlier_count(x, k=3, r=1.1, epsilon=0.5, delta=0.01, rng=rng).value
                     for _ in range(300)])
    # the mechanism's beta/alpha carry a safety factor within 1e-6 of NRS
    assert 0.85 < vals.std() / (s / alpha) < 1.15
    assert abs(vals.mean() - q) < 4 * (s / alpha) / math.sqrt(300)


def test_level_set_bound_dominates_exact_and_is_smooth():
    rng = np.random.default_rng(5)
    beta = 0.1
    for _ in range(30):
        x = rng.integers(0, 5, size=(12, 2)).astype(float)
        exact = smooth_sensitivity(x, 2, 1.0, beta)
        u_exact = np.array(exact.bounds)
        u_level = level_set_bounds(x, 2, 1.0)
        assert np.all(u_level >= u_exact)
        # beta-smoothness of the level-set bound under replace-one, in 3-D
        x3 = rng.normal(0, 1, size=(15, 3))
        y3 = x3.copy()
        y3[rng.integers(15)] = rng.normal(0, 1, 3)
        sx, _ = smooth_bound(x3, 2, 0.7, beta)
        sy, _ = smooth_bound(y3, 2, 0.7, beta)
        assert sx <= math.exp(beta) * sy * (1 + 1e-12) and sy <= math.exp(beta) * sx * (1 + 1e-12)


def test_paper_mode_labelled_and_refused_by_accountant(tmp_path):
    with pytest.warns(PaperModeWarning):
        rel = dp_outlier_count(synthetic1(), k=3, r=1.1, epsilon=0.5, delta=0.01, paper_mode=True)
    assert rel.guarantee == NOT_DP and "NOT differentially private" in rel.guarantee
    acct = BudgetAccountant(tmp_path / "b.db")
    acct.set_budget("d", 10, 0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PaperModeWarning)
        with pytest.raises(ValueError, match="NOT differentially private"):
            dp_outlier_count(synthetic1(), k=3, r=1.1, epsilon=0.5, delta=0.01, paper_mode=True,
                             accountant=acct, dataset="d")
    with pytest.raises(ValueError, match="NOT differentially private"):
        dp_outlier_count(synthetic1(), k=3, r=1.1, epsilon=0.5, delta=0.01, method="global", gs="lower",
                         accountant=acct, dataset="d")
    assert acct.spends("d") == []


def test_accountant_refuses_before_computing_and_charges_after(tmp_path, monkeypatch):
    import dpsense.cloud.privacy.outlier_count as oc
    acct = BudgetAccountant(tmp_path / "b.db")
    acct.set_budget("d", 1, 0.05)
    calls = []
    real = oc.subspace_degrees
    monkeypatch.setattr(oc, "subspace_degrees", lambda *a: calls.append(1) or real(*a))
    rel = dp_outlier_count(synthetic1(), k=3, r=1.1, epsilon=0.6, delta=0.01, method="global",
                           accountant=acct, dataset="d")
    assert calls and acct.spent("d").epsilon == Fraction(3, 5)
    calls.clear()
    with pytest.raises(BudgetError):
        dp_outlier_count(synthetic1(), k=3, r=1.1, epsilon=0.6, delta=0.01, accountant=acct, dataset="d")
    assert calls == []                     # refused before computing anything
    assert len(acct.spends("d")) == 1
    rel = dp_outlier_count(synthetic1(), k=3, r=1.1, epsilon=0.4, delta=0.01, accountant=acct, dataset="d")
    assert rel.method == "smooth" and rel.sigma is None
    assert acct.spent("d").epsilon == 1
    with pytest.raises(ValueError):
        dp_outlier_count(synthetic1(), k=3, r=1.1, epsilon=0.1, delta=0.01, accountant=acct)


@pytest.mark.parametrize("seed", range(6))
def test_kdtree_path_of_smooth_bound_is_exact(seed, monkeypatch):
    """The pruned (sparse) path of smooth.py gives the dense path's U_t and degrees exactly."""
    import dpsense.cloud.privacy.smooth as sm
    rng = np.random.default_rng(seed)
    d = 1 + seed % 2
    n = 60 + 30 * seed
    a = rng.integers(0, 8, size=(n, d)).astype(float) / 2 if seed % 3 == 0 else rng.normal(0, 2, (n, d))
    r = [0.5, 1.0, 1.1][seed % 3]
    monkeypatch.setattr(sm, "_DENSE_MAX", 10**9)
    u_dense, deg_dense = sm.local_sensitivity_bounds(a, 3, r), sm.degrees(a, r)
    monkeypatch.setattr(sm, "_DENSE_MAX", 0)
    monkeypatch.setattr(sm, "_SPARSE_CHUNK", 7)
    assert sm.local_sensitivity_bounds(a, 3, r).tolist() == u_dense.tolist()
    assert sm.degrees(a, r).tolist() == deg_dense.tolist()
