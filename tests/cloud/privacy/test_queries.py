"""Queries follow diffprivlib's order: bounds, budget check, data, noise, spend."""
import random
from fractions import Fraction

import pytest

from dpsense.cloud.privacy.accountant import BudgetAccountant, BudgetError
from dpsense.cloud.privacy.queries import bounded_sum, count


class SpySource:
    """A data source that records every read."""

    def __init__(self, rows):
        self.rows = rows
        self.reads = 0

    def __call__(self):
        self.reads += 1
        return iter(self.rows)


@pytest.fixture
def acct(tmp_path):
    a = BudgetAccountant(tmp_path / "budget.db")
    a.set_budget("d", epsilon=0.5)
    return a


def test_over_budget_count_never_reads_the_data(acct):
    spy = SpySource([1, 2, 3])
    with pytest.raises(BudgetError):
        count(spy, accountant=acct, dataset="d", epsilon=0.6)
    assert spy.reads == 0
    assert acct.spends("d") == []


def test_over_budget_sum_never_reads_the_data(acct):
    acct.spend("d", 0.5, query="earlier")
    spy = SpySource([1.0, 2.0])
    with pytest.raises(BudgetError):
        bounded_sum(spy, bounds=(0, 10), accountant=acct, dataset="d", epsilon=0.1)
    assert spy.reads == 0


def test_missing_bounds_fail_before_the_budget_is_consulted(acct):
    acct.spend("d", 0.5, query="earlier")        # exhausted: a budget check would raise BudgetError
    spy = SpySource([1.0])
    with pytest.raises(ValueError) as info:
        bounded_sum(spy, bounds=None, accountant=acct, dataset="d", epsilon=0.1)
    assert not isinstance(info.value, BudgetError)
    assert spy.reads == 0


def test_a_query_reads_once_and_spends_once(acct):
    spy = SpySource([1, 5, 7, 9])
    out = count(spy, accountant=acct, dataset="d", epsilon=0.25, predicate=lambda r: r > 4,
                rng=random.Random(1))
    assert out == int(out)
    assert spy.reads == 1
    [row] = acct.spends("d")
    assert (row.query, row.epsilon) == ("count", Fraction(1, 4))


def test_sum_clips_to_the_bounds(acct):
    spy = SpySource([-5.0, 0.5, 100.0])
    # sensitivity 2 at epsilon 0.5: noise scale 4, far too small to hide a clipping error of 93
    out = bounded_sum(spy, bounds=(0.0, 2.0), accountant=acct, dataset="d", epsilon=0.5, rng=random.Random(2))
    assert abs(out - 2.5) < 60          # unclipped would be 95.5; P(|Lap(4)| > 60) = e^-15
    assert acct.remaining("d").epsilon == 0


def test_refused_at_spend_releases_nothing(acct):
    """Another process spends between check and spend: the result is not returned."""
    spy = SpySource([1, 2])
    real_read = spy.__call__

    def read_and_race():
        acct.spend("d", 0.5, query="other process")
        return real_read()

    with pytest.raises(BudgetError):
        count(read_and_race, accountant=acct, dataset="d", epsilon=0.1)
    assert [r.query for r in acct.spends("d")] == ["other process"]
