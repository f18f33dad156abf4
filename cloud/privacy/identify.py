"""Private (beta, r)-anomaly identification of one record (Asif et al. 2019).

    mech = SPAnomalyIdentification(epsilon=0.5, beta=11, k=1)
    b, c = ball_and_copies(x, x[17], r=12.0)     # ball count (itself included), copies
    mech.randomise(b, c)                          # 1 = "x[17] is a (11, 12)-anomaly", exactly sampled
    identify(lambda: x, x[17], beta=11, r=12.0, epsilon=0.5, k=1,
             accountant=acct, dataset="sensors-sp")        # validate, check, compute, randomise, spend

Data model (Asif et al. 2019, data model): a data set is a histogram ``x`` over record values;
neighbours differ by **adding or removing** one record (``||x - y||_1 = 1``).
``B_x(i, r)`` counts the records within distance ``r`` of ``i``, **the copies of i
included**; ``i`` is a (beta, r)-anomaly iff ``x_i > 0`` and ``B_x(i, r) <= beta``.
The anomaly identification query (AIQ) for a fixed record ``i`` answers
``g(i, x) in {0, 1}``; absent records get 0.

Both mechanisms are randomised response with an mdd-dependent flip probability
(Asif et al. 2019, Eq. 1, the minimum discrepant distance): output ``g(i, x)`` with probability ``1 - e(Delta)`` and the other bit
with probability::

    e(Delta) = exp(-epsilon * Delta) / (1 + exp(-epsilon))  =  exp(-epsilon (Delta - 1)) / (1 + exp(epsilon))

where ``Delta`` is the minimum discrepant distance (mdd) of ``x`` in a graph over
data sets: the full neighbourhood graph G for DP (:func:`mdd_dp`, Asif et al. 2019, Theorem 4.4), the
supergraph H of the k-sensitive graph G_S for sensitive privacy (:func:`mdd_sp`,
Asif et al. 2019, Theorem 4.6). Both are closed forms in two integers: ``b = B_x(i, r)`` and
``c = x_i``, the number of copies of ``i``.

Sampling is exact, with no floating-point number formed from the data: the flip is
``Bernoulli(exp(-epsilon Delta)) AND Bernoulli(1 / (1 + exp(-epsilon)))``, the first
by ``dpsense.protocol.noise.bernoulli_exp`` with the rational ``epsilon * Delta``, the
second by rejection (fair coin proposes 1, or proposes 0 and accepts it with an exact
``Bernoulli(exp(-epsilon))``). Its probability is exactly ``e(Delta)`` for the
rational ``epsilon`` (floats are read as the decimal they print as, see
:mod:`dpsense.cloud.privacy.validation`).

Accounting: the DP mechanism costs ``epsilon`` of ``epsilon``-DP. The SP mechanism
costs ``epsilon`` of ``(epsilon, k)``-sensitive privacy, a *weaker* guarantee than DP
for non-sensitive records. :class:`~dpsense.cloud.privacy.accountant.BudgetAccountant` adds
epsilons; a total mixing DP and SP spends is an SP guarantee for the intersection of
the graphs (Asif et al. 2019, Claim 3), not a DP guarantee. Keep SP queries under a data set
name of their own (e.g. ``"sensors-sp"``) when the DP total must stay a DP statement.
"""
from __future__ import annotations

import math
import numbers
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpsense.protocol.noise import bernoulli_exp

from .accountant import BudgetAccountant
from .mechanisms import Mechanism
from .validation import Rng, check_epsilon, check_rng

__all__ = [
    "AnomalyQuery",
    "DPAnomalyIdentification",
    "SPAnomalyIdentification",
    "ball_and_copies",
    "ball_and_copies_many",
    "batch_multiplicity",
    "flip_probability",
    "flip_probability_exact",
    "identify",
    "identify_many",
    "is_anomaly",
    "is_sensitive",
    "mdd_dp",
    "mdd_sp",
]


# -- parameter checks ----------------------------------------------------------------

def _check_int(name: str, v: object, minimum: int) -> int:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise TypeError("%s must be an int, got %s" % (name, type(v).__name__))
    if v < minimum:
        raise ValueError("%s must be >= %d, got %d" % (name, minimum, int(v)))
    return int(v)


def _check_radius(r: object) -> float:
    if isinstance(r, bool) or not isinstance(r, numbers.Real):
        raise TypeError("r must be a real number, got %s" % type(r).__name__)
    v = float(r)
    if not math.isfinite(v) or v < 0:
        raise ValueError("r must be finite and >= 0, got %r" % (r,))
    return v


@dataclass(frozen=True)
class AnomalyQuery:
    """The public parameters of a (beta, r)-AIQ: ``beta >= 1`` (int), radius ``r >= 0``.

    ``beta = 0`` is refused: no present record can then be an anomaly (its ball holds
    itself), so the query is constant and needs no mechanism.
    """

    beta: int
    r: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "beta", _check_int("beta", self.beta, 1))
        object.__setattr__(self, "r", _check_radius(self.r))


# -- the anomaly notion and the mdd --------------------------------------------------

def _counts(b: object, c: object) -> tuple[int, int]:
    ball = _check_int("ball count b", b, 0)
    copies = _check_int("copies c", c, 0)
    if copies > ball:
        raise ValueError("copies c = %d exceed the ball count b = %d (the ball includes the copies)" % (copies, ball))
    return ball, copies


def is_anomaly(b: int, c: int, beta: int) -> int:
    """``g(i, x)``: 1 iff ``i`` is present (``c >= 1``) and ``b <= beta``."""
    ball, copies = _counts(b, c)
    return int(copies >= 1 and ball <= _check_int("beta", beta, 1))


def is_sensitive(b: int, beta: int, k: int) -> bool:
    """Whether ``i`` is k-sensitive (closed form derived in docs/paper2.md): ``B_x(i, r) >= beta - k + 1``."""
    return _check_int("ball count b", b, 0) >= _check_int("beta", beta, 1) - _check_int("k", k, 1) + 1


def mdd_dp(b: int, c: int, beta: int) -> int:
    """``Delta_G(i, x)``, the mdd in the full neighbourhood graph (Asif et al. 2019, Theorem 4.4).

    Parameters
    ----------
    b : int
        ``B_x(i, r)``, records within ``r`` of ``i``, its copies included.
    c : int
        ``x_i``, copies of ``i`` (``0 <= c <= b``).
    beta : int
        Anomaly threshold, ``>= 1``.

    Returns
    -------
    int
        Fewest record additions/removals that flip ``g(i, .)``:
        present anomaly ``min(beta + 1 - b, c)``; present normal ``b - beta``;
        absent with ``b <= beta - 1``: 1; absent with ``b >= beta``: ``b - beta + 2``.
    """
    ball, copies = _counts(b, c)
    beta = _check_int("beta", beta, 1)
    if copies >= 1:
        return min(beta + 1 - ball, copies) if ball <= beta else ball - beta
    return 1 if ball <= beta - 1 else ball - beta + 2


def mdd_sp(b: int, c: int, beta: int, k: int) -> int:
    """``Delta_H(i, x)``, the exact mdd in the supergraph H of the k-sensitive graph G_S (closed form derived in docs/paper2.md; it makes Asif et al. 2019's Theorem 4.6 mechanism computable).

    H keeps every edge of G that adds or removes a record other than ``i``, and an edge
    ``(x, x + e_i)`` iff ``B_{x + e_i}(i, r) >= T = beta - k + 1``. Since H contains
    G_S, ``Delta_H <= Delta_GS``, so a mechanism that is ``epsilon``-private on H is
    ``(epsilon, k)``-sensitively private.

    Parameters
    ----------
    b, c, beta
        As in :func:`mdd_dp`.
    k : int
        Sensitivity parameter, ``>= 1``.

    Returns
    -------
    int
        Present anomaly ``min(beta + 1 - b, c + max(0, beta - k + c - b))``;
        present normal ``b - beta``; absent ``1 + max(0, beta - k - b)`` if
        ``b <= beta - 1``, else ``b - beta + 2``. Equals :func:`mdd_dp` when
        ``k >= beta + 1`` (every record sensitive).
    """
    ball, copies = _counts(b, c)
    beta = _check_int("beta", beta, 1)
    k = _check_int("k", k, 1)
    if copies >= 1:
        if ball <= beta:
            return min(beta + 1 - ball, copies + max(0, beta - k + copies - ball))
        return ball - beta
    return 1 + max(0, beta - k - ball) if ball <= beta - 1 else ball - beta + 2


def flip_probability(mdd: int, epsilon: object) -> float:
    """``e(Delta) = exp(-epsilon Delta) / (1 + exp(-epsilon))`` as a float (for reporting)."""
    d = _check_int("mdd", mdd, 1)
    e = float(check_epsilon(epsilon))
    return math.exp(-e * d) / (1.0 + math.exp(-e))


def flip_probability_exact(mdd: int, q: Fraction) -> Fraction:
    """``e(Delta) = q**Delta / (1 + q)`` exactly, for ``q = exp(-epsilon)`` given as a rational.

    Used by the brute-force privacy checks with ``epsilon = ln(1/q)`` (e.g. ``q = 1/2``),
    where every output probability is a rational and the DP/SP inequalities can be
    verified with no rounding.
    """
    d = _check_int("mdd", mdd, 1)
    if not isinstance(q, Fraction) or not 0 < q < 1:
        raise ValueError("q must be a Fraction in (0, 1)")
    return q ** d / (1 + q)


# -- the mechanisms ------------------------------------------------------------------

class _AIQ(Mechanism):
    """Randomised response with flip probability ``e(mdd)``; subclasses give the mdd."""

    def __init__(self, *, epsilon: object, beta: int, rng: Rng | None) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.beta = _check_int("beta", beta, 1)
        self.rng = check_rng(rng)

    @abstractmethod
    def mdd(self, b: int, c: int) -> int:
        """The minimum discrepant distance for ball count ``b`` and ``c`` copies; each
        subclass defines it (Asif et al. 2019, Theorem 4.4 for DP, Theorem 4.6 for sensitive privacy)."""

    def error_probability(self, b: int, c: int) -> float:
        """Probability that the output differs from ``g(i, x)`` (a float, for reporting)."""
        return flip_probability(self.mdd(b, c), self.epsilon)

    def _bernoulli_exp_eps(self, times: int) -> int:
        return bernoulli_exp(self.rng, self.epsilon.numerator * times, self.epsilon.denominator)

    def _flip(self, mdd: int) -> int:
        # Bernoulli(q**mdd) AND Bernoulli(1/(1+q)), q = exp(-epsilon): probability e(mdd) exactly.
        if not self._bernoulli_exp_eps(mdd):
            return 0
        while True:
            if self.rng.getrandbits(1):
                return 1                      # proposed "1" (weight 1), always accepted
            if self._bernoulli_exp_eps(1):
                return 0                      # proposed "0" (weight q), accepted with probability q

    def randomise(self, b: int, c: int) -> int:
        """The released bit for a record with ball count ``b`` and ``c`` copies."""
        truth = is_anomaly(b, c, self.beta)
        return truth ^ self._flip(self.mdd(b, c))

    def privacy_cost(self) -> tuple[Fraction, Fraction]:
        return self.epsilon, Fraction(0)

    def record_loss(self, b: int, c: int) -> float:
        """Effective loss of a present record (Asif et al. 2019, the per-record level of Figs. 2-3): ``max_o |ln P(M(x)=o) - ln P(M(x - e_i)=o)|``.

        ``x - e_i`` removes one copy of the queried record (ball and copies drop by 1).
        Equals ``epsilon`` or less under DP; under SP it can exceed ``epsilon`` for
        records that are not k-sensitive (about ``epsilon * Delta_H``).
        """
        ball, copies = _counts(b, c)
        if copies < 1:
            raise ValueError("record_loss needs a present record (c >= 1)")

        eps = float(self.epsilon)

        def logs(bb: int, cc: int) -> tuple[float, float]:
            # (ln P(out = 1), ln P(out = 0)), the error in log form so that tiny errors do not underflow.
            log_err = -eps * self.mdd(bb, cc) - math.log1p(math.exp(-eps))
            log_ok = math.log1p(-math.exp(log_err))
            return (log_ok, log_err) if is_anomaly(bb, cc, self.beta) else (log_err, log_ok)

        a, z = logs(ball, copies), logs(ball - 1, copies - 1)
        return max(abs(a[0] - z[0]), abs(a[1] - z[1]))


class DPAnomalyIdentification(_AIQ):
    """The optimal ``epsilon``-DP mechanism for the (beta, r)-AIQ (Asif et al. 2019, Theorem 4.4).

    Guarantee: ``epsilon``-differential privacy under add/remove-one neighbours, for
    any fixed record ``i``, ``beta`` and ``r``: along every edge of G the mdd changes by
    at most 1, and across the decision boundary both sides have mdd 1, so each output
    probability changes by a factor ``<= exp(epsilon)``.

    Parameters
    ----------
    epsilon : float
        Privacy parameter, ``> 0`` (floats read as the decimal they print as).
    beta : int
        Anomaly threshold, ``>= 1``; the radius ``r`` enters only through ``b``.
    rng : Rng, optional
        Source of ``getrandbits``; default ``secrets.SystemRandom()``.

    Notes
    -----
    Error ``e(Delta_G)``: a single-copy anomaly has ``Delta_G = 1``, so no DP mechanism
    identifies it with probability above ``exp(epsilon) / (1 + exp(epsilon))`` (the
    paper's negative result). Cost per release: O(1) expected Bernoulli trials plus
    ``epsilon * Delta`` trials in the worst case.

    References
    ----------
    H. Asif, P. A. Papakonstantinou, J. Vaidya, "How to Accurately and Privately
    Identify Anomalies", ACM CCS 2019, Sect. 4 (mdd mechanism; form reconstructed in
    Asif et al. 2019, mdd and Theorem 4.4).
    C. Canonne, G. Kamath, T. Steinke, "The Discrete Gaussian for Differential
    Privacy", NeurIPS 2020, Algorithm 1 (exact Bernoulli(exp(-g))).
    """

    def __init__(self, *, epsilon: object, beta: int, rng: Rng | None = None) -> None:
        super().__init__(epsilon=epsilon, beta=beta, rng=rng)

    def mdd(self, b: int, c: int) -> int:
        """``Delta_G(i, x)`` (:func:`mdd_dp`)."""
        return mdd_dp(b, c, self.beta)

    def __repr__(self) -> str:
        return "DPAnomalyIdentification(epsilon=%s, beta=%d)" % (self.epsilon, self.beta)


class SPAnomalyIdentification(_AIQ):
    """An ``(epsilon, k)``-sensitively private mechanism for the (beta, r)-AIQ (Asif et al. 2019, Theorem 4.6).

    Guarantee: ``(epsilon, k)``-sensitive privacy under add/remove-one neighbours: for
    every two data sets ``x, y`` joined by an edge of the k-sensitive neighbourhood
    graph G_S (they differ by one record that is k-sensitive, i.e. could be a present
    normal record after at most k changes, in ``x`` or ``y``),
    ``P(M(x) = o) <= exp(epsilon) P(M(y) = o)``. Records that are far from normal are
    not protected against a membership test at the DP level; their effective loss
    grows with their isolation (about ``epsilon * Delta_H``). That is the price of
    identifying them accurately.

    Parameters
    ----------
    epsilon : float
        Privacy parameter, ``> 0``.
    beta : int
        Anomaly threshold, ``>= 1``.
    k : int
        Sensitivity parameter, ``>= 1``: a record is protected when ``k`` additions
        or removals can make it a present normal record (ball count
        ``>= beta - k + 1``). ``k >= beta + 1`` protects every record and gives the
        DP mechanism.
    rng : Rng, optional
        Source of ``getrandbits``; default ``secrets.SystemRandom()``.

    Notes
    -----
    Error ``e(Delta_H)`` with the closed form :func:`mdd_sp`. A non-sensitive
    single-copy anomaly (``b <= beta - k``) has ``Delta_H = beta - k + 2 - b >= 2``, so
    its error decays exponentially with its isolation. ``Delta_H <= Delta_GS``: this
    mechanism is valid but not necessarily the most accurate SP mechanism (Asif et al. 2019, Theorem 4.6).
    Cost as for :class:`DPAnomalyIdentification`.

    References
    ----------
    H. Asif, P. A. Papakonstantinou, J. Vaidya, "How to Accurately and Privately
    Identify Anomalies", ACM CCS 2019, Sect. 3-4 (sensitive privacy; the closed form
    used here is the derivation in docs/paper2.md, brute-force checked in the tests).
    """

    def __init__(self, *, epsilon: object, beta: int, k: int, rng: Rng | None = None) -> None:
        super().__init__(epsilon=epsilon, beta=beta, rng=rng)
        self.k = _check_int("k", k, 1)

    def mdd(self, b: int, c: int) -> int:
        """``Delta_H(i, x)`` (:func:`mdd_sp`)."""
        return mdd_sp(b, c, self.beta, self.k)

    def __repr__(self) -> str:
        return "SPAnomalyIdentification(epsilon=%s, beta=%d, k=%d)" % (self.epsilon, self.beta, self.k)


# -- counting on real data -----------------------------------------------------------

def _points(x: object) -> np.ndarray:
    a = np.asarray(x, dtype=float)
    if a.ndim == 1:
        a = a[:, None]
    if a.ndim != 2 or a.shape[1] == 0:
        raise ValueError("data must be a 2-D array of records, got shape %s" % (a.shape,))
    if not np.all(np.isfinite(a)):
        raise ValueError("data contain NaN or infinity")
    return a


def _record(v: object, d: int) -> np.ndarray:
    a = np.asarray(v, dtype=float).reshape(-1)
    if a.size != d or not np.all(np.isfinite(a)):
        raise ValueError("record must be %d finite numbers" % d)
    return a


def ball_and_copies(x: object, record: object, r: float) -> tuple[int, int]:
    """``(b, c)`` for one queried value: rows within Euclidean distance ``r`` (squared
    distance ``<= r**2``, row-wise float64 sum) and rows exactly equal to it.

    The metric is fixed by this computation: the same pair of values always gives the
    same decision, whatever the other rows are, which is all the privacy proof needs.
    """
    pts = _points(x)
    v = _record(record, pts.shape[1])
    r = _check_radius(r)
    diff = pts - v
    sq = np.sum(diff * diff, axis=1)
    return int(np.count_nonzero(sq <= r * r)), int(np.count_nonzero(np.all(diff == 0, axis=1)))


def ball_and_copies_many(x: object, queries: object, r: float) -> tuple[np.ndarray, np.ndarray]:
    """:func:`ball_and_copies` for every row of ``queries`` (same arithmetic, in chunks of ~2M cells)."""
    pts = _points(x)
    q = _points(queries)
    if q.shape[1] != pts.shape[1]:
        raise ValueError("queries have %d columns, data %d" % (q.shape[1], pts.shape[1]))
    r = _check_radius(r)
    b = np.empty(q.shape[0], dtype=np.int64)
    c = np.empty(q.shape[0], dtype=np.int64)
    chunk = max(1, 2_000_000 // max(1, pts.shape[0] * pts.shape[1]))
    for s in range(0, q.shape[0], chunk):
        diff = pts[None, :, :] - q[s:s + chunk, None, :]
        sq = np.sum(diff * diff, axis=2)
        b[s:s + chunk] = np.count_nonzero(sq <= r * r, axis=1)
        c[s:s + chunk] = np.count_nonzero(np.all(diff == 0, axis=2), axis=1)
    return b, c


def batch_multiplicity(queries: object, r: float) -> int:
    """Upper bound on the ``m`` of Asif et al. 2019, Claim 5: queried records inside any ball of radius ``r``.

    Any ball of radius ``r`` holding queried records lies within ``2 r`` of each of
    them, so ``m <= max_t #{t' : d(i_t, i_t') <= 2 r}`` (duplicates counted). Answering
    all the queries then costs at most ``m * epsilon`` of sensitive privacy.
    """
    q = _points(queries)
    b, _ = ball_and_copies_many(q, q, 2 * _check_radius(r))
    return int(b.max()) if b.size else 0


# -- queries in diffprivlib's order --------------------------------------------------

def _mechanism(epsilon: object, beta: int, k: int | None, rng: Rng | None) -> _AIQ:
    if k is None:
        return DPAnomalyIdentification(epsilon=epsilon, beta=beta, rng=rng)
    return SPAnomalyIdentification(epsilon=epsilon, beta=beta, k=k, rng=rng)


def _name(query: str | None, spec: AnomalyQuery, k: int | None) -> str:
    if query is not None:
        return query
    return ("aiq-dp(beta=%d,r=%g)" % (spec.beta, spec.r) if k is None
            else "aiq-sp(beta=%d,r=%g,k=%d)" % (spec.beta, spec.r, k))


def identify(source: Callable[[], object], record: object, *, beta: int, r: float, epsilon: object,
             accountant: BudgetAccountant, dataset: str, k: int | None = None, rng: Rng | None = None,
             query: str | None = None) -> int:
    """Answer the (beta, r)-AIQ for ``record`` privately: 1 = "a (beta, r)-anomaly of the data".

    Order (diffprivlib): validate ``beta``, ``r``, ``k``, ``epsilon``; ``accountant.check``;
    read the data (``source()``, called once); count ``b`` and ``c``; randomise;
    ``accountant.spend``; return.

    Parameters
    ----------
    source : callable
        Returns the data as an (n, d) array of records; called after the budget check.
    record : array-like of d floats
        The queried value ``i`` (public; it need not be in the data).
    beta, r
        The anomaly notion (:class:`AnomalyQuery`).
    epsilon : float
        Privacy parameter charged to ``dataset``.
    accountant : BudgetAccountant
    dataset : str
    k : int, optional
        None: the ``epsilon``-DP mechanism. An int: the ``(epsilon, k)``-SP mechanism.
    rng : Rng, optional
    query : str, optional
        Name in the accountant's log (default ``aiq-dp(...)`` / ``aiq-sp(...)``).

    Returns
    -------
    int
        The released bit.
    """
    spec = AnomalyQuery(beta, r)
    mech = _mechanism(epsilon, spec.beta, k, rng)
    eps, delta = mech.privacy_cost()
    accountant.check(dataset, eps, delta)
    b, c = ball_and_copies(source(), record, spec.r)
    released = mech.randomise(b, c)
    accountant.spend(dataset, eps, delta, query=_name(query, spec, k))
    return released


def identify_many(source: Callable[[], object], records: object, *, beta: int, r: float, epsilon: object,
                  accountant: BudgetAccountant, dataset: str, k: int, rng: Rng | None = None,
                  query: str | None = None) -> tuple[np.ndarray, Fraction]:
    """SP answers for many queried records at once, charged ``m * epsilon`` (Asif et al. 2019, Claim 5).

    ``m`` is :func:`batch_multiplicity` of the queried records (public, so computed
    before the budget check). Order: validate, compute ``m``, ``accountant.check``,
    read the data, count, randomise every record independently, one
    ``accountant.spend`` of ``m * epsilon``. The guarantee is ``(m epsilon, k)``-SP for
    the k-sensitive graph of the (beta, r)-anomaly. Only the SP mechanism composes
    this way here; for DP use sequential :func:`identify` calls.

    Returns
    -------
    (ndarray of int, Fraction)
        The released bits in query order, and the epsilon charged.
    """
    spec = AnomalyQuery(beta, r)
    if k is None:
        raise ValueError("identify_many answers SP queries: give k")
    mech = _mechanism(epsilon, spec.beta, k, rng)
    q = _points(records)
    m = batch_multiplicity(q, spec.r)
    eps, delta = mech.privacy_cost()
    total = eps * m
    if total == 0:
        return np.empty(0, dtype=np.int64), Fraction(0)
    accountant.check(dataset, total, delta)
    b, c = ball_and_copies_many(source(), q, spec.r)
    bits = np.array([mech.randomise(int(bi), int(ci)) for bi, ci in zip(b, c)], dtype=np.int64)
    accountant.spend(dataset, total, delta,
                     query=(query or _name(None, spec, k)) + " x%d (m=%d)" % (q.shape[0], m))
    return bits, total
