"""Relaxed sensitivity from reference data: the percentile estimate is inflated by the empty gap,
the narrowest-range estimate is not (issue 13).

Reference seeds 1001-1020 are the reference data sets of data seeds 1-20 in
``dpsense experiment paper1``. At separation 400 the paper's 95th - 5th percentile is
about 12.6 for most (seed, column) pairs, but in 9 of the 40 the outliers of one side hold
about 5 % of the column and the percentile lands on the sparse values past the core:
13.6 to 26.8. The narrowest interval holding 90 % of the values stays on the core.
Deterministic (seeded generator), no tolerance for chance.
"""
import numpy as np
import pytest

from dpsense.cloud.sim.datasets import paper1_synthetic, relaxed_sensitivity

SEEDS = range(1001, 1021)


@pytest.fixture(scope="module")
def references():
    return [paper1_synthetic(100_000, 400.0, "scale", 0.10, seed=s).x for s in SEEDS]


def test_the_percentile_estimate_is_inflated_on_9_of_40_pairs(references):
    rs = np.array([relaxed_sensitivity(x, 10.0, "percentile") for x in references])
    inflated = rs > 13.0
    assert int(inflated.sum()) == 9
    assert rs.max() == pytest.approx(26.76, abs=0.01)
    assert np.median(rs) == pytest.approx(12.6, abs=0.05)
    assert (rs[~inflated] < 12.9).all()          # the rest are the normal value


def test_the_narrowest_range_is_not_inflated_on_those_seeds(references):
    rs = np.array([relaxed_sensitivity(x, 10.0, "shorth") for x in references])
    assert rs.min() > 12.4 and rs.max() < 12.8
    # Where the percentile is not inflated the two estimates agree within 2 % (the one
    # pair at 12.84 is a mild case of the same effect).
    pct = np.array([relaxed_sensitivity(x, 10.0, "percentile") for x in references])
    ok = pct <= 13.0
    assert np.allclose(rs[ok], pct[ok], rtol=0.02)


def test_an_empty_gap_does_not_widen_the_narrowest_range():
    # 90 points on [0, 9], 10 points at 1000-1009: the percentile interpolates into the
    # gap, the narrowest 90 % range is the core's width.
    x = np.concatenate([np.linspace(0.0, 9.0, 90), np.linspace(1000.0, 1009.0, 10)])[:, None]
    assert relaxed_sensitivity(x, 10.0, "shorth")[0] == pytest.approx(9.0)
    assert relaxed_sensitivity(x, 10.0, "percentile")[0] > 100.0


def test_unknown_method():
    with pytest.raises(ValueError):
        relaxed_sensitivity(np.zeros((10, 1)), 10.0, "median")
