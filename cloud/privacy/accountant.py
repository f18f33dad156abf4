"""Privacy budgets per data set, kept in an SQLite file, one row per spend.

    acct = BudgetAccountant("curator/budget.db")
    acct.set_budget("sensors", epsilon=1.0, delta=1e-6)
    acct.check("sensors", 0.1)                  # before touching the data: BudgetError if it would not fit
    ...                                         # read, clip, compute, randomise
    acct.spend("sensors", 0.1, query="count")   # atomically re-checked and recorded
    with acct.parallel("sensors", query="count per sensor") as group:
        for sensor in sensors:
            group.spend(0.2, partition=sensor)  # disjoint partitions: the group costs 0.2
    print(acct.summary("sensors"))

Composition rules (basic composition for ``(epsilon, delta)``-DP):

* Sequential: releases on the same data set add up, ``sum(epsilon_i), sum(delta_i)``.
* Parallel: releases on *disjoint* partitions of the data set form a group. Within a
  partition they add up; the group costs the sum of its ``max_partitions`` most
  expensive partitions (epsilon and delta each), where ``max_partitions`` is the
  number of partitions one neighbouring change can reach: 1 for add/remove
  neighbours, or for replace-one when the partition key of a record is not private
  (its sensor id); 2 for replace-one with a private key (a record moved from one
  partition to another changes both).

Amounts are exact rationals (floats read as the decimal they print as), so ten
spends of 0.1 use up a budget of 1 exactly. ``spend`` runs in one ``BEGIN IMMEDIATE``
transaction: it takes SQLite's write lock, re-reads the budget and the spends, and
inserts only if the total still fits, so threads and processes sharing the file
cannot overspend. ``reset`` starts a new epoch; old rows stay in the file as an
audit trail.
"""
from __future__ import annotations

import sqlite3
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from dpsense.cloud.errors import RefusedError, StorageError

from .validation import check_delta, check_epsilon

__all__ = ["Budget", "BudgetAccountant", "BudgetError", "ParallelGroup", "Spend"]

SCHEMA_VERSION = 1
BUSY_TIMEOUT_MS = 30_000
_APPLICATION_ID = 0x64707342    # "dpsB"

_SCHEMA = (
    """CREATE TABLE budgets (
        dataset     TEXT PRIMARY KEY,
        epsilon     TEXT NOT NULL,            -- exact rational "num/den"
        delta       TEXT NOT NULL,
        epoch       INTEGER NOT NULL,         -- incremented by reset; spends of older epochs do not count
        updated_at  REAL NOT NULL
    )""",
    """CREATE TABLE spends (
        id              INTEGER PRIMARY KEY,
        dataset         TEXT NOT NULL,
        epoch           INTEGER NOT NULL,
        ts              REAL NOT NULL,
        query           TEXT NOT NULL,
        epsilon         TEXT NOT NULL,
        delta           TEXT NOT NULL,
        grp             TEXT,                 -- parallel group id, NULL for a sequential spend
        max_partitions  INTEGER,
        partition_key   TEXT
    )""",
    "CREATE INDEX spends_by_dataset ON spends (dataset, epoch)",
)


class BudgetError(RefusedError, ValueError):
    """A spend would exceed the budget of a data set, or the data set has no budget (a refusal:
    ``dpsense`` exits 1)."""


@dataclass(frozen=True)
class Budget:
    """An ``(epsilon, delta)`` pair of exact rationals."""

    epsilon: Fraction
    delta: Fraction

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon, allow_zero=True))
        object.__setattr__(self, "delta", check_delta(self.delta, allow_one=True))

    def __str__(self) -> str:
        return "epsilon=%s delta=%s" % (_show(self.epsilon), _show(self.delta))


@dataclass(frozen=True)
class Spend:
    """One recorded release."""

    id: int
    ts: float
    query: str
    epsilon: Fraction
    delta: Fraction
    group: str | None
    max_partitions: int | None
    partition: str | None


def _show(x: Fraction) -> str:
    return "%.10g" % float(x)


def _text(x: Fraction) -> str:
    return "%d/%d" % (x.numerator, x.denominator)


def _check_name(what: str, v: object) -> str:
    if not isinstance(v, str):
        raise TypeError("%s must be a str, got %s" % (what, type(v).__name__))
    if not v:
        raise ValueError("%s must not be empty" % what)
    return v


def _group_cost(rows: list[Spend]) -> tuple[Fraction, Fraction]:
    """Cost of one parallel group: the sum of its ``max_partitions`` costliest partitions."""
    eps: dict[str | None, Fraction] = defaultdict(Fraction)
    dlt: dict[str | None, Fraction] = defaultdict(Fraction)
    for r in rows:
        eps[r.partition] += r.epsilon
        dlt[r.partition] += r.delta
    m = rows[0].max_partitions or 1
    return (sum(sorted(eps.values(), reverse=True)[:m], Fraction(0)),
            sum(sorted(dlt.values(), reverse=True)[:m], Fraction(0)))


def total_cost(rows: list[Spend]) -> Budget:
    """Composed cost of spends: sequential rows add, each parallel group adds its group cost."""
    eps = dlt = Fraction(0)
    groups: dict[str, list[Spend]] = defaultdict(list)
    for r in rows:
        if r.group is None:
            eps += r.epsilon
            dlt += r.delta
        else:
            groups[r.group].append(r)
    for g in groups.values():
        ge, gd = _group_cost(g)
        eps += ge
        dlt += gd
    return Budget(eps, min(dlt, Fraction(1)))


class BudgetAccountant:
    """Budgets and spends of every data set, in one SQLite file.

    Parameters
    ----------
    path : str or pathlib.Path
        The database file; created (with its parent folder) unless ``create`` is
        false.
    create : bool, optional
        Create a missing file (default true); otherwise ``FileNotFoundError``.

    Notes
    -----
    Each call opens its own connection, so one object may be shared by threads, and
    any number of processes may open the same file. Writes wait up to
    ``BUSY_TIMEOUT_MS`` for the lock.

    References
    ----------
    C. Dwork, A. Roth, "The Algorithmic Foundations of Differential Privacy",
    2014, Theorem 3.16 (sequential composition).
    F. McSherry, "Privacy Integrated Queries", SIGMOD 2009 (parallel composition).
    N. Holohan et al., "Diffprivlib: The IBM Differential Privacy Library", 2019
    (``BudgetAccountant``, ``check`` before ``spend``).
    """

    def __init__(self, path: str | Path, *, create: bool = True) -> None:
        self.path = Path(path)
        if not self.path.exists():
            if not create:
                raise FileNotFoundError("no budget database at %s" % self.path)
            self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as conn:
            self._ensure_schema(conn)

    # -- storage ---------------------------------------------------------------------

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
        except sqlite3.Error as err:
            raise StorageError("cannot open the budget database %s: %s" % (self.path, err)) from err
        try:
            conn.execute("PRAGMA busy_timeout = %d" % BUSY_TIMEOUT_MS)
            # A spend is recorded before its result is released, so a committed spend must
            # survive a power cut: FULL syncs the WAL on every commit.
            conn.execute("PRAGMA synchronous = FULL")
            yield conn
        except sqlite3.Error as err:
            raise StorageError("budget database %s: %s" % (self.path, err)) from err
        finally:
            conn.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    def _ensure_schema(self, conn: sqlite3.Connection) -> None:
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        if app_id == 0:
            self._switch_to_wal(conn)
            conn.execute("BEGIN IMMEDIATE")
            try:
                if conn.execute("PRAGMA application_id").fetchone()[0] == 0:
                    if conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
                        raise ValueError("%s is an SQLite database not made by dpsense" % self.path)
                    for statement in _SCHEMA:
                        conn.execute(statement)
                    conn.execute("PRAGMA application_id = %d" % _APPLICATION_ID)
                    conn.execute("PRAGMA user_version = %d" % SCHEMA_VERSION)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        if app_id != _APPLICATION_ID:
            raise ValueError("%s is not a dpsense budget database" % self.path)
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version != SCHEMA_VERSION:
            raise ValueError("%s has schema version %d; this dpsense reads version %d"
                             % (self.path, version, SCHEMA_VERSION))

    @staticmethod
    def _switch_to_wal(conn: sqlite3.Connection) -> None:
        # Switching a new file to WAL needs an exclusive lock, and SQLite does not call the
        # busy handler for it: processes opening one new file at once get SQLITE_BUSY.
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        while True:
            try:
                conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as err:
                if "locked" not in str(err) or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    @staticmethod
    def _budget_row(conn: sqlite3.Connection, dataset: str) -> tuple[Budget, int]:
        row = conn.execute("SELECT epsilon, delta, epoch FROM budgets WHERE dataset = ?", (dataset,)).fetchone()
        if row is None:
            raise BudgetError("data set %r has no budget; set one first (dpsense curator budget set)" % dataset)
        return Budget(Fraction(row[0]), Fraction(row[1])), int(row[2])

    @staticmethod
    def _spends(conn: sqlite3.Connection, dataset: str, epoch: int) -> list[Spend]:
        rows = conn.execute(
            "SELECT id, ts, query, epsilon, delta, grp, max_partitions, partition_key FROM spends"
            " WHERE dataset = ? AND epoch = ? ORDER BY id", (dataset, epoch)).fetchall()
        return [Spend(i, ts, q, Fraction(e), Fraction(d), g, m, p) for i, ts, q, e, d, g, m, p in rows]

    # -- budgets ---------------------------------------------------------------------

    def set_budget(self, dataset: str, epsilon: object, delta: object = 0) -> Budget:
        """Create or change the budget of ``dataset``; spends so far still count."""
        dataset = _check_name("dataset", dataset)
        b = Budget(check_epsilon(epsilon, allow_zero=True), check_delta(delta))
        with self._write() as conn:
            conn.execute(
                "INSERT INTO budgets (dataset, epsilon, delta, epoch, updated_at) VALUES (?, ?, ?, 0, ?)"
                " ON CONFLICT (dataset) DO UPDATE SET epsilon = excluded.epsilon, delta = excluded.delta,"
                " updated_at = excluded.updated_at",
                (dataset, _text(b.epsilon), _text(b.delta), time.time()))
        return b

    def reset(self, dataset: str) -> Budget:
        """Forget the spends of ``dataset`` (kept in the file, no longer counted); returns what they cost.

        Privacy already lost is not restored by this: reset only when the data set
        has been replaced by data no earlier release depended on.
        """
        dataset = _check_name("dataset", dataset)
        with self._write() as conn:
            _, epoch = self._budget_row(conn, dataset)
            cost = total_cost(self._spends(conn, dataset, epoch))
            conn.execute("UPDATE budgets SET epoch = epoch + 1, updated_at = ? WHERE dataset = ?",
                         (time.time(), dataset))
        return cost

    def datasets(self) -> list[str]:
        """Names of the data sets with a budget."""
        with self._connect() as conn:
            return [r[0] for r in conn.execute("SELECT dataset FROM budgets ORDER BY dataset")]

    def budget(self, dataset: str) -> Budget:
        """The total budget of ``dataset``."""
        with self._connect() as conn:
            return self._budget_row(conn, _check_name("dataset", dataset))[0]

    def spends(self, dataset: str) -> list[Spend]:
        """The spends that count against the current budget, oldest first."""
        with self._connect() as conn:
            _, epoch = self._budget_row(conn, _check_name("dataset", dataset))
            return self._spends(conn, dataset, epoch)

    def spent(self, dataset: str) -> Budget:
        """Composed cost of the spends so far."""
        return total_cost(self.spends(dataset))

    def remaining(self, dataset: str) -> Budget:
        """Budget minus the composed cost, each part at least 0."""
        with self._connect() as conn:
            budget, epoch = self._budget_row(conn, _check_name("dataset", dataset))
            spent = total_cost(self._spends(conn, dataset, epoch))
        return Budget(max(budget.epsilon - spent.epsilon, Fraction(0)),
                      max(budget.delta - spent.delta, Fraction(0)))

    # -- check and spend -------------------------------------------------------------

    @staticmethod
    def _verdict(dataset: str, budget: Budget, rows: list[Spend], new: Spend) -> None:
        if new.group is not None:
            for r in rows:
                if r.group == new.group and r.max_partitions != new.max_partitions:
                    raise ValueError("parallel group %r was opened with max_partitions=%s, not %s"
                                     % (new.group, r.max_partitions, new.max_partitions))
        before = total_cost(rows)
        after = total_cost(rows + [new])
        if after.epsilon > budget.epsilon or after.delta > budget.delta:
            raise BudgetError(
                "data set %r: a release costing epsilon=%s delta=%s%s does not fit; spent %s of %s"
                % (dataset, _show(new.epsilon), _show(new.delta),
                   "" if new.partition is None else " in partition %r" % new.partition, before, budget))

    def _new(self, query: str, epsilon: object, delta: object, group: str | None,
             max_partitions: int | None, partition: str | None) -> Spend:
        return Spend(0, time.time(), _check_name("query", query), check_epsilon(epsilon, allow_zero=True),
                     check_delta(delta), group, max_partitions, partition)

    def _check(self, dataset: str, new: Spend) -> None:
        with self._connect() as conn:
            budget, epoch = self._budget_row(conn, dataset)
            self._verdict(dataset, budget, self._spends(conn, dataset, epoch), new)

    def _spend(self, dataset: str, new: Spend) -> Spend:
        with self._write() as conn:
            budget, epoch = self._budget_row(conn, dataset)
            self._verdict(dataset, budget, self._spends(conn, dataset, epoch), new)
            cur = conn.execute(
                "INSERT INTO spends (dataset, epoch, ts, query, epsilon, delta, grp, max_partitions,"
                " partition_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (dataset, epoch, new.ts, new.query, _text(new.epsilon), _text(new.delta), new.group,
                 new.max_partitions, new.partition))
            assert cur.lastrowid is not None
            return Spend(cur.lastrowid, new.ts, new.query, new.epsilon, new.delta, new.group,
                         new.max_partitions, new.partition)

    def check(self, dataset: str, epsilon: object, delta: object = 0) -> None:
        """Raise :class:`BudgetError` if a sequential spend of ``(epsilon, delta)`` would not fit.

        Call it before the data is read: a refused query then touches nothing.
        """
        self._check(_check_name("dataset", dataset), self._new("check", epsilon, delta, None, None, None))

    def spend(self, dataset: str, epsilon: object, delta: object = 0, *, query: str) -> Spend:
        """Record a sequential spend, atomically re-checked; :class:`BudgetError` if it does not fit.

        Release the result only after this returns: an unreleased result costs
        nothing, so a refusal here (another process spent first) leaks nothing.
        """
        return self._spend(_check_name("dataset", dataset), self._new(query, epsilon, delta, None, None, None))

    def parallel(self, dataset: str, *, query: str = "parallel", max_partitions: int = 1,
                 name: str | None = None) -> ParallelGroup:
        """A group of spends on disjoint partitions of ``dataset`` (usable with ``with``).

        Parameters
        ----------
        dataset : str
            The data set.
        query : str, optional
            Default query name of the group's spends.
        max_partitions : int, optional
            Partitions one neighbouring change can reach (see the module docstring).
        name : str, optional
            Group id; reuse one to add to an existing group, e.g. from another
            process. Default: a fresh random id.
        """
        if isinstance(max_partitions, bool) or not isinstance(max_partitions, int):
            raise TypeError("max_partitions must be an int")
        if max_partitions < 1:
            raise ValueError("max_partitions must be >= 1")
        return ParallelGroup(self, _check_name("dataset", dataset), _check_name("query", query),
                             max_partitions, uuid.uuid4().hex if name is None else _check_name("name", name))

    # -- reporting -------------------------------------------------------------------

    def summary(self, dataset: str) -> str:
        """A readable account of the budget, the spends and what remains."""
        with self._connect() as conn:
            budget, epoch = self._budget_row(conn, _check_name("dataset", dataset))
            rows = self._spends(conn, dataset, epoch)
        spent = total_cost(rows)
        remaining = Budget(max(budget.epsilon - spent.epsilon, Fraction(0)),
                           max(budget.delta - spent.delta, Fraction(0)))
        lines = ["data set %s" % dataset,
                 "  budget     %s" % budget,
                 "  spent      %s" % spent,
                 "  remaining  %s" % remaining,
                 "  releases   %d%s" % (len(rows), "" if epoch == 0 else " (since reset %d)" % epoch)]
        groups: dict[str, list[Spend]] = defaultdict(list)
        for r in rows:
            if r.group is not None:
                groups[r.group].append(r)
        shown: set[str] = set()
        for r in rows:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.ts))
            if r.group is None:
                lines.append("    %s  %-24s epsilon=%s delta=%s" % (stamp, r.query, _show(r.epsilon), _show(r.delta)))
            elif r.group not in shown:
                shown.add(r.group)
                g = groups[r.group]
                ge, gd = _group_cost(g)
                parts = len({x.partition for x in g})
                lines.append("    %s  parallel group %s: %d releases over %d partitions, max %d per change:"
                             " epsilon=%s delta=%s" % (stamp, r.group[:12], len(g), parts, g[0].max_partitions or 1,
                                                       _show(ge), _show(gd)))
        return "\n".join(lines)


class ParallelGroup:
    """Spends on disjoint partitions of one data set; made by :meth:`BudgetAccountant.parallel`."""

    def __init__(self, accountant: BudgetAccountant, dataset: str, query: str, max_partitions: int,
                 name: str) -> None:
        self.accountant = accountant
        self.dataset = dataset
        self.query = query
        self.max_partitions = max_partitions
        self.name = name

    def __enter__(self) -> ParallelGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def _new(self, epsilon: object, delta: object, partition: object, query: str | None) -> Spend:
        key = _check_name("partition", partition)
        return self.accountant._new(self.query if query is None else query, epsilon, delta, self.name,
                                    self.max_partitions, key)

    def check(self, epsilon: object, delta: object = 0, *, partition: str) -> None:
        """Raise :class:`BudgetError` if this spend in ``partition`` would not fit."""
        self.accountant._check(self.dataset, self._new(epsilon, delta, partition, None))

    def spend(self, epsilon: object, delta: object = 0, *, partition: str, query: str | None = None) -> Spend:
        """Record a spend in ``partition``, atomically re-checked."""
        return self.accountant._spend(self.dataset, self._new(epsilon, delta, partition, query))

    def cost(self) -> Budget:
        """What the group costs so far."""
        rows = [r for r in self.accountant.spends(self.dataset) if r.group == self.name]
        return total_cost(rows)
