"""Private queries over a data source, in diffprivlib's order.

    acct = BudgetAccountant("budget.db")
    n = count(lambda: store.values(), accountant=acct, dataset="sensors", epsilon=0.1)

Every query does, in this order: validate its parameters and bounds (missing bounds
are an error), ``accountant.check``, read and clip the data, compute, randomise,
``accountant.spend``, and only then return. A query refused for lack of budget has
not read a single row; one refused at ``spend`` (another process spent first)
returns nothing, so its unreleased result costs nothing.

The data source is any callable returning an iterable of records; it is called
once, after the budget check.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from fractions import Fraction
from typing import Literal

from .accountant import BudgetAccountant
from .mechanisms import Laplace
from .validation import Rng, check_bounds

__all__ = ["bounded_sum", "count"]

Source = Callable[[], Iterable[object]]


def count(source: Source, *, accountant: BudgetAccountant, dataset: str, epsilon: object,
          predicate: Callable[[object], bool] | None = None, rng: Rng | None = None,
          query: str = "count") -> float:
    """Number of records (satisfying ``predicate``) plus Laplace noise, on the integers.

    Parameters
    ----------
    source : callable
        Returns the records; called once, after the budget check.
    accountant : BudgetAccountant
        Charged ``epsilon``.
    dataset : str
        Budget to charge.
    epsilon : float
        Privacy parameter, ``> 0``.
    predicate : callable, optional
        Records to count; default all.
    rng : Rng, optional
        Random source; default ``secrets.SystemRandom()``.
    query : str, optional
        Name in the accountant's log.

    Returns
    -------
    float
        An integer-valued noisy count.

    Notes
    -----
    Sensitivity 1 under both replace-one and add/remove neighbours; ``epsilon``-DP.

    References
    ----------
    C. Dwork, A. Roth, "The Algorithmic Foundations of Differential Privacy", 2014,
    Sect. 3.3.
    """
    mech = Laplace(epsilon=epsilon, sensitivity=1, granularity=1, values_on_grid=True, rng=rng)
    eps, delta = mech.privacy_cost()
    accountant.check(dataset, eps, delta)
    n = sum(1 for r in source() if predicate is None or predicate(r))
    released = mech.randomise(n)
    accountant.spend(dataset, eps, delta, query=query)
    return released


def bounded_sum(source: Source, *, bounds: tuple[float, float], accountant: BudgetAccountant,
                dataset: str, epsilon: object, relation: Literal["replace-one", "add-remove"] = "replace-one",
                rng: Rng | None = None, query: str = "sum") -> float:
    """Sum of the records clipped to ``bounds``, plus Laplace noise.

    Parameters
    ----------
    source : callable
        Returns numeric records; called once, after the budget check.
    bounds : (float, float)
        Public clipping range ``lower < upper``; required.
    accountant, dataset, epsilon, rng, query
        As for :func:`count`.
    relation : {"replace-one", "add-remove"}, optional
        Neighbouring relation: sensitivity ``upper - lower`` for replace-one,
        ``max(|lower|, |upper|)`` for add/remove.

    Returns
    -------
    float

    Notes
    -----
    The clipped values are summed exactly (as rationals), so the sum of two
    neighbouring data sets differs by at most the sensitivity, with no float
    rounding in between. ``epsilon``-DP.

    References
    ----------
    N. Holohan et al., "Diffprivlib: The IBM Differential Privacy Library", 2019
    (bounds before budget, budget before data).
    """
    lo, hi = check_bounds(bounds)
    if lo == hi:
        raise ValueError("bounds must satisfy lower < upper")
    if relation == "replace-one":
        sensitivity = hi - lo
    elif relation == "add-remove":
        sensitivity = max(abs(lo), abs(hi))
    else:
        raise ValueError("relation must be 'replace-one' or 'add-remove', got %r" % (relation,))
    mech = Laplace(epsilon=epsilon, sensitivity=sensitivity, rng=rng)
    eps, delta = mech.privacy_cost()
    accountant.check(dataset, eps, delta)
    total = Fraction(0)
    for r in source():
        v = Fraction(float(r))  # type: ignore[arg-type]
        total += lo if v < lo else hi if v > hi else v
    released = mech.randomise(total)
    accountant.spend(dataset, eps, delta, query=query)
    return released
