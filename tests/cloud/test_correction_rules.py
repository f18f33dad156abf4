"""The correction protocol of Böhler et al. 2017, Sect. 6 on toy windows whose answers can be read off by hand."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsense.cloud.correction import (
    CorrectionParams,
    RowReduction,
    false_negatives,
    reduce_rows,
    run_protocol,
    split_presumed,
)

# A 12-row window. Rows 0-5 are the presumed outliers O'. Their d_diff values form two
# clear groups, 10..13 (true positives) and 200..201 (false positives), so every split
# rule cuts at 13: TP = {0,1,2,3}, FP = {4,5}, d_TP = 10, d_FP = 200.
# Rows 6-11 are outside O':
#   row  d_diff  dist   why
#   6      -3      1    d_diff < 0                          -> FN_L1
#   7       5     50    0 <= 5 < d_TP, dist >= d_TP         -> FN_L2
#   8      30    100    d_TP <= 30 < d_TP + w_O = 60        -> FN_L3 under R1, R2, R3
#   9     100    100    60 <= 100 < d_FP = 200              -> FN_L3 under R2, R3
#  10     300    100    300 >= d_FP                         -> FN_L3 under R3 only
#  11       8      5    like row 7, but dist < d_TP: removed by the row reduction
D_DIFF = np.array([10, 11, 12, 13, 200, 201, -3, 5, 30, 100, 300, 8], dtype=float)
DIST = np.array([400, 400, 400, 400, 400, 400, 1, 50, 100, 100, 100, 5], dtype=float)
PRESUMED = np.arange(6)
W_O = 50.0


def params(**kw):
    return CorrectionParams(w_o=kw.pop("w_o", W_O), **kw)


@pytest.mark.parametrize("split", ["gap", "trimmed_gap", "otsu"])
def test_line3_splits_two_clear_groups(split):
    s = split_presumed(D_DIFF, PRESUMED, params(split=split))
    assert s.tp.tolist() == [0, 1, 2, 3]
    assert s.fp.tolist() == [4, 5]
    assert (s.d_tp, s.d_fp, s.threshold, s.accepted) == (10.0, 200.0, 13.0, True)


def test_line4_row_reduction():
    rows = reduce_rows(DIST, PRESUMED, d_tp=10.0, w_o=W_O)
    assert rows.i_l2.tolist() == [7, 8, 9, 10]          # dist >= 10, outside O'
    assert rows.i_l3.tolist() == [8, 9, 10]             # dist >= 60


@pytest.mark.parametrize("bound, l3", [("R1", [8]), ("R2", [8, 9]), ("R3", [8, 9, 10])])
def test_line5_layers_and_the_three_readings_of_the_l3_bound(bound, l3):
    p = params(bound=bound)
    s = split_presumed(D_DIFF, PRESUMED, p)
    fn = false_negatives(D_DIFF, PRESUMED, reduce_rows(DIST, PRESUMED, s.d_tp, p.w_o), s, p)
    assert fn.l1.tolist() == [6]
    assert fn.l2.tolist() == [7]
    assert fn.l3.tolist() == l3


def test_run_protocol_chains_the_parties():
    res = run_protocol(D_DIFF, DIST, PRESUMED, params())
    assert res.r.tolist() == [0, 1, 2, 3, 6, 7, 8]
    assert res.fp.tolist() == [4, 5] and res.tp.tolist() == [0, 1, 2, 3]
    assert res.rows.i_l2.tolist() == [7, 8, 9, 10]
    assert (res.fn.l1.tolist(), res.fn.l2.tolist(), res.fn.l3.tolist()) == ([6], [7], [8])


def test_unsorted_presumed_gives_the_same_answer():
    res = run_protocol(D_DIFF, DIST, PRESUMED[::-1], params())
    assert res.r.tolist() == [0, 1, 2, 3, 6, 7, 8]


def test_l2_bound_is_w_o_when_fp_is_empty():
    # Only the true-positive group is presumed and a strict guard refuses to split it:
    # d_FP = +inf, so R1's bound is d_TP + w_O = 60 and R2 has no upper bound.
    tp_only = np.arange(4)
    r1 = run_protocol(D_DIFF, DIST, tp_only, params(bound="R1", kappa_sep=100.0))
    r2 = run_protocol(D_DIFF, DIST, tp_only, params(bound="R2", kappa_sep=100.0))
    assert r1.fp.size == 0 and r1.split.d_fp == math.inf
    assert r1.fn.l3.tolist() == [8]
    assert r2.fn.l3.tolist() == [4, 5, 8, 9, 10]     # rows 4, 5 are outside O' here


def test_fewer_than_two_presumed_outliers_are_all_true_positives():
    one = run_protocol(D_DIFF, DIST, [4], params())
    assert one.tp.tolist() == [4] and one.fp.size == 0
    assert one.split.d_tp == 200.0 and not one.split.accepted
    assert math.isnan(one.split.threshold)


def test_no_presumed_outliers_skips_l2_and_l3():
    # TP is empty: d_TP = +inf, so the row reduction is empty and only L1 is searched.
    res = run_protocol(D_DIFF, DIST, np.array([], dtype=int), params())
    assert res.split.d_tp == math.inf and res.split.d_fp == math.inf
    assert res.rows.i_l2.size == 0 and res.rows.i_l3.size == 0
    assert res.fn.l2.size == 0 and res.fn.l3.size == 0
    assert res.r.tolist() == [6]


def test_line5_skips_l2_and_l3_when_tp_is_empty_even_if_a_sets_arrive():
    s = split_presumed(D_DIFF, [], params())
    rows = RowReduction(i_l2=np.arange(12), i_l3=np.arange(12))
    fn = false_negatives(D_DIFF, [], rows, s, params())
    assert fn.l1.tolist() == [6] and fn.l2.size == 0 and fn.l3.size == 0


def test_negative_d_tp_empties_l2_and_widens_the_row_reduction():
    # O' = rows 0-2, all with d_diff -50 (nothing to split): d_TP = -50 < 0.
    d = np.array([-50, -50, -50, -5, 2, 7], dtype=float)
    dist = np.array([300, 300, 300, 0.5, 1, 40], dtype=float)
    res = run_protocol(d, dist, [0, 1, 2], params(w_o=60.0))
    assert res.split.d_tp == -50.0
    assert res.rows.i_l2.tolist() == [3, 4, 5]          # every row outside O'
    assert res.fn.l2.size == 0                          # 0 <= d < -50 is impossible
    assert res.rows.i_l3.tolist() == [5]                # dist >= -50 + 60 = 10
    assert res.fn.l3.tolist() == [5]                    # -50 <= 7 < 10
    assert res.fn.l1.tolist() == [3]
    assert res.r.tolist() == [0, 1, 2, 3, 5]


def test_l1_and_l3_may_share_rows_and_r_counts_them_once():
    d = np.array([-50, -50, -50, -5], dtype=float)
    dist = np.array([300, 300, 300, 100], dtype=float)
    res = run_protocol(d, dist, [0, 1, 2], params(w_o=60.0))
    assert res.fn.l1.tolist() == [3] and res.fn.l3.tolist() == [3]
    assert res.r.tolist() == [0, 1, 2, 3]


def test_the_paper_literal_gap_isolates_an_extreme_row():
    # Pitfall of the largest-gap split (2017 reconstruction): on a continuous sample the largest spacing lies in the tail.
    rng = np.random.default_rng(7)
    d = rng.exponential(10.0, size=5000)
    presumed = np.arange(5000)
    gap = split_presumed(d, presumed, params(split="gap", guard=False))
    assert 1 <= gap.fp.size <= 3
    trimmed = split_presumed(d, presumed, params(split="trimmed_gap", guard=False))
    assert trimmed.threshold < np.quantile(d, 0.995)


def test_guard_rejects_a_unimodal_split_and_accepts_a_bimodal_one():
    rng = np.random.default_rng(3)
    one_mode = rng.normal(0.0, 10.0, size=4000)
    presumed = np.arange(4000)
    forced = split_presumed(one_mode, presumed, params(guard=False))
    guarded = split_presumed(one_mode, presumed, params())
    assert forced.fp.size > 1000 and forced.accepted
    assert guarded.fp.size == 0 and not guarded.accepted
    assert guarded.tp.size == 4000 and guarded.d_fp == math.inf
    two_modes = np.concatenate([rng.normal(0.0, 10.0, 3000), rng.normal(200.0, 10.0, 1000)])
    s = split_presumed(two_modes, presumed, params())
    assert s.accepted and s.fp.tolist() == list(range(3000, 4000))


def test_guard_gap_test_and_class_share():
    v = np.array([0, 1, 2, 3, 4, 5, 6, 7, 8, 100], dtype=float)
    presumed = np.arange(10)
    # One row against nine is 10 % of O': accepted with min_class 0.05, not with 0.2.
    assert split_presumed(v, presumed, params(split="gap")).fp.tolist() == [9]
    assert split_presumed(v, presumed, params(split="gap", min_class=0.2)).fp.size == 0
    # The gap 92 is 92 median spacings.
    assert split_presumed(v, presumed, params(split="gap", kappa_gap=90.0)).fp.tolist() == [9]
    assert split_presumed(v, presumed, params(split="gap", kappa_gap=95.0)).fp.size == 0


def test_equal_values_are_never_split():
    s = split_presumed(np.full(8, 4.0), np.arange(8), params(guard=False))
    assert s.fp.size == 0 and s.tp.size == 8 and s.d_tp == 4.0


def test_parties_accept_integer_quanta():
    res = run_protocol(D_DIFF.astype(np.int64), DIST.astype(np.int64), PRESUMED, params())
    assert res.r.tolist() == [0, 1, 2, 3, 6, 7, 8]


@pytest.mark.parametrize("kwargs, exc", [
    ({"w_o": -1.0}, ValueError),
    ({"w_o": math.nan}, ValueError),
    ({"w_o": math.inf}, ValueError),
    ({"w_o": "5"}, TypeError),
    ({"w_o": True}, TypeError),
    ({"w_o": 1.0, "split": "median"}, ValueError),
    ({"w_o": 1.0, "bound": "R4"}, ValueError),
    ({"w_o": 1.0, "guard": 1}, TypeError),
    ({"w_o": 1.0, "kappa_sep": -1.0}, ValueError),
    ({"w_o": 1.0, "kappa_gap": math.inf}, ValueError),
    ({"w_o": 1.0, "min_class": 0.5}, ValueError),
    ({"w_o": 1.0, "central": 0.0}, ValueError),
    ({"w_o": 1.0, "central": 1.5}, ValueError),
])
def test_params_validation(kwargs, exc):
    with pytest.raises(exc):
        CorrectionParams(**kwargs)


def test_params_are_frozen():
    p = params()
    with pytest.raises(AttributeError):
        p.w_o = 3.0


@pytest.mark.parametrize("d, presumed", [
    (np.zeros((3, 2)), [0]),               # not 1-D
    (np.array([0.0, math.nan]), [0]),      # NaN
    (np.zeros(4), [0, 4]),                 # out of range
    (np.zeros(4), [-1]),
    (np.zeros(4), [1, 1]),                 # duplicate
    (np.zeros(4), [0.5]),                  # not row positions
])
def test_window_validation(d, presumed):
    with pytest.raises(ValueError):
        split_presumed(d, presumed, params())


def test_run_protocol_rejects_mismatched_party_inputs():
    with pytest.raises(ValueError):
        run_protocol(D_DIFF, DIST[:-1], PRESUMED, params())


@st.composite
def windows(draw):
    n = draw(st.integers(1, 60))
    ints = draw(st.booleans())
    elem = st.integers(-300, 300) if ints else st.floats(-300, 300, allow_nan=False)
    d = np.array(draw(st.lists(elem, min_size=n, max_size=n)), dtype=float)
    dist = np.array(draw(st.lists(st.floats(0, 500), min_size=n, max_size=n)), dtype=float)
    presumed = np.array(sorted(draw(st.sets(st.integers(0, n - 1), max_size=n))), dtype=int)
    p = CorrectionParams(w_o=draw(st.floats(0, 200)), split=draw(st.sampled_from(["gap", "trimmed_gap", "otsu"])),
                         bound=draw(st.sampled_from(["R1", "R2", "R3"])), guard=draw(st.booleans()),
                         kappa_sep=draw(st.sampled_from([0.0, 1.0, 3.0])))
    return d, dist, presumed, p


@settings(max_examples=300, deadline=None)
@given(windows())
def test_protocol_invariants(w):
    d, dist, presumed, p = w
    res = run_protocol(d, dist, presumed, p)
    fp, tp = set(res.fp.tolist()), set(res.tp.tolist())
    assert fp | tp == set(presumed.tolist())
    assert not fp & tp
    r = set(res.r.tolist())
    assert not r & fp
    assert tp <= r
    assert r == tp | set(res.fn.l1.tolist()) | set(res.fn.l2.tolist()) | set(res.fn.l3.tolist())
    for layer in (res.fn.l1, res.fn.l2, res.fn.l3):
        assert not set(layer.tolist()) & set(presumed.tolist())
    if fp:
        assert d[res.fp].min() > d[res.tp].max()
        assert res.split.d_fp == d[res.fp].min()
    if tp:
        assert res.split.d_tp == d[res.tp].min()
    else:
        assert res.split.d_tp == math.inf and res.fn.l2.size == 0 and res.fn.l3.size == 0
    assert np.all(np.diff(res.r) > 0)


# The never-worse rule (module docstring of rules.py) on toy windows.
#
# One column (m = 1), b = 10, alpha = exp(-3): kappa = 3 exactly (the one-column tail is
# exp(-kappa)), so tau = 3 * 10 + 1 + 1 = 32. Rows 0-4 are O' with d_diff 0, 10, 31, 33, 100:
# rows 3 and 4 lie above tau and are the false positives, d_TP = 0, d_FP = 33.
NOISE = dict(split="noise", noise_scale=10.0, columns=1, alpha=math.exp(-3.0))


def test_noise_split_cuts_at_kappa_b_plus_m_plus_1():
    p = params(**NOISE)
    assert p.tau() == pytest.approx(32.0)
    s = split_presumed(np.array([0, 10, 31, 33, 100, 500], dtype=float), np.arange(5), p)
    assert s.fp.tolist() == [3, 4] and s.tp.tolist() == [0, 1, 2]
    assert (s.d_tp, s.d_fp, s.accepted) == (0.0, 33.0, True)


def test_noise_split_with_nothing_above_tau_keeps_o_prime():
    s = split_presumed(np.array([0, 10, 31, 32], dtype=float), np.arange(4), params(**NOISE))
    assert s.fp.size == 0 and s.tp.tolist() == [0, 1, 2, 3] and not s.accepted


@pytest.mark.parametrize("m", [1, 2, 3, 5])
@pytest.mark.parametrize("alpha", [0.3, 0.005, 1e-6])
def test_kappa_solves_the_gamma_tail(m, alpha):
    from scipy import stats

    from dpsense.cloud.correction.rules import noise_kappa
    kappa = noise_kappa(m, alpha)
    assert stats.gamma.sf(kappa, m) == pytest.approx(alpha, rel=1e-9)


# Provable layers, rho = 5 (slack rho + 1 = 6), w_O = 50. O' = rows 0-2 with d_diff 20, 25,
# 200; with the noise split above (tau = 32) row 2 is the false positive and d_TP = 20.
#   row  d_diff  dist   why
#   3      -7      1    outside O', d_diff < -6                    -> FN_L1
#   4      -6      1    -6 is not < -6                              -> nothing
#   5      13     30    I_L2 (dist >= 20), 13 < 20 - 6 = 14         -> FN_L2
#   6      14     30    I_L2, 14 is not < 14                        -> nothing
#   7      63     80    I_L3 (dist >= 70), 63 < 20 + 50 - 6 = 64    -> FN_L3
#   8      64     80    64 is not < 64                              -> nothing
#   9       0     10    dist < d_TP: in no I_L set, d_diff >= -6    -> nothing
PD = np.array([20, 25, 200, -7, -6, 13, 14, 63, 64, 0], dtype=float)
PDIST = np.array([90, 90, 90, 1, 1, 30, 30, 80, 80, 10], dtype=float)


def test_provable_layers_add_only_rows_beyond_rho():
    p = params(w_o=50.0, layers="provable", normal_radius=5.0, **NOISE)
    res = run_protocol(PD, PDIST, [0, 1, 2], p)
    assert res.fp.tolist() == [2]
    assert (res.fn.l1.tolist(), res.fn.l2.tolist(), res.fn.l3.tolist()) == ([3], [5], [7])
    assert res.r.tolist() == [0, 1, 3, 5, 7]
    # Each added row's raw distance dist - d_diff - 1 exceeds rho.
    added = np.setdiff1d(res.r, [0, 1, 2])
    assert (np.maximum(PDIST[added], 0) - PD[added] - 1 > 5.0).all()


def test_needs_round_and_normal_radius():
    from dpsense.cloud.correction.rules import needs_round, normal_radius
    assert not needs_round(1040, 10_000, 0.10, 0.05)        # |O'| 4 % above 1000: skip
    assert needs_round(1060, 10_000, 0.10, 0.05)
    assert needs_round(900, 10_000, 0.10, 0.05)             # too few: a round may add outliers
    assert needs_round(1000, 10_000, 0.10, -1.0)            # a negative margin never skips
    assert normal_radius([6.0, 8.0]) == 5.0


@pytest.mark.parametrize("kwargs", [
    {"split": "noise"},                                     # no noise scale
    {"split": "noise", "noise_scale": -1.0},
    {"layers": "provable"},                                 # no normal radius
    {"layers": "exact", "normal_radius": 1.0},
    {"alpha": 0.0}, {"alpha": 1.0},
    {"columns": 0},
])
def test_never_worse_parameters_are_checked(kwargs):
    with pytest.raises((ValueError, TypeError)):
        params(**kwargs)


def test_provable_l1_allows_for_the_rounding_of_d_diff():
    # c = (0, 0), raw x = (3, 2): distance 3.606, normal for rho = 3.7, but its rounded
    # distance is 4; released at the centre, d_diff = 0 - 4 = -4 < -rho. Only the bound
    # with the rounding slack, -4 < -rho - 1, keeps it out of FN_L1.
    from dpsense.protocol.distance import distance_difference
    d = float(distance_difference([3, 2], [0, 0], [0, 0]))
    assert d == -4.0
    p = params(w_o=10.0, layers="provable", normal_radius=3.7, **NOISE)
    res = run_protocol(np.array([d, 0.0, 0.0]), np.array([0.0, 50.0, 50.0]), [1, 2], p)
    assert res.fn.l1.size == 0
