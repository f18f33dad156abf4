"""SQLite backend (the default): one file per store, WAL journal, every commit synced to disk.

    with SqliteAnalystStore("/var/lib/dpsense/analyst.db") as store:
        new = store.add_batch(readings, dead_letters)    # committed when it returns

A store object owns one ``sqlite3`` connection and must only be used from the thread that
created it: ``sqlite3`` checks this (``check_same_thread``) and the call fails with a
``StorageError``. Give each thread or process its own store object. Several processes may open
the same file: in WAL mode readers never block the one writer, and a writer waits up to
``BUSY_TIMEOUT_MS`` for the write lock instead of failing at once.

The schema is created when the file is new. ``PRAGMA application_id`` says which kind of store
a file holds and ``PRAGMA user_version`` its schema version; opening a file of the other kind,
of a newer version or not made by dpsense is an error; a schema-1 file is upgraded when opened.
"""
from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any

from .repository import (
    GAPS_SQL,
    WRAP_END_SQL,
    AnalystStore,
    Correction,
    CorrectionStore,
    DeadLetter,
    Gap,
    Reading,
    StorageError,
    StorageUnavailable,
    Window,
    boot_gap,
    check_limit,
    correction_conflict,
    dead_letter_row,
    group_reasons,
    reading_conflict,
    stored_values,
    unpack_values,
    upgrade_dead_letters,
    values_matrix,
)
from .stream import SQLITE_V2

SCHEMA_VERSION = 3
BUSY_TIMEOUT_MS = 10_000
_APPLICATION_IDS = {"analyst": 0x64707341, "correction": 0x64707343}    # "dpsA", "dpsC"
# Another connection held the lock for longer than BUSY_TIMEOUT_MS: a later retry may succeed.
_TRANSIENT = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def _storage_error(message: str, err: sqlite3.Error) -> StorageError:
    code = getattr(err, "sqlite_errorcode", None)
    transient = code is not None and code & 0xFF in _TRANSIENT      # low byte: the primary code
    return (StorageUnavailable if transient else StorageError)(message)
_KEYS_PER_QUERY = 500    # tokens per IN list, well below SQLite's 32766-parameter limit
_ROWS_PER_INSERT = 1000  # rows per multi-row INSERT: 8000 parameters, below that limit too

_DEAD_LETTERS_SQL = (
    """CREATE TABLE dead_letters (
        id          INTEGER PRIMARY KEY,
        topic       TEXT NOT NULL,
        payload     BLOB NOT NULL,
        reason      TEXT NOT NULL,
        received_at REAL NOT NULL,                -- first arrival
        digest      BLOB NOT NULL UNIQUE,         -- dead_letter_digest: (topic, reason, payload)
        size        INTEGER NOT NULL DEFAULT 0,   -- the whole payload's bytes; payload is a prefix
        sha256      BLOB NOT NULL DEFAULT x'',    -- the whole payload's SHA-256
        repeats     INTEGER NOT NULL DEFAULT 1,
        last_at     REAL NOT NULL DEFAULT 0
    )""",
)
# Schema 2 -> 3: dead letters keep a prefix, the size and SHA-256, and count repeats.
_DEAD_LETTERS_V3 = (
    "ALTER TABLE dead_letters ADD COLUMN size INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE dead_letters ADD COLUMN sha256 BLOB NOT NULL DEFAULT x''",
    "ALTER TABLE dead_letters ADD COLUMN repeats INTEGER NOT NULL DEFAULT 1",
    "ALTER TABLE dead_letters ADD COLUMN last_at REAL NOT NULL DEFAULT 0",
)

_ANALYST_SQL = (
    # row_id is assigned in commit order (SQLite has one writer at a time): arrival order.
    """CREATE TABLE readings (
        row_id      INTEGER PRIMARY KEY,
        device_id   INTEGER NOT NULL,
        boot_id     INTEGER NOT NULL,
        seq         INTEGER NOT NULL,
        token       BLOB NOT NULL,
        config_id   INTEGER NOT NULL,
        vals        BLOB NOT NULL,            -- the values, little-endian int32 as on the wire
        topic       TEXT NOT NULL,
        received_at REAL NOT NULL,
        UNIQUE (device_id, boot_id, seq)
    )""",
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE results (window_id INTEGER PRIMARY KEY, payload TEXT NOT NULL)",
) + _DEAD_LETTERS_SQL + SQLITE_V2

_CORRECTION_SQL = (
    """CREATE TABLE corrections (
        row_id      INTEGER PRIMARY KEY,
        token       BLOB NOT NULL UNIQUE,
        d_diff      INTEGER NOT NULL,
        received_at REAL NOT NULL
    )""",
) + _DEAD_LETTERS_SQL


class _SqliteDatabase:
    """One connection to one store file, with the pragmas, schema and transactions all stores share."""

    _kind: str
    _schema: tuple[str, ...]

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            # Created 0600 before SQLite opens it: its -wal and -shm files take the database's mode.
            if path != ":memory:" and not path.startswith("file:"):
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
                os.fchmod(fd, 0o600)
                os.close(fd)
        except FileExistsError:
            pass
        except OSError as err:
            raise StorageError("cannot create SQLite database %s: %s" % (path, err.strerror or err)) from err
        try:
            # isolation_level=None: no implicit transactions; _write() issues BEGIN/COMMIT itself.
            self._conn = sqlite3.connect(path, isolation_level=None)
        except sqlite3.Error as err:
            raise _storage_error("cannot open SQLite database %s: %s" % (path, err), err) from err
        try:
            self._configure()
            self._ensure_schema()
        except BaseException:
            self._conn.close()
            raise

    def _configure(self) -> None:
        with self._translate("configure"):
            self._conn.execute("PRAGMA busy_timeout = %d" % BUSY_TIMEOUT_MS)
            mode = self._switch_to_wal()
            if mode not in ("wal", "memory"):
                raise StorageError("%s: cannot switch to WAL mode (journal_mode is %s)" % (self.path, mode))
            # A commit returns only after SQLite has written the transaction to the WAL file, at
            # any synchronous level; a process killed with SIGKILL loses nothing it committed,
            # because the written pages are in the OS page cache. FULL also fsyncs the WAL on
            # every commit, so a committed batch survives a power cut or kernel crash too. The
            # ingest service acknowledges a batch right after add_batch() returns and the broker
            # then forgets those messages, so a commit must mean "on disk" (NORMAL only syncs
            # the WAL at checkpoints and may lose the last commits on power loss).
            self._conn.execute("PRAGMA synchronous = FULL")

    def _switch_to_wal(self) -> str:
        # Switching a new file to WAL needs an exclusive lock and SQLite does not call the
        # busy handler for it: two connections opening the same new file at once (the
        # ingest thread and the detector of one service) get SQLITE_BUSY immediately.
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        while True:
            try:
                return str(self._conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
            except sqlite3.OperationalError as err:
                if "locked" not in str(err) or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def _ensure_schema(self) -> None:
        if self._header() == (0, 0):
            with self._write("create the schema") as cur:
                if self._header() == (0, 0):    # still new now that we hold the write lock
                    if cur.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
                        raise StorageError("%s is an SQLite database not made by dpsense" % self.path)
                    for statement in self._schema:
                        cur.execute(statement)
                    cur.execute("PRAGMA application_id = %d" % _APPLICATION_IDS[self._kind])
                    cur.execute("PRAGMA user_version = %d" % SCHEMA_VERSION)
        found_id, version = self._header()
        if found_id != _APPLICATION_IDS[self._kind]:
            kinds = {v: k for k, v in _APPLICATION_IDS.items()}
            what = "a dpsense %s store" % kinds[found_id] if found_id in kinds else "not a dpsense store"
            raise StorageError("%s is %s, not a %s store" % (self.path, what, self._kind))
        if version in (1, 2):
            with self._write("upgrade the schema to version %d" % SCHEMA_VERSION) as cur:
                found = self._header()[1]
                if found == 1:
                    self._upgrade_from_1(cur)
                if found in (1, 2):
                    upgrade_dead_letters(cur, _DEAD_LETTERS_V3, "?")
                    cur.execute("PRAGMA user_version = %d" % SCHEMA_VERSION)
            version = self._header()[1]
        if version != SCHEMA_VERSION:
            raise StorageError("%s has schema version %d; this dpsense reads version %d"
                               % (self.path, version, SCHEMA_VERSION))

    def _header(self) -> tuple[int, int]:
        """``(application_id, user_version)`` from the database header."""
        with self._translate("read the schema version"):
            app_id = self._conn.execute("PRAGMA application_id").fetchone()[0]
            version = self._conn.execute("PRAGMA user_version").fetchone()[0]
        return app_id, version

    @contextmanager
    def _translate(self, action: str) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as err:
            raise _storage_error("cannot %s in %s: %s" % (action, self.path, err), err) from err

    @contextmanager
    def _write(self, action: str) -> Iterator[sqlite3.Cursor]:
        """A write transaction: committed (and synced) on normal exit, rolled back otherwise."""
        with self._translate(action):
            cur = self._conn.cursor()
            # IMMEDIATE takes the write lock now, so a busy database is waited for here,
            # never half-way through the batch.
            cur.execute("BEGIN IMMEDIATE")
            try:
                yield cur
                cur.execute("COMMIT")
            except BaseException:
                if self._conn.in_transaction:
                    self._conn.rollback()
                raise

    def _upgrade_from_1(self, cur: sqlite3.Cursor) -> None:
        """Schema 1 -> 2; the correction store's tables did not change."""

    def _rows(self, action: str, query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._translate(action):
            return self._conn.execute(query, params).fetchall()

    def _scalar(self, sql: str, action: str) -> int:
        with self._translate(action):
            value: int = self._conn.execute(sql).fetchone()[0]
        return value

    def _insert_dead(self, cur: sqlite3.Cursor, dead: Sequence[DeadLetter]) -> None:
        if dead:
            cur.executemany(
                "INSERT INTO dead_letters (topic, payload, reason, received_at, digest, size, sha256, last_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (digest) DO UPDATE SET"
                " repeats = dead_letters.repeats + 1, last_at = max(dead_letters.last_at, excluded.last_at)",
                [dead_letter_row(d) + (d.received_at,) for d in dead])

    def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        with self._translate("read dead letters"):
            rows = self._conn.execute(
                "SELECT topic, payload, reason, received_at, size, sha256, repeats FROM dead_letters"
                " ORDER BY last_at DESC, id DESC LIMIT ?", (check_limit("limit", limit),)).fetchall()
        return [DeadLetter(t, p, r, at, size, sha, n) for t, p, r, at, size, sha, n in rows]

    def dead_letter_messages(self) -> int:
        return int(self._rows("count dead-lettered messages", "SELECT coalesce(sum(repeats), 0) FROM dead_letters")[0][0])

    def dead_letter_reasons(self) -> list[tuple[str, int]]:
        return group_reasons(self._rows("count dead letters by reason",
                                        "SELECT reason, sum(repeats) FROM dead_letters GROUP BY reason"))

    def dead_letter_count(self) -> int:
        return self._scalar("SELECT count(*) FROM dead_letters", "count dead letters")

    def close(self) -> None:
        self._conn.close()


class SqliteAnalystStore(_SqliteDatabase, AnalystStore):
    """The analyst's readings in an SQLite file (``:memory:`` for a private in-memory store)."""

    _kind = "analyst"
    _schema = _ANALYST_SQL

    def add_batch(self, readings: list[Reading], dead: list[DeadLetter]) -> int:
        rows = [(r.device_id, r.boot_id, r.seq, r.token, r.config_id, stored_values(r), r.topic,
                 r.received_at) for r in readings]
        with self._write("store a batch of readings") as cur:
            added = 0
            for i in range(0, len(rows), _ROWS_PER_INSERT):
                chunk = rows[i:i + _ROWS_PER_INSERT]
                # One statement per chunk, not executemany: sqlite3 lets go of the GIL around every
                # step, and with paho's thread waiting for it each hand-back costs a thread switch.
                cur.execute(
                    "INSERT INTO readings (device_id, boot_id, seq, token, config_id, vals, topic,"
                    " received_at) VALUES %s ON CONFLICT (device_id, boot_id, seq) DO NOTHING"
                    % ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?)"] * len(chunk)),
                    [v for row in chunk for v in row])
                added += cur.rowcount
            conflicted = self._conflicts(cur, rows) if added < len(rows) else []
            conflicts = [reading_conflict(readings[i]) for i in conflicted]
            self._insert_dead(cur, list(dead) + conflicts)
            self.last_conflicts = len(conflicts)
            self.last_conflicted = frozenset(conflicted)
            self._count_batch(cur, len(readings) + len(dead), added, len(readings), len(dead) + len(conflicts))
        return added

    def _upgrade_from_1(self, cur: sqlite3.Cursor) -> None:
        for statement in SQLITE_V2:
            cur.execute(statement)
        self._migrate_results(cur)

    @staticmethod
    def _conflicts(cur: sqlite3.Cursor, rows: list[tuple[Any, ...]]) -> list[int]:
        """Positions of the rows whose key is stored with other content."""
        stored: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        for key in dict.fromkeys(row[:3] for row in rows):
            # One indexed lookup per key: SQLite plans a row-value IN list as a full index scan.
            stored[key] = cur.execute(
                "SELECT token, config_id, vals FROM readings WHERE device_id = ? AND boot_id = ? AND seq = ?",
                key).fetchone()
        return [i for i, row in enumerate(rows) if stored[row[:3]] != row[3:6]]

    def count(self) -> int:
        return self._scalar("SELECT count(*) FROM readings", "count readings")

    def readings_after(self, row_id: int, limit: int) -> list[tuple[int, Reading]]:
        with self._translate("read readings"):
            rows = self._conn.execute(
                "SELECT row_id, device_id, boot_id, seq, token, config_id, vals, topic, received_at"
                " FROM readings WHERE row_id > ? ORDER BY row_id LIMIT ?",
                (row_id, check_limit("limit", limit))).fetchall()
        return [(rid, Reading(device_id, boot_id, seq, token, config_id, unpack_values(vals), topic, received_at))
                for rid, device_id, boot_id, seq, token, config_id, vals, topic, received_at in rows]

    def count_after(self, row_id: int, limit: int) -> int:
        with self._translate("count readings"):
            value: int = self._conn.execute(
                "SELECT count(*) FROM (SELECT 1 FROM readings WHERE row_id > ? ORDER BY row_id LIMIT ?)",
                (row_id, check_limit("limit", limit))).fetchone()[0]
        return value

    def window(self, start_row_id: int, size: int) -> Window:
        with self._translate("read a window"):
            rows = self._conn.execute(
                "SELECT row_id, token, vals FROM readings WHERE row_id >= ? ORDER BY row_id LIMIT ?",
                (start_row_id, check_limit("size", size))).fetchall()
        return Window([r[0] for r in rows], [r[1] for r in rows], values_matrix([r[2] for r in rows]))

    def gaps(self) -> list[Gap]:
        with self._translate("account for sequence gaps"):
            rows = self._conn.execute(GAPS_SQL).fetchall()

        def wrap_end(device: int, boot: int, widest: int) -> int:
            with self._translate("account for sequence gaps"):
                found: int = self._conn.execute(WRAP_END_SQL.replace("%s", "?"), (device, boot, widest)).fetchone()[0]
            return found
        return [boot_gap(d, b, lo, hi, n, w, partial(wrap_end, d, b, w))
                for d, b, lo, hi, n, w in rows]

    def get_meta(self, key: str) -> str | None:
        with self._translate("read meta %r" % key):
            row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        with self._write("write meta %r" % key) as cur:
            cur.execute("INSERT INTO meta (key, value) VALUES (?, ?)"
                        " ON CONFLICT (key) DO UPDATE SET value = excluded.value", (key, value))

    def save_window_result(self, window_id: int, payload: dict[str, Any]) -> None:
        text = json.dumps(payload, allow_nan=False)
        with self._write("save the result of window %d" % window_id) as cur:
            cur.execute("INSERT INTO results (window_id, payload) VALUES (?, ?)"
                        " ON CONFLICT (window_id) DO UPDATE SET payload = excluded.payload", (window_id, text))

    def window_results(self) -> list[tuple[int, dict[str, Any]]]:
        with self._translate("read window results"):
            rows = self._conn.execute("SELECT window_id, payload FROM results ORDER BY window_id").fetchall()
        return [(window_id, json.loads(text)) for window_id, text in rows]


class SqliteCorrectionStore(_SqliteDatabase, CorrectionStore):
    """The correction server's ``(token, d_diff)`` pairs in an SQLite file."""

    _kind = "correction"
    _schema = _CORRECTION_SQL

    def add_batch(self, corrections: list[Correction], dead: list[DeadLetter]) -> int:
        rows = [(c.token, c.d_diff, c.received_at) for c in corrections]
        with self._write("store a batch of corrections") as cur:
            added = 0
            if rows:
                cur.executemany("INSERT INTO corrections (token, d_diff, received_at) VALUES (?, ?, ?)"
                                " ON CONFLICT (token) DO NOTHING", rows)
                added = cur.rowcount
            conflicted: list[int] = []
            if added < len(rows):
                stored = self._lookup(cur, [c.token for c in corrections])
                conflicted = [i for i, c in enumerate(corrections) if stored[c.token] != c.d_diff]
            conflicts = [correction_conflict(corrections[i]) for i in conflicted]
            self._insert_dead(cur, list(dead) + conflicts)
            self.last_conflicts = len(conflicts)
            self.last_conflicted = frozenset(conflicted)
        return added

    def lookup(self, tokens: list[bytes]) -> dict[bytes, int]:
        with self._translate("look up tokens"):
            return self._lookup(self._conn.cursor(), tokens)

    @staticmethod
    def _lookup(cur: sqlite3.Cursor, tokens: list[bytes]) -> dict[bytes, int]:
        unique = list(dict.fromkeys(bytes(t) for t in tokens))
        found: dict[bytes, int] = {}
        for i in range(0, len(unique), _KEYS_PER_QUERY):
            chunk = unique[i:i + _KEYS_PER_QUERY]
            cur.execute("SELECT token, d_diff FROM corrections WHERE token IN (%s)" % ", ".join("?" * len(chunk)),
                        chunk)
            found.update(cur.fetchall())
        return found

    def count(self) -> int:
        return self._scalar("SELECT count(*) FROM corrections", "count corrections")
