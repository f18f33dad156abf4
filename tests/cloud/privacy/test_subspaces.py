"""DP top-h subspaces (Okada et al. 2015, Theorem 7 and Algorithm 3): utilities, exact selection law, composition, accountant."""
import itertools
import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpsense.cloud.privacy.accountant import BudgetAccountant, BudgetError
from dpsense.cloud.privacy.mechanisms import PaperModeWarning
from dpsense.cloud.privacy.outlier_count import subspace_outlier_count
from dpsense.cloud.privacy.subspaces import (
    candidates, coefficient, selection_probabilities, subspaces_with_counts, top_h_subspaces, utilities)


class SeqRng:
    def __init__(self, seed):
        self.r = np.random.default_rng(seed)

    def getrandbits(self, k):
        return int.from_bytes(self.r.bytes((k + 7) // 8), "little") & ((1 << k) - 1)


def data(seed=0, n=40, d=4):
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 1, (n, d))
    x[:4, 0] = rng.normal(20, 10, 4)       # column 0 holds extra outliers
    return x


def test_candidates_and_utilities():
    assert candidates(3, 1) == [(0,), (1,), (2,)]
    assert candidates(3, 2) == [(0, 1), (0, 2), (1, 2)]
    x = data()
    u = utilities(x, 3, 0.2)
    # GS_UB(1) = min(N, 2k + 1) = 7 for k = 3
    assert u.tolist() == [subspace_outlier_count(x, 3, 0.2, [j]) / 7 for j in range(4)]
    u2 = utilities(x, 3, 0.2, [(0, 1)])
    assert u2[0] == subspace_outlier_count(x, 3, 0.2, [0, 1]) / 19


def test_utility_sensitivity_at_most_one():
    rng = np.random.default_rng(3)
    for _ in range(40):
        x = rng.integers(0, 6, size=(14, 3)).astype(float) / 2
        y = x.copy()
        y[rng.integers(14)] = rng.integers(0, 6, size=3) / 2
        for c in (1, 2):
            du = np.abs(utilities(x, 2, 0.5, candidates(3, c)) - utilities(y, 2, 0.5, candidates(3, c)))
            assert du.max() <= 1


@pytest.mark.parametrize("paper_mode", [False, True])
def test_selection_frequencies_match_exact_probabilities(paper_mode):
    x = data(1, n=30, d=4)
    h, eps = 2, 4.0
    u = utilities(x, 3, 0.2)
    assert coefficient(eps, h, paper_mode) == (eps / h if paper_mode else eps / (2 * h))
    pairs = list(itertools.permutations(range(4), 2))
    exact = {}
    for a, b in pairs:
        p1 = selection_probabilities(u, [], eps, h, paper_mode)[a]
        p2 = selection_probabilities(u, [a], eps, h, paper_mode)[b]
        exact[(a, b)] = p1 * p2
    assert sum(exact.values()) == pytest.approx(1.0)
    rng = SeqRng(7)
    n = 3000
    counts = dict.fromkeys(pairs, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PaperModeWarning)
        for _ in range(n):
            s = top_h_subspaces(x, k=3, r=0.2, h=h, epsilon=eps, paper_mode=paper_mode, rng=rng).subspaces
            counts[(s[0][0], s[1][0])] += 1
    obs = np.array([counts[p] for p in pairs])
    exp = np.array([exact[p] for p in pairs]) * n
    keep = exp >= 5
    obs_k = np.append(obs[keep], obs[~keep].sum())
    exp_k = np.append(exp[keep], exp[~keep].sum())
    if exp_k[-1] == 0:
        obs_k, exp_k = obs_k[:-1], exp_k[:-1]
    assert stats.chisquare(obs_k, exp_k * obs_k.sum() / exp_k.sum()).pvalue > 1e-3


def test_selection_is_epsilon_dp_on_neighbours():
    """Worst ratio of ordered-selection probabilities over neighbours <= e^eps (2 eps in paper mode)."""
    rng = np.random.default_rng(11)
    eps, h = 1.0, 2
    for _ in range(30):
        x = rng.integers(0, 6, size=(12, 3)).astype(float) / 2
        y = x.copy()
        y[rng.integers(12)] = rng.integers(0, 6, size=3) / 2
        ux, uy = utilities(x, 2, 0.5), utilities(y, 2, 0.5)
        for paper, bound in ((False, eps), (True, 2 * eps)):
            worst = 0.0
            for a, b in itertools.permutations(range(3), 2):
                px = (selection_probabilities(ux, [], eps, h, paper)[a]
                      * selection_probabilities(ux, [a], eps, h, paper)[b])
                py = (selection_probabilities(uy, [], eps, h, paper)[a]
                      * selection_probabilities(uy, [a], eps, h, paper)[b])
                worst = max(worst, abs(math.log(px / py)))
            assert worst <= bound + 1e-9


@pytest.mark.parametrize("kwargs,exc", [
    (dict(h=0), ValueError), (dict(h=5), ValueError), (dict(h=1.0), TypeError),
    (dict(epsilon=0), ValueError), (dict(k=0), ValueError), (dict(r=-1), ValueError),
    (dict(cands=[(0,), (0,)]), ValueError), (dict(cands=[(4,)]), ValueError), (dict(cands=[()]), ValueError),
    (dict(paper_mode="yes"), TypeError),
])
def test_validation_table(kwargs, exc):
    base = dict(k=3, r=0.2, h=2, epsilon=1.0)
    base.update(kwargs)
    with pytest.raises(exc):
        top_h_subspaces(data(), **base)


def test_accountant_order_and_paper_mode_charge(tmp_path, monkeypatch):
    import dpsense.cloud.privacy.subspaces as sp
    acct = BudgetAccountant(tmp_path / "b.db")
    acct.set_budget("d", 3, 0.02)
    calls = []
    real = sp.utilities
    monkeypatch.setattr(sp, "utilities", lambda *a: calls.append(1) or real(*a))
    rel = top_h_subspaces(data(), k=3, r=0.2, h=2, epsilon=1, accountant=acct, dataset="d", rng=SeqRng(1))
    assert rel.epsilon == 1 and "1-DP overall" in rel.guarantee and len(set(rel.subspaces)) == 2
    with pytest.warns(PaperModeWarning):
        rel = top_h_subspaces(data(), k=3, r=0.2, h=2, epsilon=0.5, paper_mode=True, accountant=acct,
                              dataset="d", rng=SeqRng(2))
    assert rel.epsilon == 1 and "NOT 1/2-DP" in rel.guarantee     # charged the true 2 epsilon
    assert acct.spent("d").epsilon == 2
    calls.clear()
    with pytest.raises(BudgetError):
        subspaces_with_counts(data(), k=3, r=0.2, h=2, epsilon_select=0.5, epsilon_count=0.6, delta=0.01,
                              accountant=acct, dataset="d")
    assert calls == [] and len(acct.spends("d")) == 2
    rel2 = subspaces_with_counts(data(), k=3, r=0.2, h=2, epsilon_select=0.5, epsilon_count=0.5, delta=0.01,
                                 accountant=acct, dataset="d", rng=SeqRng(3))
    assert len(rel2.counts) == 2 and rel2.epsilon == 1
    assert acct.spent("d").epsilon == 3 and float(acct.spent("d").delta) == pytest.approx(0.01, rel=1e-6)


def test_counts_global_variant():
    rel = subspaces_with_counts(data(), k=3, r=0.2, h=1, epsilon_select=50, epsilon_count=1, delta=0.01,
                                count_method="global", rng=SeqRng(4))
    assert rel.subspaces == ((0,),) and rel.epsilon == 51 and rel.delta == Fraction(1, 100)
