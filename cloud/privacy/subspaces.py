"""DP top-h outlier subspaces with the exponential mechanism (Okada et al. 2015, Theorem 7 and Algorithm 3).

    sel = top_h_subspaces(X, k=3, r=0.13, h=2, epsilon=1.0, accountant=acct, dataset="d")
    sel.subspaces                   # e.g. ((0,), (1,))
    rel = subspaces_with_counts(X, k=3, r=0.13, h=2, epsilon_select=1.0,
                                epsilon_count=1.0, delta=0.01)

Utility (Theorem 7): ``u(X, S) = q_count(X, k, r, S) / GS_UB(|S|)``, ``GS_UB(c) =
min(N, k K_c + 1)``. Since ``q_count(., S)`` moves by at most ``GS(|S|) <= GS_UB(|S|)``
between replace-one neighbours, ``Delta u <= 1`` whatever the candidate family.

Selection: h rounds; each round draws one not-yet-chosen candidate with the
exponential mechanism at ``epsilon/h``, i.e. ``P(S) ~ exp(epsilon u(X,S) / (2 h))``.
Redrawing until a new item comes up (Alg. 3) is the same distribution as drawing
from the remaining candidates, so each round is one (epsilon/h)-DP mechanism and the
h rounds compose sequentially to **epsilon-DP overall**.

``paper_mode=True`` uses the printed form ``P(S) ~ exp((epsilon/h) u(X,S))``: each
round is ``2 epsilon/h``-DP, the total is **2 epsilon-DP, NOT epsilon-DP** (Thm. 7
says "2 epsilon" while the text claims epsilon). It is charged 2 epsilon.

:func:`subspaces_with_counts` adds DP outlier counts for the chosen subspaces, each at
``(epsilon_count/h, delta/h)``; the whole release costs ``(epsilon_select (x2 in paper
mode) + epsilon_count, delta + slack)`` and is checked once before, and charged once
after, the computation.
"""
from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

import numpy as np

from .accountant import BudgetAccountant
from .mechanisms import Exponential, SmoothSensitivityGaussian
from .outlier_count import NOT_DP, _check_data, _check_k, _check_r, global_sensitivity, smooth_bound, subspace_degrees
from .validation import Rng, check_delta, check_epsilon

__all__ = ["SubspaceRelease", "SubspacesWithCounts", "candidates", "selection_probabilities",
           "subspaces_with_counts", "top_h_subspaces", "utilities"]


def candidates(d: int, c: int = 1) -> list[tuple[int, ...]]:
    """``F_c``: all subspaces of ``{0..d-1}`` with ``c`` columns, in lexicographic order."""
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 1:
        raise ValueError("d must be an int >= 1")
    if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or not 1 <= c <= d:
        raise ValueError("c must be an int in [1, d]")
    return [tuple(s) for s in itertools.combinations(range(int(d)), int(c))]


def _check_candidates(cands: object, d: int) -> list[tuple[int, ...]]:
    if cands is None:
        return candidates(d, 1)
    out = []
    for s in cands:  # type: ignore[attr-defined]
        t = tuple(s)
        if not t or any(isinstance(c, bool) or not isinstance(c, (int, np.integer)) for c in t):
            raise ValueError("each candidate must be a non-empty sequence of int column indices")
        if len(set(t)) != len(t) or min(t) < 0 or max(t) >= d:
            raise ValueError("candidate %r: columns must be distinct and in [0, %d)" % (t, d))
        out.append(tuple(int(c) for c in t))
    if len(set(out)) != len(out) or not out:
        raise ValueError("candidates must be distinct and non-empty")
    return out


def _check_h(h: object, n_cands: int) -> int:
    if isinstance(h, bool) or not isinstance(h, (int, np.integer)):
        raise TypeError("h must be an int")
    if not 1 <= h <= n_cands:
        raise ValueError("h must be in [1, %d] (the number of candidates), got %d" % (n_cands, h))
    return int(h)


def utilities(X: object, k: int, r: float, cands: Sequence[Sequence[int]] | None = None) -> np.ndarray:
    """``u(X, S) = q_count(X, k, r, S) / min(N, k K_|S| + 1)`` for every candidate (Theorem 7)."""
    a = _check_data(X)
    k, r = _check_k(k), _check_r(r)
    cs = _check_candidates(cands, a.shape[1])
    n = a.shape[0]
    out = np.empty(len(cs))
    for i, s in enumerate(cs):
        q = int(np.count_nonzero(subspace_degrees(a[:, list(s)], r) < k))
        out[i] = q / global_sensitivity(len(s), k, n, "upper")
    return out


def coefficient(epsilon: float, h: int, paper_mode: bool = False) -> float:
    """The exponent's factor per round: ``epsilon/(2h)`` (DP) or ``epsilon/h`` (paper, 2 epsilon-DP)."""
    return epsilon / h if paper_mode else epsilon / (2.0 * h)


def selection_probabilities(u: Sequence[float], chosen: Sequence[int], epsilon: float, h: int,
                            paper_mode: bool = False) -> np.ndarray:
    """Probability of each candidate in the next round, given those already ``chosen`` (0 for them)."""
    uu = np.asarray(u, dtype=float)
    z = coefficient(epsilon, h, paper_mode) * (uu - uu.max())
    w = np.exp(z)
    w[list(chosen)] = 0.0
    p: np.ndarray = w / w.sum()
    return p


@dataclass(frozen=True)
class SubspaceRelease:
    """Selected subspaces (in selection order) and the privacy they cost."""

    subspaces: tuple[tuple[int, ...], ...]
    epsilon: Fraction
    guarantee: str
    paper_mode: bool


def _select(u: np.ndarray, h: int, epsilon: object, paper_mode: bool, rng: Rng | None) -> list[int]:
    eps_round = Fraction(check_epsilon(epsilon)) / h
    mech = Exponential(epsilon=eps_round, sensitivity=1, paper_mode=paper_mode, rng=rng)
    remaining = list(range(u.size))
    chosen: list[int] = []
    for _ in range(h):
        j = mech.select([float(u[i]) for i in remaining])
        chosen.append(remaining.pop(j))
    return chosen


def _selection_cost(epsilon: object, paper_mode: bool) -> tuple[Fraction, str]:
    eps = check_epsilon(epsilon)
    if paper_mode:
        return 2 * eps, "%s-DP overall, NOT %s-DP (paper_mode: exp((epsilon/h) u), Okada et al. 2015, Theorem 7 and Algorithm 3)" % (2 * eps, eps)
    return eps, "%s-DP overall (h rounds of the exponential mechanism at epsilon/h)" % eps


def top_h_subspaces(X: object, *, k: int, r: float, h: int, epsilon: object,
                    cands: Sequence[Sequence[int]] | None = None, paper_mode: bool = False,
                    accountant: BudgetAccountant | None = None, dataset: str | None = None,
                    rng: Rng | None = None, query: str = "top-h outlier subspaces") -> SubspaceRelease:
    """Okada et al.'s Algorithm 3: ``h`` subspaces with many outliers, epsilon-DP.

    Parameters
    ----------
    X : array_like, shape (N, d)
    k, r : int, float
        Outlier definition (Okada et al. 2015, definitions), normalised metric.
    h : int
        Number of subspaces, ``1 <= h <= len(cands)``.
    epsilon : float
        Total privacy parameter of the selection, ``> 0``.
    cands : sequence of sequences of int, optional
        Candidate subspaces; default the ``d`` one-column subspaces (``c = 1``).
    paper_mode : bool
        Printed calibration: 2 epsilon-DP, charged 2 epsilon.
    accountant, dataset, rng, query
        As for :func:`dpsense.cloud.privacy.outlier_count.dp_outlier_count`.

    Returns
    -------
    SubspaceRelease

    Notes
    -----
    Replace-one neighbours; ``Delta u <= 1``. Sequential composition of ``h``
    ``epsilon/h``-DP draws gives epsilon-DP. Sampling is exact (``Exponential``).

    References
    ----------
    R. Okada et al., ECML-PKDD 2015, Theorem 7 and Algorithm 3.
    F. McSherry, K. Talwar, "Mechanism Design via Differential Privacy", FOCS 2007.
    """
    a = _check_data(X)
    k, r = _check_k(k), _check_r(r)
    cs = _check_candidates(cands, a.shape[1])
    h = _check_h(h, len(cs))
    if not isinstance(paper_mode, bool):
        raise TypeError("paper_mode must be a bool")
    if (accountant is None) != (dataset is None):
        raise ValueError("give both accountant and dataset, or neither")
    cost, guarantee = _selection_cost(epsilon, paper_mode)
    if accountant is not None:
        assert dataset is not None    # checked with the accountant: both or neither
        accountant.check(dataset, cost, 0)
    u = utilities(a, k, r, cs)
    chosen = _select(u, h, epsilon, paper_mode, rng)
    if accountant is not None:
        assert dataset is not None    # checked with the accountant: both or neither
        accountant.spend(dataset, cost, 0, query=query)
    return SubspaceRelease(tuple(cs[i] for i in chosen), cost, guarantee, paper_mode)


@dataclass(frozen=True)
class SubspacesWithCounts:
    """Scenario 2: the selected subspaces and a DP outlier count for each.

    ``counts`` are the mechanism's outputs (unbiased); ``clamped`` cuts them to ``[0, n]``
    (post-processing). ``sigma_bounds`` are public upper bounds of each count's noise standard
    deviation: exact for the global method, at ``S = n`` for the smooth one (``sigma_exact``).
    """

    subspaces: tuple[tuple[int, ...], ...]
    counts: tuple[float, ...]
    epsilon: Fraction
    delta: Fraction
    guarantee: str
    n: int = 0
    sigma_bounds: tuple[float, ...] = ()
    sigma_exact: bool = False

    @property
    def clamped(self) -> tuple[float, ...]:
        return tuple(float(min(max(c, 0.0), float(self.n))) for c in self.counts)


def subspaces_with_counts(X: object, *, k: int, r: float, h: int, epsilon_select: object,
                          epsilon_count: object, delta: object,
                          cands: Sequence[Sequence[int]] | None = None,
                          count_method: Literal["smooth", "global"] = "smooth",
                          accountant: BudgetAccountant | None = None, dataset: str | None = None,
                          rng: Rng | None = None, query: str = "top-h subspaces + counts") -> SubspacesWithCounts:
    """Scenario 2: DP top-h subspaces, then a DP count for each (Okada et al. 2015, definitions and Theorem 7).

    Each count is released at ``(epsilon_count/h, delta/h)``, smooth (NRS) or global
    (Gaussian, Theorem 4 upper bound, zCDP calibration). The total,
    ``(epsilon_select + epsilon_count, delta (+ slack))``, is checked once before any
    computation and charged once as a single row. Replace-one neighbours. There is
    no paper mode here: both parts are DP.
    """
    from .mechanisms import Gaussian
    a = _check_data(X)
    k, r = _check_k(k), _check_r(r)
    cs = _check_candidates(cands, a.shape[1])
    h = _check_h(h, len(cs))
    if count_method not in ("smooth", "global"):
        raise ValueError("count_method must be 'smooth' or 'global', got %r" % (count_method,))
    if (accountant is None) != (dataset is None):
        raise ValueError("give both accountant and dataset, or neither")
    eps_sel, _ = _selection_cost(epsilon_select, False)
    eps_c = check_epsilon(epsilon_count) / h
    dlt_c = check_delta(delta, allow_zero=False) / h
    n = a.shape[0]
    mechs: list[Gaussian | SmoothSensitivityGaussian]
    if count_method == "smooth":
        mechs = [SmoothSensitivityGaussian(epsilon=eps_c, delta=dlt_c, rng=rng)] * h
    else:
        mechs = [Gaussian(epsilon=eps_c, delta=dlt_c, sensitivity=global_sensitivity(len(cs[0]), k, n),
                          granularity=1, values_on_grid=True, rng=rng)] * h
    per = mechs[0].privacy_cost()
    total_eps, total_dlt = eps_sel + h * per[0], h * per[1]
    if accountant is not None:
        assert dataset is not None    # checked with the accountant: both or neither
        accountant.check(dataset, total_eps, total_dlt)
    u = utilities(a, k, r, cs)
    chosen = [cs[i] for i in _select(u, h, epsilon_select, False, rng)]
    counts = []
    bounds = []
    for s in chosen:
        xs = a[:, list(s)]
        q = int(np.count_nonzero(subspace_degrees(xs, r) < k))
        if count_method == "smooth":
            m = SmoothSensitivityGaussian(epsilon=eps_c, delta=dlt_c, rng=rng)
            counts.append(m.randomise(q, smooth_bound(xs, k, r, m.beta)[0]))
            bounds.append(m.sigma(n))
        else:
            g = Gaussian(epsilon=eps_c, delta=dlt_c, sensitivity=global_sensitivity(len(s), k, n),
                         granularity=1, values_on_grid=True, rng=rng)
            counts.append(g.randomise(q))
            bounds.append(g.sigma)
    if accountant is not None:
        assert dataset is not None    # checked with the accountant: both or neither
        accountant.spend(dataset, total_eps, total_dlt, query=query)
    guarantee = "(%s, %.6g)-DP: selection %s-DP + %d counts at (%s, %s) each" % (
        total_eps, float(total_dlt), eps_sel, h, eps_c, dlt_c)
    return SubspacesWithCounts(tuple(chosen), tuple(counts), total_eps, total_dlt, guarantee, n, tuple(bounds),
                               count_method == "global")


__all__ += ["coefficient", "NOT_DP"]
