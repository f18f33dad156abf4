"""Window partitions claimed through PostgreSQL, so that N analysts score each window once.

    claims = PartitionClaims(store, owner="analyst-2", lease=15.0)   # store: a PostgresAnalystStore
    mine = claims.refresh()          # the device groups this analyst closes and scores for now
    rid = claims.next_round_id()     # round ids unique across the analysts sharing the store

A partition is a device group: windows are cut per group (cloud/analyst/windows.py), so a group's
windows, their rounds and their verdicts belong to whichever analyst holds the group's row in
``dpsense_claims``. ``refresh`` (run every third of a lease) renews this analyst's rows and takes
free or expired ones with ``SELECT ... FOR UPDATE SKIP LOCKED``, up to its share: the groups
divided by the analysts seen alive within a lease (``dpsense_workers``), rounded up. An analyst
over its share (another one joined) releases the surplus; one that stops cleanly releases all.
A killed analyst's groups are taken over once its lease ends (``lease`` seconds after its last
refresh). Lease times are the database's clock, so the analysts' clocks need not agree.

Fencing. Every transaction that closes, holds, carries or completes a window first checks,
under a share lock on the group's row, that this analyst still holds an unexpired lease on it
(``check_claim``, called by ``PostgresAnalystStore._guard``); if not, it raises ``ClaimLost``
and rolls back, and the analyst drops the group. Completing a window also inserts the window
id into ``dpsense_scored``, whose primary key refuses a second scoring of the same window even
if the leases were wrong. A window closed by one analyst and not yet done is resumed by the
group's next holder, with a new round id.

The tables are created, when missing, next to the store's own (they are not part of the
store's schema version: a single analyst never needs them).
"""
from __future__ import annotations

import math
from typing import Any

from dpsense.cloud.errors import UsageError

from .repository import StorageError
from .stream import DEFAULT_GROUP

_NOW = "extract(epoch from clock_timestamp())"
_CLAIMS_LOCK = 0x6470_7365_0000_0004     # "dpse" + a number, as in postgres.py

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS dpsense_claims (
        grp         text PRIMARY KEY,
        owner       text,
        lease_until double precision NOT NULL DEFAULT 0)""",
    """CREATE TABLE IF NOT EXISTS dpsense_workers (
        owner       text PRIMARY KEY,
        seen_until  double precision NOT NULL)""",
    # One row per scored window: the primary key is the last word on "scored once".
    """CREATE TABLE IF NOT EXISTS dpsense_scored (
        window_id   bigint PRIMARY KEY,
        owner       text NOT NULL,
        at          double precision NOT NULL)""",
)


class ClaimLost(StorageError):
    """This analyst no longer holds the partition (or the window was scored already)."""


def check_claim(cur: Any, owner: str, group: str | None, window: int | None, scoring: bool) -> None:
    """In the caller's transaction: ``owner`` holds ``group`` (or ``window``'s group) with an
    unexpired lease, kept until the commit; with ``scoring``, record ``window`` as scored."""
    if group is None:
        cur.execute("SELECT grp FROM windows WHERE id = %s", (window,))
        row = cur.fetchone()
        if row is None:
            raise ClaimLost("window %s does not exist" % window)
        group = str(row[0])
    cur.execute("SELECT 1 FROM dpsense_claims WHERE grp = %%s AND owner = %%s AND lease_until > %s FOR SHARE"
                % _NOW, (group, owner))
    if cur.fetchone() is None:
        raise ClaimLost("%s no longer holds the partition of group %s" % (owner, group))
    if scoring:
        cur.execute("INSERT INTO dpsense_scored (window_id, owner, at) VALUES (%%s, %%s, %s)"
                    " ON CONFLICT (window_id) DO NOTHING" % _NOW, (window, owner))
        if cur.rowcount != 1:
            raise ClaimLost("window %s was scored already" % window)


class PartitionClaims:
    """One analyst's claims on the device groups of a PostgreSQL analyst store; see the module docstring."""

    def __init__(self, store: Any, owner: str, lease: float = 15.0) -> None:
        from .postgres import PostgresAnalystStore
        if not isinstance(store, PostgresAnalystStore):
            raise UsageError("analysts that share windows need a PostgreSQL analyst store (--analyst-db "
                             "postgresql://...); an SQLite store serves one analyst")
        if not (isinstance(lease, (int, float)) and math.isfinite(lease) and lease >= 1.0):
            raise UsageError("the partition lease must be at least 1 s, got %r" % (lease,))
        if not owner:
            raise UsageError("a partition owner needs a name")
        self._store = store
        self.owner = owner
        self.lease = float(lease)
        self.owned: frozenset[str] = frozenset()
        with store._write("create the partition tables") as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (_CLAIMS_LOCK,))
            for statement in _SCHEMA:
                cur.execute(statement)
            cur.execute("SELECT to_regclass('dpsense_round_ids') IS NULL")
            if cur.fetchall() == [(True,)]:
                # Round ids continue after those a single analyst gave out before.
                cur.execute("CREATE SEQUENCE dpsense_round_ids")
                cur.execute("SELECT setval('dpsense_round_ids', coalesce(max(round_id), 0) + 1, false)"
                            " FROM windows")
        store.claimant = owner

    @property
    def every(self) -> float:
        """Seconds between refreshes: three chances to renew before the lease ends."""
        return self.lease / 3

    def refresh(self) -> frozenset[str]:
        """Renew, take and release partitions; the groups held until the next refresh."""
        me = self.owner
        with self._store._write("claim partitions") as cur:
            cur.execute("INSERT INTO dpsense_workers (owner, seen_until) VALUES (%%s, %s + %%s)"
                        " ON CONFLICT (owner) DO UPDATE SET seen_until = excluded.seen_until" % _NOW,
                        (me, self.lease))
            # Every group a device is in, and the default group of the devices in none; sorted,
            # so concurrent refreshes insert in one order and never wait on each other in a cycle.
            cur.execute("INSERT INTO dpsense_claims (grp) SELECT g FROM (SELECT grp AS g FROM devices"
                        " UNION SELECT %s) AS groups ORDER BY g ON CONFLICT (grp) DO NOTHING", (DEFAULT_GROUP,))
            cur.execute("SELECT (SELECT count(*) FROM dpsense_workers WHERE seen_until > %s),"
                        " (SELECT count(*) FROM dpsense_claims)" % _NOW)
            ((live, total),) = cur.fetchall()
            share = -(-int(total) // max(1, int(live)))
            cur.execute("SELECT grp, owner = %%s FROM dpsense_claims WHERE owner = %%s OR owner IS NULL"
                        " OR lease_until <= %s ORDER BY grp FOR UPDATE SKIP LOCKED" % _NOW, (me, me))
            rows = cur.fetchall()
            held = [g for g, mine in rows if mine]
            free = [g for g, mine in rows if not mine]
            keep = held[:share] + free[:max(0, share - len(held))]
            release = held[share:]
            if keep:
                cur.execute("UPDATE dpsense_claims SET owner = %%s, lease_until = %s + %%s WHERE grp = ANY(%%s)"
                            % _NOW, (me, self.lease, keep))
            if release:
                cur.execute("UPDATE dpsense_claims SET owner = NULL, lease_until = 0 WHERE grp = ANY(%s)"
                            " AND owner = %s", (release, me))
        self.owned = frozenset(keep)
        return self.owned

    def renew(self) -> frozenset[str]:
        """Extend the leases this analyst holds, nothing else: called while a round waits for the
        correction server, so that a slow round does not let the group go mid-window."""
        with self._store._write("renew partition leases") as cur:
            cur.execute("UPDATE dpsense_workers SET seen_until = %s + %%s WHERE owner = %%s" % _NOW,
                        (self.lease, self.owner))
            cur.execute("UPDATE dpsense_claims SET lease_until = %s + %%s WHERE owner = %%s RETURNING grp" % _NOW,
                        (self.lease, self.owner))
            self.owned = frozenset(str(g) for (g,) in cur.fetchall())
        return self.owned

    def release(self) -> None:
        """Give up every partition now (a clean stop): the others take them at their next refresh."""
        with self._store._write("release partitions") as cur:
            cur.execute("UPDATE dpsense_claims SET owner = NULL, lease_until = 0 WHERE owner = %s", (self.owner,))
            cur.execute("DELETE FROM dpsense_workers WHERE owner = %s", (self.owner,))
        self.owned = frozenset()

    def next_round_id(self) -> int:
        """A round id no analyst of this store has used: answers on the shared round topic are
        told apart by it."""
        return int(self._store._rows("draw a round id", "SELECT nextval('dpsense_round_ids')")[0][0])


def partition_owners(store: Any) -> dict[str, list[str]] | None:
    """``analyst -> groups`` it holds with a running lease (``(unclaimed)`` for the others), for
    ``dpsense status``; None when no analyst ever claimed a partition in ``store``."""
    from .postgres import PostgresAnalystStore
    if not isinstance(store, PostgresAnalystStore):
        return None
    if store._rows("look for partition claims", "SELECT to_regclass('dpsense_claims') IS NULL")[0][0]:
        return None
    owners: dict[str, list[str]] = {}
    for grp, owner in store._rows("read partition claims",
                                  "SELECT grp, CASE WHEN lease_until > %s THEN owner END FROM dpsense_claims"
                                  " ORDER BY grp" % _NOW):
        owners.setdefault(owner or "(unclaimed)", []).append(str(grp))
    return owners
