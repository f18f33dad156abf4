"""The Gaussian mechanism: exact discrete Gaussian noise, and a calibration that is (epsilon, delta)-DP.

Seeded. Each fit passes when p > 1e-4; with four fits a correct sampler fails a
given set of seeds with probability at most 4e-4. The power test shows that 20k
draws see a 10% error in sigma.
"""
import math
import random
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpsense.cloud.privacy.discrete import zcdp_delta
from dpsense.cloud.privacy.mechanisms import Gaussian
from tests.cloud.privacy.fit import (
    LEVEL,
    bin_probabilities,
    bins_from_cdf,
    chi_square,
    discrete_gaussian_cdf,
    miss_probability,
    normal_grid_cdf,
)

N = 20_000


def noise(mech: Gaussian, value: float, n: int) -> np.ndarray:
    g = mech.granularity
    i = round(Fraction(value) / g)
    return np.array([int(Fraction(mech.randomise(value)) / g) - i for _ in range(n)], dtype=np.int64)


def exact_bins(sigma2: float, n_bins: int = 30):
    span = int(40 * math.sqrt(sigma2)) + 10
    cdf = discrete_gaussian_cdf(sigma2, -span, span)
    upper = bins_from_cdf(cdf, -span, span, n_bins)
    return upper, bin_probabilities(cdf, upper)


@pytest.mark.parametrize("seed, calibration, eps", [(31, "zcdp", 1.0), (32, "classical", 0.5), (33, "zcdp", 0.1)],
                         ids=["zcdp-1", "classical-0.5", "zcdp-0.1"])
def test_small_sigma_fits_exact_pmf(seed, calibration, eps):
    """Chi-square of 20k draws at sigma of 3 to 40 grid steps against the pmf summed exactly."""
    mech = Gaussian(epsilon=eps, delta=0.01, sensitivity=1, calibration=calibration, granularity=1,
                    values_on_grid=True, rng=random.Random(seed))
    upper, prob = exact_bins(float(mech.grid_sigma2))
    fit = chi_square(noise(mech, 5, N), upper, prob)
    assert fit.dof >= 8
    assert fit.pvalue > LEVEL, fit


def test_default_grid_fits_normal():
    """Default grid (sigma about 2**32 steps): bins from the normal cdf, exact to 1e-9 per bin."""
    mech = Gaussian(epsilon=1, delta=1e-6, sensitivity=2, rng=random.Random(34))
    sigma = math.sqrt(float(mech.grid_sigma2))
    assert sigma > 2**30
    cdf = normal_grid_cdf(sigma)
    span = int(40 * sigma)
    upper = bins_from_cdf(cdf, -span, span, 40)
    fit = chi_square(noise(mech, 123.456, N), upper, bin_probabilities(cdf, upper))
    assert fit.pvalue > LEVEL, fit


@pytest.mark.parametrize("factor", [1.1, 1 / 1.1], ids=["10% larger", "10% smaller"])
def test_fit_rejects_a_10_percent_wrong_sigma(factor):
    """Power: draws with sigma off by 10% fail; the chance they would pass is asserted < 1e-6."""
    claimed = Gaussian(epsilon=0.5, delta=0.01, sensitivity=1, granularity=1, values_on_grid=True)
    wrong = Gaussian(epsilon=0.5, delta=0.01, sensitivity=1, granularity=1, values_on_grid=True,
                     rng=random.Random(35))
    wrong.grid_sigma2 = claimed.grid_sigma2 * Fraction(factor) ** 2
    upper, prob = exact_bins(float(claimed.grid_sigma2))
    s2 = float(wrong.grid_sigma2)
    span = int(40 * math.sqrt(s2)) + 10
    alt = bin_probabilities(discrete_gaussian_cdf(s2, -span, span), upper)
    assert miss_probability(N, prob, alt) < 1e-6
    assert chi_square(noise(wrong, 0, N), upper, prob).pvalue < LEVEL


def discrete_delta(sigma2: float, eps: float, t: int = 1) -> float:
    """Exact delta of N_Z(0, sigma2) at integer sensitivity t (CKS 2020, Theorem 7), by summation."""
    span = int(60 * math.sqrt(sigma2)) + 10
    ys = np.arange(-span, span + 1)
    p = np.exp(-(ys.astype(np.float64) ** 2) / (2 * sigma2))
    p /= p.sum()
    lower = math.floor(eps * sigma2 / t - t / 2) + 1
    upper = math.floor(eps * sigma2 / t + t / 2) + 1
    return float(p[ys >= lower].sum() - math.exp(eps) * p[ys >= upper].sum())


def continuous_delta(sigma: float, eps: float) -> float:
    """Exact delta of N(0, sigma**2) at sensitivity 1 (Balle and Wang 2018)."""
    return float(stats.norm.cdf(0.5 / sigma - eps * sigma) - math.exp(eps) * stats.norm.cdf(-0.5 / sigma - eps * sigma))


@pytest.mark.parametrize("eps, delta", [(0.1, 0.01), (0.5, 1e-5), (1.0, 1e-6), (3.0, 1e-3)])
def test_zcdp_calibration_is_dp_and_tight(eps, delta):
    """The certified delta is at most the target and within 1e-6 of it; the exact delta is below it."""
    mech = Gaussian(epsilon=eps, delta=delta, sensitivity=1, granularity=1, values_on_grid=True)
    s2 = float(mech.grid_sigma2)
    assert mech.rho == pytest.approx(1 / (2 * s2), rel=1e-12)
    certified = zcdp_delta(mech.rho, eps)
    assert delta * (1 - 1e-6) < certified <= delta
    assert discrete_delta(s2, eps) <= certified
    assert continuous_delta(math.sqrt(s2), eps) <= certified


def test_classical_calibration_matches_spec_table():
    """Okada et al. 2015, Thm. 1 and the Synthetic-1 baseline: sigma_global = GS * sqrt(2 ln(2/delta)) / epsilon, 423.2 at GS=13, epsilon=0.1."""
    for eps, expected in [(0.1, 423.2), (0.5, 84.6), (0.9, 47.0)]:
        mech = Gaussian(epsilon=eps, delta=0.01, sensitivity=13, calibration="classical")
        assert mech.sigma == pytest.approx(expected, abs=0.06)
        assert zcdp_delta(mech.rho, eps) <= 0.01


def test_classical_calibration_refused_where_not_certified():
    """At epsilon 8 the zCDP conversion gives delta 0.035 for the classical sigma: refused."""
    with pytest.raises(ValueError, match="not certified"):
        Gaussian(epsilon=8, delta=0.01, sensitivity=1, calibration="classical")


def test_zcdp_delta_is_below_the_standard_bound():
    """CKS's conversion is never worse than Bun-Steinke's exp(-(eps - rho)**2 / (4 rho))."""
    for rho in (1e-4, 1e-2, 0.5):
        for eps in (0.1, 1.0, 5.0):
            if eps > rho:
                assert zcdp_delta(rho, eps) <= math.exp(-((eps - rho) ** 2) / (4 * rho)) * (1 + 1e-12)
    assert zcdp_delta(0.0, 1.0) == 0.0
