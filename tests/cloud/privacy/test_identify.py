"""(beta, r)-anomaly identification: mdd closed forms and privacy by brute force (Asif et al. 2019, sensitive privacy and the mdd mechanisms).

The brute-force universe is the setting of Asif et al. 2019, Fig. 4: values {0, ..., 4} on a line, the
l1 metric, r = 1, so the ball of a value holds itself and its two neighbours. Data
sets are histograms with counts 0..CAP per value. Probabilities are exact rationals:
``epsilon = ln(1/q)`` with a rational ``q``, so ``exp(-epsilon * Delta) = q**Delta``.
"""
import itertools
import math
import random
from collections import deque
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpsense.cloud.privacy.accountant import BudgetAccountant, BudgetError
from dpsense.cloud.privacy.identify import (
    AnomalyQuery,
    DPAnomalyIdentification,
    SPAnomalyIdentification,
    ball_and_copies,
    ball_and_copies_many,
    batch_multiplicity,
    flip_probability,
    flip_probability_exact,
    identify,
    identify_many,
    is_anomaly,
    is_sensitive,
    mdd_dp,
    mdd_sp,
)

CELLS = 5
R = 1


def ball(x, i):
    return sum(x[j] for j in range(CELLS) if abs(i - j) <= R)


def g(x, i, beta):
    return int(x[i] > 0 and ball(x, i) <= beta)


def states(cap):
    return list(itertools.product(range(cap + 1), repeat=CELLS))


def neighbours_up(x, cap):
    """(j, y) with y = x + e_j inside the cap."""
    for j in range(CELLS):
        if x[j] < cap:
            y = list(x)
            y[j] += 1
            yield j, tuple(y)


def sensitive_brute(x, j, beta, k):
    """Whether j is k-sensitive w.r.t. x: some y with ||x - y||_1 <= k has j present and normal.

    Searches the unbounded lattice (changes of total size <= k), so the answer is exact.
    """
    frontier = {tuple(x)}
    seen = set(frontier)
    for _ in range(k + 1):
        for z in frontier:
            if z[j] > 0 and ball(z, j) > beta:
                return True
        nxt = set()
        for z in frontier:
            for t in range(CELLS):
                for s in (-1, 1):
                    if z[t] + s >= 0:
                        w = list(z)
                        w[t] += s
                        w = tuple(w)
                        if w not in seen:
                            seen.add(w)
                            nxt.add(w)
        frontier = nxt
    return False


def edges(cap, keep):
    """Undirected edges (x, x + e_j) inside the cap for which keep(x, j, y) holds."""
    out = []
    for x in states(cap):
        for j, y in neighbours_up(x, cap):
            if keep(x, j, y):
                out.append((x, y))
    return out


def mdd_bfs(cap, edge_list, i, beta):
    """Exact mdd inside the capped region: multi-source BFS from the other answer's states."""
    adj = {x: [] for x in states(cap)}
    for x, y in edge_list:
        adj[x].append(y)
        adj[y].append(x)
    dist = {}
    for label in (0, 1):
        d = {x: 0 for x in adj if g(x, i, beta) != label}
        q = deque(d)
        while q:
            z = q.popleft()
            for w in adj[z]:
                if w not in d:
                    d[w] = d[z] + 1
                    q.append(w)
        for x in adj:
            if g(x, i, beta) == label:
                dist[x] = d.get(x, math.inf)
    return dist


def h_keep(i, beta, k):
    return lambda x, j, y: j != i or ball(y, i) >= beta - k + 1


def gs_keep(beta, k):
    cache = {}

    def sens(z, j):
        key = (z, j)
        if key not in cache:
            cache[key] = sensitive_brute(z, j, beta, k)
        return cache[key]
    return lambda x, j, y: sens(x, j) or sens(y, j)


# -- mdd closed forms vs brute force -------------------------------------------------

CAP = 5


@pytest.mark.parametrize("i", [0, 2])
@pytest.mark.parametrize("beta", [1, 3])
def test_mdd_dp_equals_brute_force(i, beta):
    dist = mdd_bfs(CAP, edges(CAP, lambda x, j, y: True), i, beta)
    inner = 0
    for x, d in dist.items():
        formula = mdd_dp(ball(x, i), x[i], beta)
        assert formula <= d            # the cap only removes paths
        if max(x) <= CAP - beta - 1:  # room for every shortest path inside the cap
            assert formula == d, (x, formula, d)
            inner += 1
    assert inner >= 32


@pytest.mark.parametrize("i,beta,k", [(2, 3, 1), (2, 3, 2), (0, 3, 1), (2, 2, 1), (2, 4, 2)])
def test_mdd_sp_equals_brute_force_on_h(i, beta, k):
    dist = mdd_bfs(CAP, edges(CAP, h_keep(i, beta, k)), i, beta)
    inner = 0
    for x, d in dist.items():
        formula = mdd_sp(ball(x, i), x[i], beta, k)
        assert formula <= d
        if max(x) <= CAP - beta - 1 or max(x) <= 1:
            assert formula == d, (x, formula, d)
            inner += 1
    assert inner >= 32


def test_mdd_sp_is_mdd_dp_when_every_record_is_sensitive():
    for beta in range(1, 6):
        for b in range(0, 12):
            for c in range(0, b + 1):
                assert mdd_sp(b, c, beta, beta + 1) == mdd_dp(b, c, beta)
                assert mdd_sp(b, c, beta, beta + 7) == mdd_dp(b, c, beta)
                assert mdd_sp(b, c, beta, 1) >= mdd_dp(b, c, beta)


@pytest.mark.parametrize("beta,k", [(3, 1), (3, 2), (2, 1)])
def test_sensitivity_closed_form_equals_brute_force(beta, k):
    for x in states(2):
        for j in range(CELLS):
            assert sensitive_brute(x, j, beta, k) == is_sensitive(ball(x, j), beta, k), (x, j)


def test_h_contains_gs_so_delta_h_is_a_lower_bound():
    beta, k, i = 3, 1, 2
    keep_gs, keep_h = gs_keep(beta, k), h_keep(i, beta, k)
    for x in states(3):
        for j, y in neighbours_up(x, 3):
            if keep_gs(x, j, y):
                assert keep_h(x, j, y)


# -- exact privacy checks on every edge ----------------------------------------------

def out_prob(mdd, truth, q):
    """P(M(x) = 1) exactly."""
    e = flip_probability_exact(mdd, q)
    return 1 - e if truth else e


def max_ratio(edge_list, mdd_of, i, beta, q):
    worst = Fraction(0)
    for x, y in edge_list:
        px = out_prob(mdd_of(x), g(x, i, beta), q)
        py = out_prob(mdd_of(y), g(y, i, beta), q)
        for a, b in ((px, py), (1 - px, 1 - py)):
            worst = max(worst, a / b, b / a)
    return worst


@pytest.mark.parametrize("q", [Fraction(1, 2), Fraction(9, 10)])
@pytest.mark.parametrize("i,beta", [(2, 3), (0, 2)])
def test_dp_mechanism_is_exactly_epsilon_dp(q, i, beta):
    e = edges(4, lambda x, j, y: True)
    worst = max_ratio(e, lambda x: mdd_dp(ball(x, i), x[i], beta), i, beta, q)
    assert worst == 1 / q          # <= exp(epsilon), and attained at the boundary


@pytest.mark.parametrize("q", [Fraction(1, 2), Fraction(9, 10)])
@pytest.mark.parametrize("i,beta,k", [(2, 3, 1), (2, 3, 2), (0, 3, 1), (2, 2, 1)])
def test_sp_mechanism_is_exactly_epsilon_k_sp_and_not_dp(q, i, beta, k):
    mdd_of = lambda x: mdd_sp(ball(x, i), x[i], beta, k)  # noqa: E731
    gs = edges(4, gs_keep(beta, k))
    assert max_ratio(gs, mdd_of, i, beta, q) == 1 / q
    # On the full graph G it is not epsilon-DP: a non-sensitive anomaly loses more.
    assert max_ratio(edges(4, lambda x, j, y: True), mdd_of, i, beta, q) > 1 / q


def test_flip_probability_values():
    assert flip_probability(1, 1) == pytest.approx(1 / (1 + math.e))
    assert flip_probability(1, 0.5) == pytest.approx(0.3775, abs=1e-4)
    assert flip_probability(3, 0.5) == pytest.approx(math.exp(-1) / (1 + math.exp(0.5)))
    assert flip_probability_exact(2, Fraction(1, 2)) == Fraction(1, 6)


# -- validation tables ---------------------------------------------------------------

@pytest.mark.parametrize("kwargs,err", [
    (dict(epsilon=0, beta=3, k=1), ValueError),
    (dict(epsilon=-1, beta=3, k=1), ValueError),
    (dict(epsilon="0.5", beta=3, k=1), TypeError),
    (dict(epsilon=float("nan"), beta=3, k=1), ValueError),
    (dict(epsilon=0.5, beta=0, k=1), ValueError),
    (dict(epsilon=0.5, beta=2.0, k=1), TypeError),
    (dict(epsilon=0.5, beta=True, k=1), TypeError),
    (dict(epsilon=0.5, beta=3, k=0), ValueError),
    (dict(epsilon=0.5, beta=3, k=1.5), TypeError),
    (dict(epsilon=0.5, beta=3, k=1, rng=object()), TypeError),
])
def test_sp_parameter_validation(kwargs, err):
    with pytest.raises(err):
        SPAnomalyIdentification(**kwargs)


@pytest.mark.parametrize("call,err", [
    (lambda: mdd_dp(2, 3, 1), ValueError),        # more copies than the ball holds
    (lambda: mdd_dp(-1, 0, 1), ValueError),
    (lambda: mdd_dp(2, 1, 0), ValueError),
    (lambda: mdd_sp(2, 1, 3, 0), ValueError),
    (lambda: mdd_sp(2.0, 1, 3, 1), TypeError),
    (lambda: flip_probability(0, 1), ValueError),
    (lambda: flip_probability_exact(1, Fraction(1)), ValueError),
    (lambda: AnomalyQuery(3, -1.0), ValueError),
    (lambda: AnomalyQuery(3, float("inf")), ValueError),
    (lambda: AnomalyQuery(3, "1"), TypeError),
    (lambda: DPAnomalyIdentification(epsilon=1, beta=3).randomise(1, 2), ValueError),
    (lambda: ball_and_copies(np.zeros((3, 2)), [0.0], 1.0), ValueError),
    (lambda: ball_and_copies(np.array([[np.nan, 0.0]]), [0.0, 0.0], 1.0), ValueError),
])
def test_validation_table(call, err):
    with pytest.raises(err):
        call()


def test_closed_form_table_values():
    # One row per state of the Delta_G and Delta_H closed forms (docs/paper2.md), beta = 3, k = 1.
    assert mdd_dp(1, 1, 3) == 1 and mdd_sp(1, 1, 3, 1) == 3          # isolated anomaly
    assert mdd_dp(3, 1, 3) == 1 and mdd_sp(3, 1, 3, 1) == 1          # sensitive anomaly
    assert mdd_dp(6, 1, 3) == 3 and mdd_sp(6, 1, 3, 1) == 3          # normal
    assert mdd_dp(0, 0, 3) == 1 and mdd_sp(0, 0, 3, 1) == 3          # absent, empty ball
    assert mdd_dp(5, 0, 3) == 4 and mdd_sp(5, 0, 3, 1) == 4          # absent, full ball
    assert is_anomaly(3, 1, 3) == 1 and is_anomaly(4, 1, 3) == 0 and is_anomaly(0, 0, 3) == 0


# -- sampling: exact probabilities, checked statistically ----------------------------

@pytest.mark.parametrize("mech,b,c", [
    (DPAnomalyIdentification(epsilon=0.5, beta=3, rng=random.Random(11)), 1, 1),
    (SPAnomalyIdentification(epsilon=0.5, beta=3, k=1, rng=random.Random(12)), 1, 1),
    (SPAnomalyIdentification(epsilon=1, beta=3, k=1, rng=random.Random(13)), 6, 1),
    (SPAnomalyIdentification(epsilon=0.1, beta=5, k=2, rng=random.Random(14)), 0, 0),
])
def test_output_frequencies_match_the_exact_probabilities(mech, b, c):
    # Two-sided binomial test at alpha = 1e-6 per case (4 cases: false-failure rate
    # below 4e-6 for a correct sampler; seeded, so the outcome is fixed anyway).
    n = 40_000
    ones = sum(mech.randomise(b, c) for _ in range(n))
    p1 = 1 - mech.error_probability(b, c) if is_anomaly(b, c, mech.beta) else mech.error_probability(b, c)
    assert stats.binomtest(ones, n, p1).pvalue > 1e-6


def test_sp_beats_dp_on_isolated_anomalies_at_equal_epsilon():
    dp = DPAnomalyIdentification(epsilon=0.5, beta=10)
    sp = SPAnomalyIdentification(epsilon=0.5, beta=10, k=2)
    assert 1 - dp.error_probability(1, 1) == pytest.approx(math.exp(0.5) / (1 + math.exp(0.5)))
    assert 1 - sp.error_probability(1, 1) > 0.98
    # Normal records: the same error under both.
    assert sp.error_probability(15, 1) == dp.error_probability(15, 1)


# -- data counting and the accountant-aware queries ----------------------------------

def test_ball_and_copies_counts_itself_and_duplicates():
    x = np.array([[0.0, 0.0], [0.0, 0.0], [1.0, 0.0], [3.0, 0.0], [1.0, 1.0]])
    assert ball_and_copies(x, [0.0, 0.0], 1.0) == (3, 2)
    assert ball_and_copies(x, [3.0, 0.0], 1.0) == (1, 1)
    assert ball_and_copies(x, [5.0, 5.0], 1.0) == (0, 0)
    b, c = ball_and_copies_many(x, x, 1.0)
    assert b.tolist() == [3, 3, 4, 1, 2] and c.tolist() == [2, 2, 1, 1, 1]
    assert batch_multiplicity(np.array([[0.0], [1.5], [10.0]]), 1.0) == 2


def test_identify_checks_before_reading_and_spends_after(tmp_path):
    acct = BudgetAccountant(tmp_path / "b.db")
    acct.set_budget("s", 1)
    x = np.array([[0.0], [0.1], [0.2], [9.0]])
    reads = []

    def source():
        reads.append(1)
        return x

    bit = identify(source, [9.0], beta=2, r=1.0, epsilon=0.6, k=1, accountant=acct, dataset="s",
                   rng=random.Random(3))
    assert bit in (0, 1) and len(reads) == 1
    assert acct.spent("s").epsilon == Fraction(3, 5)
    with pytest.raises(BudgetError):
        identify(source, [9.0], beta=2, r=1.0, epsilon=0.6, accountant=acct, dataset="s")
    assert len(reads) == 1                    # refused before reading
    with pytest.raises(ValueError):
        identify(source, [9.0], beta=0, r=1.0, epsilon=0.1, accountant=acct, dataset="s")
    assert "aiq-sp(beta=2,r=1,k=1)" in acct.summary("s")


def test_identify_many_charges_claim5_multiplicity(tmp_path):
    acct = BudgetAccountant(tmp_path / "b.db")
    acct.set_budget("s", 10)
    x = np.array([[0.0], [0.1], [0.2], [9.0], [20.0]])
    bits, cost = identify_many(lambda: x, x[[3, 4]], beta=2, r=1.0, epsilon=0.5, k=1,
                               accountant=acct, dataset="s", rng=random.Random(4))
    assert cost == Fraction(1, 2)             # 9 and 20 are more than 2r apart: m = 1
    assert bits.shape == (2,)
    bits, cost = identify_many(lambda: x, x[:3], beta=2, r=1.0, epsilon=0.5, k=1,
                               accountant=acct, dataset="s", rng=random.Random(4))
    assert cost == Fraction(3, 2)             # three queried records in one ball: m = 3
    assert acct.spent("s").epsilon == 2


def test_record_loss_is_epsilon_for_dp_and_grows_with_isolation_for_sp():
    eps = 0.5
    dp = DPAnomalyIdentification(epsilon=eps, beta=5)
    sp = SPAnomalyIdentification(epsilon=eps, beta=5, k=1)
    for b in range(1, 40):
        for c in range(1, min(b, 3) + 1):
            assert dp.record_loss(b, c) <= eps + 1e-12
            if is_sensitive(b, 5, 1):
                assert sp.record_loss(b, c) <= eps + 1e-12
    # Non-sensitive single-copy anomalies lose more the more isolated they are.
    losses = [sp.record_loss(b, 1) for b in (4, 3, 2, 1)]
    assert losses == sorted(losses) and losses[0] > eps
    with pytest.raises(ValueError):
        sp.record_loss(3, 0)


def test_privacy_on_the_count_lattice_for_larger_counts():
    # Both mechanisms see the data only through (b, c). Adding a record moves (b, c) by
    # (+1, 0) (another value inside the ball), (+1, +1) (a copy of i) or (0, 0) (outside
    # the ball). G allows every move; H (a supergraph of G_S) allows (+1, +1) only into
    # b + 1 >= beta - k + 1. Every move from every state with b <= 30 is checked exactly.
    q = Fraction(1, 2)

    def p1(mdd, truth):
        return out_prob(mdd, truth, q)

    for beta in range(1, 7):
        for k in list(range(1, 8)) + [None]:
            for b in range(0, 30):
                for c in range(0, b + 1):
                    for db, dc in ((1, 0), (1, 1)):
                        b2, c2 = b + db, c + dc
                        if k is None:
                            mx, my = mdd_dp(b, c, beta), mdd_dp(b2, c2, beta)
                        else:
                            if dc and b2 < beta - k + 1:
                                continue
                            mx, my = mdd_sp(b, c, beta, k), mdd_sp(b2, c2, beta, k)
                        px, py = p1(mx, is_anomaly(b, c, beta)), p1(my, is_anomaly(b2, c2, beta))
                        for a, z in ((px, py), (1 - px, 1 - py)):
                            assert a <= z / q and z <= a / q, (beta, k, b, c, db, dc)
