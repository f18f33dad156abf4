"""The budget accountant: composition arithmetic, refusal before data, persistence, races."""
import multiprocessing
import sqlite3
import threading
from fractions import Fraction

import pytest

from dpsense.cloud.privacy.accountant import Budget, BudgetAccountant, BudgetError


@pytest.fixture
def acct(tmp_path):
    a = BudgetAccountant(tmp_path / "budget.db")
    a.set_budget("sensors", epsilon=1.0, delta=1e-6)
    return a


def test_sequential_spends_add_up_exactly(acct):
    for _ in range(10):
        acct.check("sensors", 0.1)
        acct.spend("sensors", 0.1, query="count")
    assert acct.spent("sensors") == Budget(Fraction(1), Fraction(0))
    assert acct.remaining("sensors") == Budget(Fraction(0), Fraction(1, 10**6))
    with pytest.raises(BudgetError, match="does not fit"):
        acct.check("sensors", 0.1)
    with pytest.raises(BudgetError):
        acct.spend("sensors", 1e-9, query="count")
    acct.spend("sensors", 0, 1e-6, query="zero-epsilon")    # delta still fits
    assert len(acct.spends("sensors")) == 11


def test_delta_is_composed_too(acct):
    acct.spend("sensors", 0.2, 4e-7, query="gauss")
    acct.spend("sensors", 0.2, 4e-7, query="gauss")
    assert acct.remaining("sensors").delta == Fraction(2, 10**7)
    with pytest.raises(BudgetError):
        acct.check("sensors", 0.1, 3e-7)
    acct.check("sensors", 0.6, 2e-7)


def test_parallel_group_costs_the_costliest_partition(acct):
    with acct.parallel("sensors", query="count per sensor") as group:
        for sensor in ("a", "b", "c"):
            group.spend(0.3, partition=sensor)
        group.spend(0.1, partition="a")                       # partition a: 0.4
        assert group.cost() == Budget(Fraction(2, 5), Fraction(0))
    assert acct.spent("sensors").epsilon == Fraction(2, 5)
    acct.spend("sensors", 0.5, query="total")                 # sequential on top: 0.9
    assert acct.remaining("sensors").epsilon == Fraction(1, 10)
    with acct.parallel("sensors") as again:
        again.check(0.1, partition="x")
        with pytest.raises(BudgetError, match="partition 'y'"):
            again.check(0.2, partition="y")


def test_parallel_with_two_partitions_per_change(acct):
    """Replace-one with a private partition key: the two costliest partitions add."""
    with acct.parallel("sensors", max_partitions=2) as group:
        group.spend(0.3, 1e-7, partition="low")
        group.spend(0.2, 3e-7, partition="mid")
        group.spend(0.1, 2e-7, partition="high")
    assert acct.spent("sensors") == Budget(Fraction(1, 2), Fraction(5, 10**7))


def test_parallel_group_can_be_continued_by_name(tmp_path, acct):
    acct.parallel("sensors", name="day-1").spend(0.5, partition="a")
    other = BudgetAccountant(tmp_path / "budget.db")
    other.parallel("sensors", name="day-1").spend(0.5, partition="b")
    assert other.spent("sensors").epsilon == Fraction(1, 2)
    with pytest.raises(ValueError, match="max_partitions"):
        other.parallel("sensors", name="day-1", max_partitions=2).spend(0.1, partition="c")


def test_persistence_across_reopen_and_reset(tmp_path, acct):
    acct.spend("sensors", 0.25, query="count")
    acct.set_budget("other", 2)
    reopened = BudgetAccountant(tmp_path / "budget.db", create=False)
    assert reopened.datasets() == ["other", "sensors"]
    assert reopened.remaining("sensors").epsilon == Fraction(3, 4)
    [row] = reopened.spends("sensors")
    assert (row.query, row.epsilon, row.partition) == ("count", Fraction(1, 4), None)
    assert reopened.reset("sensors").epsilon == Fraction(1, 4)
    assert reopened.remaining("sensors").epsilon == 1
    assert "since reset 1" in reopened.summary("sensors")
    with sqlite3.connect(tmp_path / "budget.db") as conn:
        assert conn.execute("SELECT count(*) FROM spends").fetchone()[0] == 1    # the log is kept


def test_lowering_the_budget_below_the_spent_amount_leaves_nothing(acct):
    acct.spend("sensors", 0.5, query="count")
    acct.set_budget("sensors", 0.25, 0)
    assert acct.remaining("sensors") == Budget(Fraction(0), Fraction(0))
    with pytest.raises(BudgetError):
        acct.check("sensors", 0.01)


def test_unknown_data_set_and_bad_arguments(tmp_path, acct):
    with pytest.raises(BudgetError, match="no budget"):
        acct.check("nope", 0.1)
    with pytest.raises(ValueError):
        acct.spend("sensors", -0.1, query="q")
    with pytest.raises(ValueError):
        acct.set_budget("sensors", 1, 1.5)
    with pytest.raises(TypeError):
        acct.spend("sensors", 0.1, query=None)
    with pytest.raises(ValueError):
        acct.set_budget("", 1)
    with pytest.raises(ValueError):
        acct.parallel("sensors", max_partitions=0)
    with pytest.raises(FileNotFoundError):
        BudgetAccountant(tmp_path / "missing.db", create=False)


def test_foreign_sqlite_file_is_refused(tmp_path):
    path = tmp_path / "foreign.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (x)")
    with pytest.raises(ValueError, match="not made by dpsense"):
        BudgetAccountant(path)


def test_summary_is_readable(acct):
    acct.spend("sensors", 0.1, query="count")
    with acct.parallel("sensors", query="per sensor") as g:
        g.spend(0.2, partition="a")
        g.spend(0.2, partition="b")
    text = acct.summary("sensors")
    assert "budget     epsilon=1 delta=1e-06" in text
    assert "spent      epsilon=0.3 delta=0" in text
    assert "remaining  epsilon=0.7 delta=1e-06" in text
    assert "count" in text and "2 releases over 2 partitions" in text


def _spend_until_refused(path: str, barrier, out) -> None:
    acct = BudgetAccountant(path)
    barrier.wait()
    n = 0
    while True:
        try:
            acct.spend("race", 0.01, query="race")
        except BudgetError:
            break
        n += 1
    out.put(n)


def test_two_processes_racing_cannot_overspend(tmp_path):
    """Budget 0.5 in spends of 0.01: exactly 50 succeed between the two processes."""
    path = str(tmp_path / "budget.db")
    BudgetAccountant(path).set_budget("race", 0.5)
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_spend_until_refused, args=(path, barrier, out)) for _ in range(2)]
    for p in procs:
        p.start()
    counts = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert sum(counts) == 50
    acct = BudgetAccountant(path)
    assert len(acct.spends("race")) == 50
    assert acct.spent("race").epsilon == Fraction(1, 2)


def _open_and_set(path: str, name: str, barrier, out) -> None:
    barrier.wait()
    try:
        BudgetAccountant(path).set_budget(name, 1)
        out.put(name)
    except Exception as err:  # reported to the parent, which fails the test
        out.put("%s: %r" % (name, err))


def test_processes_creating_one_file_at_once(tmp_path):
    """Six processes open the same new file together: one creates it, none fails.

    Without the retry around the WAL switch about one run in three failed here with
    "database is locked".
    """
    path = str(tmp_path / "new.db")
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(6), ctx.Queue()
    names = ["d%d" % i for i in range(6)]
    procs = [ctx.Process(target=_open_and_set, args=(path, n, barrier, out)) for n in names]
    for p in procs:
        p.start()
    results = sorted(out.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    assert results == names == BudgetAccountant(path).datasets()


def test_threads_sharing_one_accountant_cannot_overspend(tmp_path):
    acct = BudgetAccountant(tmp_path / "budget.db")
    acct.set_budget("race", 0.3)
    wins: list[int] = []
    start = threading.Barrier(6)

    def worker() -> None:
        start.wait()
        n = 0
        while True:
            try:
                acct.spend("race", 0.01, query="race")
            except BudgetError:
                break
            n += 1
        wins.append(n)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(wins) == 30
    assert acct.spent("race").epsilon == Fraction(3, 10)
