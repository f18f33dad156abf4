"""The analyst store's stream tables: windows, per-row verdicts, device groups, board statuses,
events and counters. One SQL text for SQLite and PostgreSQL.

    w = store.close_window("hall-a", "time", upto_row=store.max_row_id(), before=t1, start=t0, end=t1,
                           closed_at=t1)
    members = store.window_members(w.id)          # what detection and the correction round need
    store.complete_window(w.id, outcome, verdicts, payload)    # one transaction, after the round

A reading belongs to at most one window (``readings.win``); until its window closes it is
*pending*. A window is ``closed`` (members fixed, round not done), ``held`` (a round failed and
is retried), ``done`` (the round's outcome, the verdicts and the result payload are stored, in
one transaction: no window is ever done without its round) or ``carried`` (the detector found
no inlier in it: its readings are pending again and join the group's next window). Verdict rows exist for the readings
a round decided on (presumed outliers and added false negatives); they carry the reading's
identity and arrival time, never a value, a noise or a distance difference.

The backends provide ``_rows`` (a read), ``_write`` (a transaction yielding a cursor) and
``_insert_dead``; the SQL here is written with ``?`` placeholders, turned into ``%s`` for
PostgreSQL, and uses only what both databases understand.
"""
from __future__ import annotations

import collections
import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from .records import (BootActivity, DeviceStatus, Event, Members, OddReading, PendingGroup, Verdict,
                      WindowOutcome, WindowRecord)

if TYPE_CHECKING:
    from .repository import DeadLetter

DEFAULT_GROUP = "default"
WINDOW_STATES = ("closed", "held", "done", "carried")
COUNTERS = ("ingest_received", "ingest_stored", "ingest_duplicates", "ingest_dead_letters", "windows_closed", "rounds_completed",
            "rounds_failed", "round_seconds_total", "readings_carried", "readings_set_apart", "clock_steps")
# Per-device counts of readings set apart are counters named SET_APART_PREFIX + device id.
SET_APART_PREFIX = "set_apart.d"
_TOKEN_CHUNK = 50_000

# Statements that turn a schema-1 analyst store into schema 2, also run after the schema-1
# tables of a new store. ``readings.win`` is the window a reading belongs to (NULL: pending).
SQLITE_V2 = (
    "ALTER TABLE readings ADD COLUMN win INTEGER",
    "CREATE INDEX readings_pending ON readings (row_id) WHERE win IS NULL",
    "CREATE INDEX readings_win ON readings (win) WHERE win IS NOT NULL",
    "CREATE TABLE devices (device_id INTEGER PRIMARY KEY, grp TEXT NOT NULL, updated_at REAL NOT NULL)",
    """CREATE TABLE windows (
        id INTEGER PRIMARY KEY, grp TEXT NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL,
        start_at REAL NOT NULL, end_at REAL NOT NULL, closed_at REAL NOT NULL, n INTEGER NOT NULL,
        state TEXT NOT NULL, attempts INTEGER NOT NULL, round_id INTEGER, last_error TEXT,
        presumed INTEGER, removed_fp INTEGER, added_fn INTEGER, candidates INTEGER, missing INTEGER,
        detect_s REAL, round_s REAL, done_at REAL, UNIQUE (grp, seq))""",
    """CREATE TABLE verdicts (
        row_id INTEGER PRIMARY KEY, win INTEGER NOT NULL, grp TEXT NOT NULL, device_id INTEGER NOT NULL,
        boot_id INTEGER NOT NULL, seq INTEGER NOT NULL, received_at REAL NOT NULL,
        presumed INTEGER NOT NULL, removed_fp INTEGER NOT NULL, added_fn INTEGER NOT NULL,
        candidate INTEGER NOT NULL)""",
    "CREATE INDEX verdicts_win ON verdicts (win)",
    """CREATE TABLE statuses (
        id INTEGER PRIMARY KEY, device_id INTEGER NOT NULL, boot_id INTEGER, received_at REAL NOT NULL,
        payload TEXT NOT NULL, digest BLOB NOT NULL UNIQUE)""",
    "CREATE INDEX statuses_device ON statuses (device_id, boot_id, id)",
    """CREATE TABLE events (
        id INTEGER PRIMARY KEY, at REAL NOT NULL, kind TEXT NOT NULL, grp TEXT, win INTEGER,
        text TEXT NOT NULL)""",
    "CREATE TABLE counters (name TEXT PRIMARY KEY, value REAL NOT NULL)",
)

POSTGRES_V2 = (
    "ALTER TABLE readings ADD COLUMN win bigint",
    "CREATE INDEX readings_pending ON readings (row_id) WHERE win IS NULL",
    "CREATE INDEX readings_win ON readings (win) WHERE win IS NOT NULL",
    "CREATE TABLE devices (device_id bigint PRIMARY KEY, grp text NOT NULL, updated_at double precision NOT NULL)",
    """CREATE TABLE windows (
        id bigint PRIMARY KEY, grp text NOT NULL, seq bigint NOT NULL, kind text NOT NULL,
        start_at double precision NOT NULL, end_at double precision NOT NULL,
        closed_at double precision NOT NULL, n bigint NOT NULL, state text NOT NULL,
        attempts integer NOT NULL, round_id bigint, last_error text, presumed bigint, removed_fp bigint,
        added_fn bigint, candidates bigint, missing bigint, detect_s double precision,
        round_s double precision, done_at double precision, UNIQUE (grp, seq))""",
    """CREATE TABLE verdicts (
        row_id bigint PRIMARY KEY, win bigint NOT NULL, grp text NOT NULL, device_id bigint NOT NULL,
        boot_id bigint NOT NULL, seq bigint NOT NULL, received_at double precision NOT NULL,
        presumed smallint NOT NULL, removed_fp smallint NOT NULL, added_fn smallint NOT NULL,
        candidate smallint NOT NULL)""",
    "CREATE INDEX verdicts_win ON verdicts (win)",
    """CREATE TABLE statuses (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, device_id bigint NOT NULL, boot_id bigint,
        received_at double precision NOT NULL, payload text NOT NULL, digest bytea NOT NULL UNIQUE)""",
    "CREATE INDEX statuses_device ON statuses (device_id, boot_id, id)",
    """CREATE TABLE events (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, at double precision NOT NULL, kind text NOT NULL,
        grp text, win bigint, text text NOT NULL)""",
    "CREATE TABLE counters (name text PRIMARY KEY, value double precision NOT NULL)",
)

# Schema 3 -> 4: a done window says why its correction was not used (the model-fit check,
# cloud/correction/fit.py); NULL: the correction was used, or no round ran.
SQLITE_V4 = ("ALTER TABLE windows ADD COLUMN fit TEXT",)
POSTGRES_V4 = ("ALTER TABLE windows ADD COLUMN fit text",)

# Fields of a board's status message the analyst keeps (firmware/app.py, cloud/transport/gateway/);
# anything else in a status message is dropped, so nothing a board adds by mistake is stored.
STATUS_FIELDS = ("event", "device", "boot", "board", "entropy", "eps_record", "eps_record_worst", "eps_a",
                 "window", "spent", "cap", "withheld", "released", "dropped", "pending", "sensor", "mem_free",
                 "last_seq", "error")


def _majority(widths: list[int]) -> int:
    """The most common of ``widths`` (the smallest on a tie; 0 when empty)."""
    if not widths:
        return 0
    counts = collections.Counter(widths)
    return min(counts, key=lambda w: (-counts[w], w))


_WINDOW_COLUMNS = ("id, grp, seq, kind, start_at, end_at, closed_at, n, state, attempts, round_id, last_error,"
                   " presumed, removed_fp, added_fn, candidates, missing, detect_s, round_s, done_at, fit")
_VERDICT_COLUMNS = ("win, grp, row_id, device_id, boot_id, seq, received_at, presumed, removed_fp, added_fn,"
                    " candidate")


def _window(row: Sequence[Any]) -> WindowRecord:
    return WindowRecord(*row)


def _verdict(row: Sequence[Any]) -> Verdict:
    return Verdict(*row[:7], *(bool(x) for x in row[7:]))


def _group_filter(group: str) -> tuple[str, tuple[Any, ...]]:
    """SQL condition on ``device_id`` for the readings of ``group``: a device is in the default
    group unless the devices table puts it elsewhere."""
    if group == DEFAULT_GROUP:
        return "device_id NOT IN (SELECT device_id FROM devices WHERE grp <> ?)", (DEFAULT_GROUP,)
    return "device_id IN (SELECT device_id FROM devices WHERE grp = ?)", (group,)


def status_digest(status: DeviceStatus, text: str) -> bytes:
    return hashlib.sha256(status.topic.encode() + b"\x00" + text.encode()).digest()


class TokenListing(ABC):
    """Every stored record token, for comparing the two stores (``dpsense status``).

    The backends (sqlite.py, postgres.py) give the database access below."""

    _PARAM = "?"
    _token_table = ""

    @abstractmethod
    def _rows(self, action: str, query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """The rows of ``query``; a database error becomes StorageError naming ``action``."""

    def _q(self, sql: str) -> str:
        return sql if self._PARAM == "?" else sql.replace("?", self._PARAM)

    def token_array(self) -> npt.NDArray[np.uint64]:
        """The stored tokens as unsigned 64-bit integers (8 bytes per record, read in chunks)."""
        parts: list[npt.NDArray[np.uint64]] = []
        after = 0
        while True:
            rows = self._rows("list tokens", self._q(
                "SELECT row_id, token FROM %s WHERE row_id > ? ORDER BY row_id LIMIT ?" % self._token_table),
                (after, _TOKEN_CHUNK))
            if not rows:
                break
            parts.append(np.frombuffer(b"".join(bytes(t) for _, t in rows), dtype="<u8").astype(np.uint64))
            after = rows[-1][0]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)


class StreamTables(TokenListing):
    """The analyst store's methods over the stream tables; see the module docstring."""

    _token_table = "readings"
    _JSON_PARAM = "?"

    @abstractmethod
    def _write(self, action: str) -> AbstractContextManager[Any]:
        """A cursor in one transaction, committed when the block ends."""

    @abstractmethod
    def _insert_dead(self, cur: Any, dead: Sequence[DeadLetter]) -> None:
        """Store the dead letters ``dead`` with ``cur``."""

    def _guard(self, cur: Any, group: str | None, window: int | None, scoring: bool = False) -> None:
        """Called first in every transaction that closes, changes or scores a window (``group``
        or ``window`` names what it touches). Nothing here: one process owns the store. The
        PostgreSQL store checks there that this analyst still holds the group's partition
        (cloud/storage/claims.py) and, when ``scoring``, that no one scored the window before."""

    def _x(self, cur: Any, sql: str, params: Sequence[Any] = ()) -> Any:
        cur.execute(self._q(sql), params)
        return cur

    def _bump(self, cur: Any, counts: dict[str, float]) -> None:
        rows = [(k, v) for k, v in counts.items() if v]
        if rows:
            cur.executemany(self._q("INSERT INTO counters (name, value) VALUES (?, ?) ON CONFLICT (name)"
                                    " DO UPDATE SET value = counters.value + excluded.value"), rows)

    def _count_batch(self, cur: Any, messages: int, new: int, records: int, dead: int) -> None:
        """Ingest counters, in the transaction of the batch they count. ``dead`` counts the
        batch's dead letters, conflicting duplicates included; they are not duplicates."""
        conflicts = dead - (messages - records)
        self._bump(cur, {"ingest_received": messages, "ingest_stored": new,
                         "ingest_duplicates": records - new - conflicts, "ingest_dead_letters": dead})

    def counters(self) -> dict[str, float]:
        """Running totals (``COUNTERS``) since the store was made; absent ones are 0."""
        found = dict(self._rows("read counters", "SELECT name, value FROM counters"))
        return {name: float(found.get(name, 0.0)) for name in sorted(set(COUNTERS) | set(found))
                if not name.startswith(SET_APART_PREFIX)}

    def reading_tokens(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.uint64]]:
        """Every stored reading's device id, window (-1 while it has none) and token (as
        ``token_array``), aligned, in row order."""
        devs: list[npt.NDArray[np.int64]] = []
        wins: list[npt.NDArray[np.int64]] = []
        toks: list[npt.NDArray[np.uint64]] = []
        after = 0
        while True:
            rows = self._rows("list tokens by device and window", self._q(
                "SELECT row_id, device_id, coalesce(win, -1), token FROM readings WHERE row_id > ?"
                " ORDER BY row_id LIMIT ?"), (after, _TOKEN_CHUNK))
            if not rows:
                break
            devs.append(np.array([int(r[1]) for r in rows], dtype=np.int64))
            wins.append(np.array([int(r[2]) for r in rows], dtype=np.int64))
            toks.append(np.frombuffer(b"".join(bytes(r[3]) for r in rows), dtype="<u8").astype(np.uint64))
            after = rows[-1][0]
        if not devs:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, np.zeros(0, dtype=np.uint64)
        return np.concatenate(devs), np.concatenate(wins), np.concatenate(toks)

    # -- arrival ------------------------------------------------------------------------------------
    def max_row_id(self) -> int:
        """The newest reading's row id (0 when there is none): an index lookup, whatever the size."""
        return int(self._rows("read the newest row id", "SELECT coalesce(max(row_id), 0) FROM readings")[0][0])

    def released_rows(self, group: str, since: float, until: float) -> list[tuple[Any, ...]]:
        """``(arrival, config_id, values)`` of the group's readings that arrived in ``[since,
        until)``, in arrival order: the values as released (wire bytes), for the aggregates."""
        cond, params = _group_filter(group)
        return self._rows("read the readings of group %s" % group, self._q(
            "SELECT received_at, config_id, vals FROM readings WHERE received_at >= ? AND received_at < ? AND "
            + cond + " ORDER BY row_id"), (since, until) + params)

    # -- device groups ------------------------------------------------------------------------------
    def set_device_group(self, device_id: int, group: str, at: float) -> None:
        with self._write("set the group of device %d" % device_id) as cur:
            self._x(cur, "INSERT INTO devices (device_id, grp, updated_at) VALUES (?, ?, ?) ON CONFLICT (device_id)"
                         " DO UPDATE SET grp = excluded.grp, updated_at = excluded.updated_at",
                    (device_id, group, at))

    def device_groups(self) -> dict[int, str]:
        """``device_id -> group`` for the devices put in a group; others are in ``DEFAULT_GROUP``."""
        return dict(self._rows("read device groups", "SELECT device_id, grp FROM devices ORDER BY device_id"))

    # -- pending readings ---------------------------------------------------------------------------
    def pending_by_group(self, after_row: int, upto_row: int, before: float | None = None) -> dict[str, PendingGroup]:
        """Readings not in any window, with ``after_row < row_id <= upto_row`` (and an arrival
        before ``before``), counted per group."""
        sql = ("SELECT coalesce(d.grp, ?), count(*), min(r.received_at) FROM readings r"
               " LEFT JOIN devices d ON d.device_id = r.device_id"
               " WHERE r.win IS NULL AND r.row_id > ? AND r.row_id <= ?")
        params: tuple[Any, ...] = (DEFAULT_GROUP, after_row, upto_row)
        if before is not None:
            sql += " AND r.received_at < ?"
            params += (before,)
        rows = self._rows("count pending readings", self._q(sql + " GROUP BY 1"), params)
        return {g: PendingGroup(int(n), float(first)) for g, n, first in rows}

    def pending_in_group(self, group: str, upto_row: int, before: float) -> PendingGroup:
        """The group's pending readings with ``row_id <= upto_row`` that arrived before ``before``."""
        cond, params = _group_filter(group)
        n, first = self._rows("count pending readings", self._q(
            "SELECT count(*), min(received_at) FROM readings WHERE win IS NULL AND row_id <= ? AND received_at < ?"
            " AND " + cond), (upto_row, before) + params)[0]
        return PendingGroup(int(n), float(first) if first is not None else before)

    def first_pending_at(self, group: str, upto_row: int, at_or_after: float) -> float | None:
        """Earliest arrival at or after ``at_or_after`` among the group's pending readings."""
        cond, params = _group_filter(group)
        rows = self._rows("find pending readings", self._q(
            "SELECT min(received_at) FROM readings WHERE win IS NULL AND row_id <= ? AND received_at >= ? AND "
            + cond), (upto_row, at_or_after) + params)
        return None if rows[0][0] is None else float(rows[0][0])

    # -- windows ------------------------------------------------------------------------------------
    def close_window(self, group: str, kind: str, *, upto_row: int, closed_at: float, before: float | None = None,
                     limit: int | None = None, start: float | None = None,
                     end: float | None = None) -> WindowRecord | None:
        """Make the group's pending readings with ``row_id <= upto_row`` (and an arrival before
        ``before``; at most ``limit``, oldest first) one window, in one transaction. ``start`` and
        ``end`` default to the first and last arrival. None when no reading qualified."""
        cond, gparams = _group_filter(group)
        with self._write("close a window of group %s" % group) as cur:
            self._guard(cur, group, None)
            wid = int(self._x(cur, "SELECT coalesce(max(id), -1) + 1 FROM windows").fetchone()[0])
            seq = int(self._x(cur, "SELECT coalesce(max(seq), -1) + 1 FROM windows WHERE grp = ?",
                              (group,)).fetchone()[0])
            if limit is not None:
                self._x(cur, "UPDATE readings SET win = ? WHERE row_id IN (SELECT row_id FROM readings"
                             " WHERE win IS NULL AND row_id <= ? AND " + cond + " ORDER BY row_id LIMIT ?)",
                        (wid, upto_row) + gparams + (limit,))
            else:
                sql = "UPDATE readings SET win = ? WHERE win IS NULL AND row_id <= ? AND " + cond
                params: tuple[Any, ...] = (wid, upto_row) + gparams
                if before is not None:
                    sql += " AND received_at < ?"
                    params += (before,)
                self._x(cur, sql, params)
            n = cur.rowcount
            if n <= 0:
                return None
            first, last = self._x(cur, "SELECT min(received_at), max(received_at) FROM readings WHERE win = ?",
                                  (wid,)).fetchone()
            rec = WindowRecord(wid, group, seq, kind, float(first if start is None else start),
                               float(last if end is None else end), closed_at, n, "closed", 0, None, None,
                               None, None, None, None, None, None, None, None)
            self._x(cur, "INSERT INTO windows (id, grp, seq, kind, start_at, end_at, closed_at, n, state, attempts)"
                         " VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'closed', 0)",
                    (wid, group, seq, kind, rec.start, rec.end, closed_at, n))
            self._bump(cur, {"windows_closed": 1})
        return rec

    def window_members(self, window: int, columns: int | None = None, config_id: int | None = None) -> Members:
        """The window's readings. Those with another column count than ``columns`` (when None:
        the count most of the window's readings have, the fewer columns on a tie) or another
        configuration than ``config_id`` (when given) are set apart in ``Members.odd``: the
        protocol allows 1..16 columns per reading, and one device's choice must not decide
        whether the others are scored."""
        from .repository import values_matrix
        every = self._rows("read window %d" % window, self._q(
            "SELECT row_id, device_id, boot_id, seq, received_at, token, vals, config_id FROM readings"
            " WHERE win = ? ORDER BY row_id"), (window,))
        width = 4 * columns if columns is not None else _majority([len(r[6]) for r in every])
        rows, odd = [], []
        for r in every:
            n = len(r[6]) // 4
            if len(r[6]) != width:
                odd.append(OddReading(int(r[0]), int(r[1]), n, int(r[7]),
                                      "%d columns, window has %d" % (n, width // 4)))
            elif config_id is not None and int(r[7]) != config_id:
                odd.append(OddReading(int(r[0]), int(r[1]), n, int(r[7]),
                                      "config_id %d, profile has %d" % (int(r[7]), config_id)))
            else:
                rows.append(r)
        ints = np.array([r[:4] for r in rows], dtype=np.int64).reshape(len(rows), 4)
        return Members(ints[:, 0], ints[:, 1], ints[:, 2], ints[:, 3],
                       np.array([r[4] for r in rows], dtype=np.float64), [bytes(r[5]) for r in rows],
                       values_matrix([bytes(r[6]) for r in rows]), odd)

    def _set_apart(self, cur: Any, window: int, odd: Sequence[OddReading], at: float) -> None:
        """Record a window's readings set apart: one event per device, counted in total and per device."""
        if not odd:
            return
        by_device: dict[int, list[OddReading]] = {}
        for o in odd:
            by_device.setdefault(o.device_id, []).append(o)
        grp = self._x(cur, "SELECT grp FROM windows WHERE id = ?", (window,)).fetchone()
        for dev, rs in sorted(by_device.items()):
            reasons = sorted({o.reason for o in rs})
            self._event(cur, at, "set_apart", grp[0] if grp else None, window,
                        "window %d: %d readings of device %d set apart, not scored (%s)"
                        % (window, len(rs), dev, "; ".join(reasons)))
            self._bump(cur, {SET_APART_PREFIX + str(dev): len(rs)})
        self._bump(cur, {"readings_set_apart": len(odd)})

    def set_apart_by_device(self) -> dict[int, int]:
        """Readings set apart from their windows so far, per device id."""
        rows = self._rows("read readings set apart", self._q("SELECT name, value FROM counters WHERE name LIKE ?"),
                          (SET_APART_PREFIX + "%",))
        return {int(name[len(SET_APART_PREFIX):]): int(v) for name, v in rows}

    def window_record(self, window: int) -> WindowRecord | None:
        rows = self._rows("read window %d" % window,
                          self._q("SELECT %s FROM windows WHERE id = ?" % _WINDOW_COLUMNS), (window,))
        return _window(rows[0]) if rows else None

    def windows(self, group: str | None = None, states: Sequence[str] = WINDOW_STATES,
                limit: int | None = None) -> list[WindowRecord]:
        """Windows by id (the most recent ``limit`` when given), optionally of one group or state."""
        where = "state IN (%s)" % ", ".join("?" * len(states))
        params: tuple[Any, ...] = tuple(states)
        if group is not None:
            where += " AND grp = ?"
            params += (group,)
        sql = "SELECT %s FROM windows WHERE %s ORDER BY id DESC" % (_WINDOW_COLUMNS, where)
        if limit is not None:
            sql += " LIMIT ?"
            params += (limit,)
        return [_window(r) for r in reversed(self._rows("read windows", self._q(sql), params))]

    def window_counts(self) -> dict[str, int]:
        """Windows per state (every state present, 0 when none)."""
        found = {k: int(n) for k, n in self._rows("count windows",
                                                  "SELECT state, count(*) FROM windows GROUP BY state")}
        return {state: found.get(state, 0) for state in WINDOW_STATES}

    def max_round_id(self) -> int:
        return int(self._rows("read round ids", "SELECT coalesce(max(round_id), 0) FROM windows")[0][0])

    def start_attempt(self, window: int, round_id: int) -> None:
        with self._write("start a round of window %d" % window) as cur:
            self._guard(cur, None, window)
            self._x(cur, "UPDATE windows SET attempts = attempts + 1, round_id = ? WHERE id = ?", (round_id, window))

    def hold_window(self, window: int, reason: str, at: float, event: str) -> None:
        """A round that could not complete: the window stays without verdicts, and says why."""
        with self._write("hold window %d" % window) as cur:
            self._guard(cur, None, window)
            self._x(cur, "UPDATE windows SET state = 'held', last_error = ? WHERE id = ? AND state <> 'done'",
                    (reason, window))
            grp = self._x(cur, "SELECT grp FROM windows WHERE id = ?", (window,)).fetchone()
            self._event(cur, at, "held", grp[0] if grp else None, window, event)
            self._bump(cur, {"rounds_failed": 1})

    def carry_window(self, window: int, text: str, at: float) -> int:
        """Give a closed window's readings back to the pending ones (its record stays, as
        ``carried``); returns how many readings it held."""
        with self._write("carry window %d" % window) as cur:
            self._guard(cur, None, window)
            row = self._x(cur, "SELECT grp, n FROM windows WHERE id = ? AND state <> 'done'", (window,)).fetchone()
            if row is None:
                return 0
            self._x(cur, "UPDATE readings SET win = NULL WHERE win = ?", (window,))
            self._x(cur, "UPDATE windows SET state = 'carried', last_error = ? WHERE id = ?", (text, window))
            self._event(cur, at, "carried", row[0], window, text)
            self._bump(cur, {"readings_carried": int(row[1])})
        return int(row[1])

    def complete_window(self, window: int, outcome: WindowOutcome, verdicts: Sequence[Verdict],
                        payload: dict[str, Any], note: str | None = None, odd: Sequence[OddReading] = ()) -> None:
        """Store a round's outcome, its verdicts, its result payload and the readings it set
        apart (``odd``, see ``window_members``) in one transaction."""
        text = json.dumps(payload, allow_nan=False)
        with self._write("store the outcome of window %d" % window) as cur:
            self._guard(cur, None, window, scoring=True)
            self._x(cur, "DELETE FROM verdicts WHERE win = ?", (window,))
            if verdicts:
                cur.executemany(self._q("INSERT INTO verdicts (%s) VALUES (%s)"
                                        % (_VERDICT_COLUMNS, ", ".join("?" * 11))),
                                [(v.window, v.group, v.row_id, v.device_id, v.boot_id, v.seq, v.received_at,
                                  int(v.presumed), int(v.removed_fp), int(v.added_fn), int(v.candidate))
                                 for v in verdicts])
            self._x(cur, "INSERT INTO results (window_id, payload) VALUES (?, %s) ON CONFLICT (window_id)"
                         " DO UPDATE SET payload = excluded.payload" % self._JSON_PARAM, (window, text))
            o = outcome
            self._x(cur, "UPDATE windows SET state = 'done', last_error = NULL, presumed = ?, removed_fp = ?,"
                         " added_fn = ?, candidates = ?, missing = ?, detect_s = ?, round_s = ?, done_at = ?, fit = ?"
                         " WHERE id = ?",
                    (o.presumed, o.removed_fp, o.added_fn, o.candidates, o.missing, o.detect_s, o.round_s,
                     o.done_at, o.fit, window))
            if note is not None:
                grp = self._x(cur, "SELECT grp FROM windows WHERE id = ?", (window,)).fetchone()
                self._event(cur, o.done_at, "completed", grp[0] if grp else None, window, note)
            self._set_apart(cur, window, odd, o.done_at)
            self._bump(cur, {"rounds_completed": 1, "round_seconds_total": o.round_s})

    def verdicts(self, window: int | None = None, since: float | None = None, group: str | None = None,
                 candidates_only: bool = True) -> list[Verdict]:
        """Verdict rows by window and arrival; ``since`` filters on the reading's arrival time."""
        where, params = ["1 = 1"], []
        if candidates_only:
            where.append("candidate = 1")
        for cond, value in (("win = ?", window), ("received_at >= ?", since), ("grp = ?", group)):
            if value is not None:
                where.append(cond)
                params.append(value)
        return [_verdict(r) for r in self._rows("read verdicts", self._q(
            "SELECT %s FROM verdicts WHERE %s ORDER BY win, row_id" % (_VERDICT_COLUMNS, " AND ".join(where))),
            params)]

    def candidate_counts(self) -> dict[int, int]:
        """``device_id -> candidates`` over every done window."""
        return {int(d): int(n) for d, n in self._rows(
            "count candidates", "SELECT device_id, count(*) FROM verdicts WHERE candidate = 1 GROUP BY device_id")}

    # -- events -------------------------------------------------------------------------------------
    def _event(self, cur: Any, at: float, kind: str, group: str | None, window: int | None, text: str) -> None:
        self._x(cur, "INSERT INTO events (at, kind, grp, win, text) VALUES (?, ?, ?, ?, ?)",
                (at, kind, group, window, text))

    def add_event(self, kind: str, text: str, at: float, group: str | None = None, window: int | None = None,
                  carried: int = 0, counts: dict[str, float] | None = None) -> None:
        """Log an event; ``counts`` are added to the running totals in the same transaction."""
        with self._write("log an event") as cur:
            self._event(cur, at, kind, group, window, text)
            self._bump(cur, dict(counts or {}, readings_carried=carried))

    def events(self, limit: int = 20) -> list[Event]:
        """The most recent ``limit`` events, newest first."""
        return [Event(*r) for r in self._rows("read events", self._q(
            "SELECT at, kind, grp, win, text FROM events ORDER BY id DESC LIMIT ?"), (limit,))]

    # -- board status messages ----------------------------------------------------------------------
    def add_statuses(self, statuses: Sequence[DeviceStatus], dead: Sequence[DeadLetter]) -> int:
        """Store status messages (a message stored before is ignored) and dead letters in one
        transaction; return how many messages were new."""
        rows = []
        for s in statuses:
            text = json.dumps({k: s.fields[k] for k in STATUS_FIELDS if k in s.fields}, sort_keys=True,
                              separators=(",", ":"))
            rows.append((s.device_id, s.boot_id, s.received_at, text, status_digest(s, text)))
        with self._write("store status messages") as cur:
            added = 0
            for row in rows:
                self._x(cur, "INSERT INTO statuses (device_id, boot_id, received_at, payload, digest)"
                             " VALUES (?, ?, ?, ?, ?) ON CONFLICT (digest) DO NOTHING", row)
                added += max(cur.rowcount, 0)
            self._insert_dead(cur, dead)
        return added

    def latest_statuses(self) -> list[DeviceStatus]:
        """The newest status message of each (device, boot), by device then boot."""
        rows = self._rows("read status messages",
                          "SELECT s.device_id, s.boot_id, s.received_at, s.payload FROM statuses s"
                          " JOIN (SELECT max(id) AS id FROM statuses GROUP BY device_id, boot_id) m ON m.id = s.id"
                          " ORDER BY s.device_id, s.boot_id")
        return [DeviceStatus(int(d), None if b is None else int(b), float(at), json.loads(p))
                for d, b, at, p in rows]

    def boot_activity(self) -> list[BootActivity]:
        """Readings and the last arrival per (device, boot)."""
        return [BootActivity(int(d), int(b), int(n), float(last)) for d, b, n, last in self._rows(
            "read device activity", "SELECT device_id, boot_id, count(*), max(received_at) FROM readings"
                                    " GROUP BY device_id, boot_id ORDER BY device_id, boot_id")]

    def round_readings(self) -> dict[int, int]:
        """Readings per device in windows the analyst asked a correction round for (an attempt
        counts: the answer may have reached it), whose round view adds epsilon_A."""
        return {int(d): int(n) for d, n in self._rows(
            "read readings in rounds", "SELECT r.device_id, count(*) FROM readings r JOIN windows w ON w.id = r.win"
                                       " WHERE w.round_id IS NOT NULL GROUP BY r.device_id")}

    # -- schema 1 -> 2 ------------------------------------------------------------------------------
    def _migrate_results(self, cur: Any) -> None:
        """Windows of a schema-1 store (count windows of the default group, row ranges in the
        stored results) become windows with members and verdicts."""
        results = self._x(cur, "SELECT window_id, payload FROM results ORDER BY window_id").fetchall()
        for wid, payload in results:
            p = payload if isinstance(payload, dict) else json.loads(payload)
            first, last = int(p["first_row"]), int(p["last_row"])
            self._x(cur, "UPDATE readings SET win = ? WHERE row_id >= ? AND row_id <= ?", (wid, first, last))
            n, t0, t1 = self._x(cur, "SELECT count(*), min(received_at), max(received_at) FROM readings"
                                     " WHERE win = ?", (wid,)).fetchone()
            if not n:
                continue
            presumed = set(p.get("presumed_rows", []))
            cand = set(p.get("candidate_rows", []))
            self._x(cur, "INSERT INTO windows (%s) VALUES (%s)" % (_WINDOW_COLUMNS, ", ".join("?" * 21)),
                    (wid, DEFAULT_GROUP, wid, "count", t0, t1, t1, n, "done", 1, None, None, len(presumed),
                     len(presumed - cand), len(cand - presumed), len(cand), p.get("missing_corrections"),
                     p.get("detect_s"), p.get("round_s"), t1, None))
            rows = sorted(presumed | cand)
            for i in range(0, len(rows), 500):
                chunk = rows[i:i + 500]
                found = self._x(cur, "SELECT row_id, device_id, boot_id, seq, received_at FROM readings"
                                     " WHERE row_id IN (%s)" % ", ".join("?" * len(chunk)), chunk).fetchall()
                cur.executemany(self._q("INSERT INTO verdicts (%s) VALUES (%s)"
                                        % (_VERDICT_COLUMNS, ", ".join("?" * 11))),
                                [(wid, DEFAULT_GROUP, r, d, b, s, at, int(r in presumed),
                                  int(r in presumed and r not in cand), int(r in cand and r not in presumed),
                                  int(r in cand)) for r, d, b, s, at in found])
