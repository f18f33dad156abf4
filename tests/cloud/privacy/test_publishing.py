"""DP-PCA, DP-LDA and the LAP/EXP baselines (cloud/privacy/publishing.py, Jiang et al. 2013, DP-PCA and DP-LDA).

Statistical checks are seeded, so they are deterministic; the tolerances are stated as
multiples of the estimator's standard deviation, with the false-failure rate that the
tolerance would have for a fresh seed.
"""
import itertools
import math
import random

import numpy as np
import pytest

from dpsense.cloud.privacy.accountant import BudgetAccountant, BudgetError
from dpsense.cloud.privacy.lda import dp_lda_synthesise
from dpsense.cloud.privacy.publishing import (
    Schema,
    _laplace,
    dp_pca_publish,
    exponential_publish,
    laplace_publish,
    lda_sensitivity,
    pca_sensitivity,
)

SCHEMA = Schema(bounds=((0.0, 10.0), (0.0, 1.0)), levels=(3, 2))


def data(n=400, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.uniform(0, 10, n)
    b = np.clip(0.05 * a + rng.normal(0, 0.1, n), 0, 1)
    c = np.eye(3)[(a > 5).astype(int) + (a > 8)]
    d = np.eye(2)[rng.integers(0, 2, n)]
    x = np.column_stack([a, b, c, d])
    y = (a + rng.normal(0, 1, n) > 5).astype(int)
    return x, y


# -- sensitivities -------------------------------------------------------------------------


def _corners(p1, levels):
    nums = itertools.product((0.0, 1.0), repeat=p1)
    cats = itertools.product(*[range(k) for k in levels])
    for num, cat in itertools.product(list(nums), list(cats)):
        v = list(num)
        for k, c in zip(levels, cat):
            v += [1.0 if i == c else 0.0 for i in range(k)]
        yield np.array(v)


def _corner_max(p1, p2):
    """Closed form of the corner maximum of the second-moment change (see the module docstring)."""
    return max(s * (p1 - s) + (p1 - s) * (p1 - s + 1) // 2 + (2 * s + p1 - s) * p2 + p2 * (p2 + 1)
               for s in range(p1 + 1))


@pytest.mark.parametrize("p1,levels", [(2, (3,)), (1, (2, 3)), (3, ()), (0, (2, 2, 3)), (2, (2, 4)), (2, (2, 2))])
def test_sensitivities_bound_the_brute_force_maximum(p1, levels):
    s = Schema(bounds=((0, 1),) * p1, levels=levels)
    recs = list(_corners(p1, levels))
    iu = np.triu_indices(s.p)
    pairs = list(itertools.product(recs, recs))
    first = max(np.abs(a - b).sum() for a, b in pairs)
    second = max(np.abs(np.outer(a, a)[iu] - np.outer(b, b)[iu]).sum() for a, b in pairs)
    l2 = max(((a - b) ** 2).sum() for a, b in pairs)
    assert first == s.first_moment_l1()            # tight
    assert l2 == s.record_l2_squared()             # tight
    assert second == _corner_max(p1, len(levels))
    assert second <= s.second_moment_l1()          # our bound holds
    paper = ((p1 + len(levels)) * (p1 + len(levels) + 1) + len(levels) * (len(levels) + 1)) // 2
    if p1 and len(levels) >= 2:
        assert paper < second                      # Jiang et al. 2013's categorical formula under-estimates
    # interior points never exceed the bound either (random search)
    rng = np.random.default_rng(p1 * 10 + len(levels))
    for _ in range(2000):
        a, b = rng.choice(len(recs), 2)
        u, v = recs[a].copy(), recs[b].copy()
        u[:p1], v[:p1] = rng.uniform(0, 1, p1), rng.uniform(0, 1, p1)
        assert np.abs(np.outer(u, u)[iu] - np.outer(v, v)[iu]).sum() <= s.second_moment_l1() + 1e-12


def test_sensitivity_values():
    assert pca_sensitivity(Schema(bounds=((0, 1),) * 4), 2) == (4 + 10, math.sqrt(8))   # paper: p + p(p+1)/2
    assert lda_sensitivity(Schema(bounds=((0, 1),) * 4)) == 2 * 4 + 10
    adult = Schema(bounds=((0, 1),) * 5, levels=(8, 7, 6, 5, 2, 2))
    assert adult.p == 35 and adult.second_moment_l1() == 15 + 60 + 42
    assert pca_sensitivity(adult, 3)[1] == pytest.approx(math.sqrt(3 * 17))


# -- validation ----------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs,exc", [
    (dict(bounds=((0, 1),), levels=(1,)), ValueError),
    (dict(bounds=((1, 0),)), ValueError),
    (dict(bounds=((0, 0),)), ValueError),
    (dict(bounds=(None,)), ValueError),
    (dict(bounds=((0, "1"),)), TypeError),
    (dict(bounds=((0, 1),), levels=(2.0,)), TypeError),
    (dict(bounds=()), ValueError),
    (dict(bounds="x"), TypeError),
])
def test_schema_validation(kwargs, exc):
    with pytest.raises(exc):
        Schema(**kwargs)


X, Y = data()


@pytest.mark.parametrize("fn,kwargs,exc", [
    (dp_pca_publish, dict(schema=SCHEMA, epsilon=1, k=0), ValueError),
    (dp_pca_publish, dict(schema=SCHEMA, epsilon=1, k=8), ValueError),
    (dp_pca_publish, dict(schema=SCHEMA, epsilon=1, k=1.5), TypeError),
    (dp_pca_publish, dict(schema=SCHEMA, epsilon=0, k=1), ValueError),
    (dp_pca_publish, dict(schema=SCHEMA, epsilon="1", k=1), TypeError),
    (dp_pca_publish, dict(schema=None, epsilon=1, k=1), TypeError),
    (dp_pca_publish, dict(schema=SCHEMA, epsilon=1, k=1, noise=object()), TypeError),
    (laplace_publish, dict(schema=SCHEMA, epsilon=-1), ValueError),
    (exponential_publish, dict(schema=SCHEMA, epsilon=1, grid=1), ValueError),
    (exponential_publish, dict(schema=SCHEMA, epsilon=1, grid=2.5), TypeError),
])
def test_parameter_validation(fn, kwargs, exc):
    with pytest.raises(exc):
        fn(X, **kwargs)


def test_shape_and_label_validation():
    with pytest.raises(ValueError, match="matrix"):
        dp_pca_publish(X[:, :3], schema=SCHEMA, epsilon=1, k=1)
    with pytest.raises(ValueError, match="labels"):
        dp_lda_synthesise(X, Y[:-1], schema=SCHEMA, epsilon=1)
    with pytest.raises(ValueError, match="labels"):
        dp_lda_synthesise(X, Y + 1, schema=SCHEMA, epsilon=1)
    with pytest.raises(ValueError):
        dp_lda_synthesise(X, Y, schema=SCHEMA, epsilon=1, count_share=1.0)
    with pytest.raises(ValueError, match="both"):
        dp_pca_publish(X, schema=SCHEMA, epsilon=1, k=1, dataset="x")


# -- accountant ----------------------------------------------------------------------------


def _untouchable():
    raise AssertionError("the data were read before the budget check")


@pytest.mark.parametrize("call", [
    lambda src, acct: dp_pca_publish(src, schema=SCHEMA, epsilon=1, k=1, accountant=acct, dataset="d"),
    lambda src, acct: laplace_publish(src, schema=SCHEMA, epsilon=1, accountant=acct, dataset="d"),
    lambda src, acct: exponential_publish(src, schema=SCHEMA, epsilon=1, accountant=acct, dataset="d"),
    lambda src, acct: dp_lda_synthesise(src, schema=SCHEMA, epsilon=1, accountant=acct, dataset="d"),
])
def test_refused_before_the_data_are_touched(tmp_path, call):
    acct = BudgetAccountant(tmp_path / "b.db")
    acct.set_budget("d", 0.5)
    with pytest.raises(BudgetError):
        call(_untouchable, acct)
    assert acct.spends("d") == []


def test_charged_after_release(tmp_path):
    acct = BudgetAccountant(tmp_path / "b.db")
    acct.set_budget("d", 1)
    rng = np.random.default_rng(1)
    dp_pca_publish(lambda: X, schema=SCHEMA, epsilon=0.4, k=2, noise=rng, accountant=acct, dataset="d")
    dp_lda_synthesise(lambda: (X, Y), schema=SCHEMA, epsilon=0.6, n_synthetic=20, noise=rng,
                      accountant=acct, dataset="d")
    assert acct.spent("d").epsilon == 1
    with pytest.raises(BudgetError):
        laplace_publish(_untouchable, schema=SCHEMA, epsilon=0.1, accountant=acct, dataset="d")


# -- noise scales --------------------------------------------------------------------------


@pytest.mark.parametrize("noise", [random.Random(7), np.random.default_rng(7)], ids=["exact", "numpy"])
def test_laplace_vector_scale(noise):
    """Sample variance of 4000 draws vs 2 b^2: relative sd sqrt(5/4000) = 0.035 (Laplace kurtosis 6);
    tolerance 5 sd, false-failure rate below 1e-5 (CLT)."""
    from fractions import Fraction
    out = _laplace(np.zeros(4000, dtype=object), Fraction(3), Fraction(1, 2), noise)
    assert out.var() / (2 * 6.0 ** 2) == pytest.approx(1, abs=5 * math.sqrt(5 / 4000))


@pytest.mark.parametrize("noise", [random.Random(3), np.random.default_rng(3)], ids=["exact", "numpy"])
def test_dp_pca_projected_noise_scale(noise):
    """k = p and no post-processing: X_pub - X = N U^T, N i.i.d. Lap(2t/eps), so the mean squared row
    norm is k * 2 b^2. 400 rows x 7 entries: relative sd ~ sqrt(5/2800) = 0.042, tolerance 5 sd."""
    eps, k = 2.0, SCHEMA.p
    rel = dp_pca_publish(X, schema=SCHEMA, epsilon=eps, k=k, noise=noise, recover=False)
    _, t = pca_sensitivity(SCHEMA, k)
    b = 2 * t / eps
    err = rel.normalised - SCHEMA.encode(X)
    assert np.mean(np.sum(err ** 2, axis=1)) / (k * 2 * b * b) == pytest.approx(1, abs=5 * math.sqrt(5 / 2800))
    assert np.allclose(rel.components.T @ rel.components, np.eye(k), atol=1e-9)


@pytest.mark.parametrize("noise", [random.Random(4), np.random.default_rng(4)], ids=["exact", "numpy"])
def test_lap_baseline_scale(noise):
    """Entries get Lap((p1 + 2 p2)/eps) = Lap(6/eps); 2800 entries, tolerance 5 sd as above."""
    _, z = laplace_publish(X, schema=SCHEMA, epsilon=1.0, noise=noise, recover=False)
    err = z - SCHEMA.encode(X)
    assert err.var() / (2 * 36.0) == pytest.approx(1, abs=5 * math.sqrt(5 / err.size))


@pytest.mark.parametrize("x0,eps,grid", [(0.3, 4.0, 11), (0.0, 40.0, 11), (0.55, 0.05, 21), (1.0, 300.0, 21)])
def test_exp_baseline_distribution(x0, eps, grid):
    """One column at x0: the numpy sampler's frequencies match the exact mechanism's pmf (total
    variation < 0.03; its expected value at 40000 draws over <= 21 cells is below 0.01)."""
    from dpsense.cloud.privacy.mechanisms import Exponential
    s = Schema(bounds=((0, 1),))
    x = np.full((40000, 1), x0)
    _, z = exponential_publish(x, schema=s, epsilon=eps, grid=grid, noise=np.random.default_rng(5), recover=False)
    g = np.linspace(0, 1, grid)
    freq = np.array([(np.isclose(z[:, 0], v)).mean() for v in g])
    pmf = Exponential(epsilon=eps, sensitivity=1).probabilities(list(-np.abs(g - x0)))
    assert 0.5 * np.abs(freq - pmf).sum() < 0.03


def test_exp_baseline_exact_path():
    s = Schema(bounds=((0, 1),))
    x = np.full((5, 1), 0.3)
    grid = np.linspace(0, 1, 11)
    _, z2 = exponential_publish(x, schema=s, epsilon=4.0, grid=11, noise=random.Random(5), recover=False)
    assert set(np.round(z2[:, 0], 9)) <= set(np.round(grid, 9))


# -- behaviour -----------------------------------------------------------------------------


def test_negative_eigenvalues_are_handled():
    """Tiny n, small epsilon: the noisy covariance is indefinite; the release is still well formed."""
    x, _ = data(n=20, seed=2)
    rel = dp_pca_publish(x, schema=SCHEMA, epsilon=0.1, k=3, noise=np.random.default_rng(2))
    assert rel.negative_eigenvalues > 0
    assert np.all(np.diff(rel.eigenvalues) <= 0)
    assert np.all(np.isfinite(rel.values)) and rel.values.shape == x.shape
    assert np.all((rel.values[:, 0] >= 0) & (rel.values[:, 0] <= 10))
    assert np.all(rel.values[:, 2:5].sum(axis=1) == 1) and np.all(rel.values[:, 5:].sum(axis=1) == 1)


def test_dp_pca_at_large_epsilon_is_pca():
    x, _ = data(n=2000, seed=3)
    rel = dp_pca_publish(x, schema=SCHEMA, epsilon=1e6, k=SCHEMA.p, noise=np.random.default_rng(3))
    assert np.max(np.abs(rel.values - x)) < 1e-2


def test_exact_path_runs_end_to_end():
    x, y = data(n=30, seed=4)
    rng = random.Random(9)
    rel = dp_pca_publish(x, schema=SCHEMA, epsilon=1, k=2, noise=rng)
    syn = dp_lda_synthesise(x, y, schema=SCHEMA, epsilon=1, noise=rng)
    assert rel.values.shape == x.shape and syn.values.shape == x.shape


def test_dp_lda_counts_are_noised_and_stats_match_at_large_epsilon():
    x, y = data(n=3000, seed=5)
    syn = dp_lda_synthesise(x, y, schema=SCHEMA, epsilon=1e5, noise=np.random.default_rng(5))
    z = SCHEMA.encode(x)
    assert syn.class_counts.sum() == pytest.approx(len(x))
    assert abs(syn.class_counts[1] - y.sum()) < 1.0
    for c in (0, 1):
        assert np.abs(syn.normalised[syn.labels == c].mean(0) - z[y == c].mean(0)).max() < 0.03
    m2 = syn.normalised.T @ syn.normalised / len(x)
    assert np.abs(m2 - z.T @ z / len(x)).max() < 0.03
    # small count budget: the released class size differs from the true one
    syn2 = dp_lda_synthesise(x, y, schema=SCHEMA, epsilon=0.05, count_share=0.1, n_synthetic=10,
                             noise=np.random.default_rng(6))
    assert syn2.class_counts[1] != y.sum()
