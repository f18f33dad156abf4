"""PostgreSQL backend (psycopg 3): the same stores as ``sqlite``, for more than one machine.

    with PostgresAnalystStore("postgresql://analyst@db.example:5432/analyst") as store:
        new = store.add_batch(readings, dead_letters)    # committed when it returns

Each batch is one transaction: the rows are copied (``COPY ... FROM STDIN``, binary) into a
session-private staging table, moved into the real table with ``INSERT ... SELECT ... ON
CONFLICT DO NOTHING``, and compared with what was stored before, all on the server. Writers of
one database take a transaction-scoped advisory lock, so row ids are handed out in commit order
and ``readings_after`` never skips a row committed late by a concurrent writer.

A store object owns one connection; use it from one thread at a time (give each thread or
process its own store object). The schema is created in the connection's current schema when
the ``dpsense_schema`` table is missing; that table records which kind of store the database
holds and the schema version, and a mismatch is an error; a schema-1 database is upgraded when
opened.
"""
from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any

import psycopg
from psycopg import conninfo

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
from .stream import POSTGRES_V2

SCHEMA_VERSION = 3
_SCHEMA_LOCK = 0x6470_7365_0000_0001    # advisory lock keys: "dpse" + a number
_WRITE_LOCK = 0x6470_7365_0000_0002
_WINDOW_LOCK = 0x6470_7365_0000_0003

_DEAD_LETTERS_SQL = (
    """CREATE TABLE dead_letters (
        id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        topic       text NOT NULL,
        payload     bytea NOT NULL,
        reason      text NOT NULL,
        received_at double precision NOT NULL,          -- first arrival
        digest      bytea NOT NULL UNIQUE,              -- dead_letter_digest: (topic, reason, payload)
        size        bigint NOT NULL DEFAULT 0,          -- the whole payload's bytes; payload is a prefix
        sha256      bytea NOT NULL DEFAULT '\\x',       -- the whole payload's SHA-256
        repeats     bigint NOT NULL DEFAULT 1,
        last_at     double precision NOT NULL DEFAULT 0
    )""",
)
# Schema 2 -> 3: dead letters keep a prefix, the size and SHA-256, and count repeats.
_DEAD_LETTERS_V3 = (
    "ALTER TABLE dead_letters ADD COLUMN size bigint NOT NULL DEFAULT 0,"
    " ADD COLUMN sha256 bytea NOT NULL DEFAULT '\\x', ADD COLUMN repeats bigint NOT NULL DEFAULT 1,"
    " ADD COLUMN last_at double precision NOT NULL DEFAULT 0",
)

_ANALYST_SQL = (
    """CREATE TABLE readings (
        row_id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        device_id   bigint NOT NULL,
        boot_id     bigint NOT NULL,
        seq         bigint NOT NULL,
        token       bytea NOT NULL,
        config_id   integer NOT NULL,
        vals        bytea NOT NULL,           -- the values, little-endian int32 as on the wire
        topic       text NOT NULL,
        received_at double precision NOT NULL,
        UNIQUE (device_id, boot_id, seq)
    )""",
    "CREATE TABLE meta (key text PRIMARY KEY, value text NOT NULL)",
    "CREATE TABLE results (window_id bigint PRIMARY KEY, payload jsonb NOT NULL)",
) + _DEAD_LETTERS_SQL + POSTGRES_V2

_CORRECTION_SQL = (
    """CREATE TABLE corrections (
        row_id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        token       bytea NOT NULL UNIQUE,
        d_diff      integer NOT NULL,
        received_at double precision NOT NULL
    )""",
) + _DEAD_LETTERS_SQL

_READING_COLUMNS = "device_id, boot_id, seq, token, config_id, vals, topic, received_at"
_READING_STAGING = """CREATE TEMPORARY TABLE IF NOT EXISTS reading_batch (
    ord integer, device_id bigint, boot_id bigint, seq bigint, token bytea, config_id integer,
    vals bytea, topic text, received_at double precision) ON COMMIT DELETE ROWS"""
_READING_TYPES = ["int4", "int8", "int8", "int8", "bytea", "int4", "bytea", "text", "float8"]

_CORRECTION_STAGING = """CREATE TEMPORARY TABLE IF NOT EXISTS correction_batch (
    ord integer, token bytea, d_diff integer, received_at double precision) ON COMMIT DELETE ROWS"""
_CORRECTION_TYPES = ["int4", "bytea", "int4", "float8"]


def _describe(url: str) -> str:
    """``user@host:port/dbname`` from a connection string, without the password."""
    try:
        info = conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "(unparsable connection string)"
    return "%s@%s:%s/%s" % (info.get("user", ""), info.get("host", ""), info.get("port", ""),
                            info.get("dbname", ""))


class _PostgresDatabase:
    """One connection to one store database, with the schema and transactions all stores share."""

    _kind: str
    _schema: tuple[str, ...]
    _staging: str

    def __init__(self, url: str) -> None:
        self._url = url
        self.where = _describe(url)
        self._conn = self._connect()
        try:
            self._ensure_schema()
        except BaseException:
            self._conn.close()
            raise

    def _connect(self) -> psycopg.Connection[Any]:
        try:
            # autocommit: every transaction is an explicit ``with conn.transaction()`` block.
            conn = psycopg.connect(self._url, autocommit=True, application_name="dpsense-%s" % self._kind)
            conn.execute(self._staging)
        except psycopg.OperationalError as err:
            raise StorageUnavailable("cannot connect to PostgreSQL %s: %s" % (self.where, err)) from err
        except psycopg.Error as err:
            raise StorageError("cannot connect to PostgreSQL %s: %s" % (self.where, err)) from err
        return conn

    def _live(self) -> psycopg.Connection[Any]:
        """The connection, replaced by a new one if the server dropped the old one.

        The call that meets a lost connection fails with ``StorageError``; the next call, say
        the ingest service's retry of the same batch, runs on a new connection.
        """
        if self._conn.broken:
            self._conn = self._connect()
        return self._conn

    def _ensure_schema(self) -> None:
        with self._write("create the schema") as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            cur.execute("SELECT to_regclass('dpsense_schema') IS NOT NULL")
            if cur.fetchone() == (False,):
                cur.execute("CREATE TABLE dpsense_schema (kind text NOT NULL, version integer NOT NULL)")
                for statement in self._schema:
                    cur.execute(statement)
                cur.execute("INSERT INTO dpsense_schema (kind, version) VALUES (%s, %s)",
                            (self._kind, SCHEMA_VERSION))
                return
            cur.execute("SELECT kind, version FROM dpsense_schema")
            rows = cur.fetchall()
            if rows in ([(self._kind, 1)], [(self._kind, 2)]):
                if rows[0][1] == 1:
                    self._upgrade_from_1(cur)
                upgrade_dead_letters(cur, _DEAD_LETTERS_V3, "%s")
                cur.execute("UPDATE dpsense_schema SET version = %s", (SCHEMA_VERSION,))
                rows = [(self._kind, SCHEMA_VERSION)]
        if len(rows) != 1:
            raise StorageError("%s: dpsense_schema must hold one row, found %d" % (self.where, len(rows)))
        kind, version = rows[0]
        if kind != self._kind:
            raise StorageError("%s is a dpsense %s store, not a %s store" % (self.where, kind, self._kind))
        if version != SCHEMA_VERSION:
            raise StorageError("%s has schema version %d; this dpsense reads version %d"
                               % (self.where, version, SCHEMA_VERSION))

    @contextmanager
    def _translate(self, action: str) -> Iterator[None]:
        try:
            yield
        except psycopg.OperationalError as err:
            # A lost connection, a server shutting down, a serialization failure or deadlock:
            # the same call may succeed on the next try (on a new connection, see _live).
            raise StorageUnavailable("cannot %s in PostgreSQL %s: %s" % (action, self.where, err)) from err
        except psycopg.Error as err:
            raise StorageError("cannot %s in PostgreSQL %s: %s" % (action, self.where, err)) from err

    @contextmanager
    def _write(self, action: str) -> Iterator[psycopg.Cursor[Any]]:
        """A write transaction: committed on normal exit, rolled back otherwise."""
        conn = self._live()
        with self._translate(action), conn.transaction(), conn.cursor() as cur:
            yield cur

    def _upgrade_from_1(self, cur: psycopg.Cursor[Any]) -> None:
        """Schema 1 -> 2; the correction store's tables did not change."""

    def _rows(self, action: str, query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        conn = self._live()
        with self._translate(action), conn.cursor() as cur:
            cur.execute(query, params)
            return cur.fetchall()

    def _scalar(self, action: str, query: str) -> int:
        value: int = self._rows(action, query)[0][0]
        return value

    @staticmethod
    def _insert_dead(cur: psycopg.Cursor[Any], dead: Sequence[DeadLetter]) -> None:
        if dead:
            cur.executemany(
                "INSERT INTO dead_letters (topic, payload, reason, received_at, digest, size, sha256, last_at)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (digest) DO UPDATE SET"
                " repeats = dead_letters.repeats + 1, last_at = greatest(dead_letters.last_at, excluded.last_at)",
                [dead_letter_row(d) + (d.received_at,) for d in dead])

    def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        rows = self._rows("read dead letters",
                          "SELECT topic, payload, reason, received_at, size, sha256, repeats FROM dead_letters"
                          " ORDER BY last_at DESC, id DESC LIMIT %s", (check_limit("limit", limit),))
        return [DeadLetter(t, bytes(p), r, at, size, bytes(sha), n) for t, p, r, at, size, sha, n in rows]

    def dead_letter_messages(self) -> int:
        return int(self._rows("count dead-lettered messages", "SELECT coalesce(sum(repeats), 0) FROM dead_letters")[0][0])

    def dead_letter_reasons(self) -> list[tuple[str, int]]:
        return group_reasons(self._rows("count dead letters by reason",
                                        "SELECT reason, sum(repeats) FROM dead_letters GROUP BY reason"))

    def dead_letter_count(self) -> int:
        return self._scalar("count dead letters", "SELECT count(*) FROM dead_letters")

    def close(self) -> None:
        self._conn.close()


class PostgresAnalystStore(_PostgresDatabase, AnalystStore):
    """The analyst's readings in a PostgreSQL database."""

    _kind = "analyst"
    _schema = _ANALYST_SQL
    _staging = _READING_STAGING
    _PARAM = "%s"
    _JSON_PARAM = "?::jsonb"
    # The analyst whose partition claims guard window changes (cloud/storage/claims.py); None:
    # this store has one analyst.
    claimant: str | None = None

    def _guard(self, cur: psycopg.Cursor[Any], group: str | None, window: int | None, scoring: bool = False) -> None:
        # A new window's id is max(id) + 1: analysts closing windows at once take turns.
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (_WINDOW_LOCK,))
        if self.claimant is not None:
            from .claims import check_claim
            check_claim(cur, self.claimant, group, window, scoring)

    def _upgrade_from_1(self, cur: psycopg.Cursor[Any]) -> None:
        for statement in POSTGRES_V2:
            cur.execute(statement)
        self._migrate_results(cur)

    def add_batch(self, readings: list[Reading], dead: list[DeadLetter]) -> int:
        rows = [(i, r.device_id, r.boot_id, r.seq, bytes(r.token), r.config_id, stored_values(r), r.topic,
                 r.received_at) for i, r in enumerate(readings)]
        with self._write("store a batch of readings") as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (_WRITE_LOCK,))
            added = 0
            conflicts: list[DeadLetter] = []
            conflicted: list[int] = []
            if rows:
                with cur.copy("COPY reading_batch (ord, %s) FROM STDIN (FORMAT BINARY)" % _READING_COLUMNS) as copy:
                    copy.set_types(_READING_TYPES)
                    for row in rows:
                        copy.write_row(row)
                cur.execute("INSERT INTO readings (%s) SELECT %s FROM reading_batch ORDER BY ord"
                            " ON CONFLICT (device_id, boot_id, seq) DO NOTHING" % (_READING_COLUMNS, _READING_COLUMNS))
                added = cur.rowcount
            if added < len(rows):
                # Planned afresh each time: a cached plan made while the table was small would
                # keep scanning the whole table once it is large.
                cur.execute("SELECT b.ord FROM reading_batch b JOIN readings r USING (device_id, boot_id, seq)"
                            " WHERE (r.token, r.config_id, r.vals) IS DISTINCT FROM (b.token, b.config_id, b.vals)"
                            " ORDER BY b.ord", prepare=False)
                conflicted = [ord_ for (ord_,) in cur.fetchall()]
                conflicts = [reading_conflict(readings[ord_]) for ord_ in conflicted]
            self._insert_dead(cur, list(dead) + conflicts)
            self.last_conflicts = len(conflicts)
            self.last_conflicted = frozenset(conflicted)
            self._count_batch(cur, len(readings) + len(dead), added, len(readings), len(dead) + len(conflicts))
        return added

    def count(self) -> int:
        return self._scalar("count readings", "SELECT count(*) FROM readings")

    def readings_after(self, row_id: int, limit: int) -> list[tuple[int, Reading]]:
        rows = self._rows("read readings",
                          "SELECT row_id, %s FROM readings WHERE row_id > %%s ORDER BY row_id LIMIT %%s"
                          % _READING_COLUMNS, (row_id, check_limit("limit", limit)))
        return [(rid, Reading(device_id, boot_id, seq, token, config_id, unpack_values(vals), topic, received_at))
                for rid, device_id, boot_id, seq, token, config_id, vals, topic, received_at in rows]

    def count_after(self, row_id: int, limit: int) -> int:
        value: int = self._rows("count readings",
                                "SELECT count(*) FROM (SELECT 1 FROM readings WHERE row_id > %s"
                                " ORDER BY row_id LIMIT %s) AS r", (row_id, check_limit("limit", limit)))[0][0]
        return value

    def window(self, start_row_id: int, size: int) -> Window:
        rows = self._rows("read a window",
                          "SELECT row_id, token, vals FROM readings WHERE row_id >= %s ORDER BY row_id LIMIT %s",
                          (start_row_id, check_limit("size", size)))
        return Window([r[0] for r in rows], [r[1] for r in rows], values_matrix([r[2] for r in rows]))

    def gaps(self) -> list[Gap]:
        rows = self._rows("account for sequence gaps", GAPS_SQL)

        def wrap_end(device: int, boot: int, widest: int) -> int:
            found: int = self._rows("account for sequence gaps", WRAP_END_SQL, (device, boot, widest))[0][0]
            return found
        return [boot_gap(d, b, lo, hi, n, w, partial(wrap_end, d, b, w))
                for d, b, lo, hi, n, w in rows]

    def get_meta(self, key: str) -> str | None:
        rows = self._rows("read meta %r" % key, "SELECT value FROM meta WHERE key = %s", (key,))
        return str(rows[0][0]) if rows else None

    def set_meta(self, key: str, value: str) -> None:
        with self._write("write meta %r" % key) as cur:
            cur.execute("INSERT INTO meta (key, value) VALUES (%s, %s)"
                        " ON CONFLICT (key) DO UPDATE SET value = excluded.value", (key, value))

    def save_window_result(self, window_id: int, payload: dict[str, Any]) -> None:
        text = json.dumps(payload, allow_nan=False)
        with self._write("save the result of window %d" % window_id) as cur:
            cur.execute("INSERT INTO results (window_id, payload) VALUES (%s, %s::jsonb)"
                        " ON CONFLICT (window_id) DO UPDATE SET payload = excluded.payload", (window_id, text))

    def window_results(self) -> list[tuple[int, dict[str, Any]]]:
        rows = self._rows("read window results", "SELECT window_id, payload::text FROM results ORDER BY window_id")
        return [(window_id, json.loads(text)) for window_id, text in rows]


class PostgresCorrectionStore(_PostgresDatabase, CorrectionStore):
    """The correction server's ``(token, d_diff)`` pairs in a PostgreSQL database."""

    _kind = "correction"
    _schema = _CORRECTION_SQL
    _staging = _CORRECTION_STAGING
    _PARAM = "%s"

    def add_batch(self, corrections: list[Correction], dead: list[DeadLetter]) -> int:
        rows = [(i, bytes(c.token), c.d_diff, c.received_at) for i, c in enumerate(corrections)]
        with self._write("store a batch of corrections") as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (_WRITE_LOCK,))
            added = 0
            conflicts: list[DeadLetter] = []
            conflicted: list[int] = []
            if rows:
                with cur.copy("COPY correction_batch (ord, token, d_diff, received_at) FROM STDIN (FORMAT BINARY)") \
                        as copy:
                    copy.set_types(_CORRECTION_TYPES)
                    for row in rows:
                        copy.write_row(row)
                cur.execute("INSERT INTO corrections (token, d_diff, received_at)"
                            " SELECT token, d_diff, received_at FROM correction_batch ORDER BY ord"
                            " ON CONFLICT (token) DO NOTHING")
                added = cur.rowcount
            if added < len(rows):
                cur.execute("SELECT b.ord FROM correction_batch b JOIN corrections c USING (token)"
                            " WHERE c.d_diff <> b.d_diff ORDER BY b.ord", prepare=False)
                conflicted = [ord_ for (ord_,) in cur.fetchall()]
                conflicts = [correction_conflict(corrections[ord_]) for ord_ in conflicted]
            self._insert_dead(cur, list(dead) + conflicts)
            self.last_conflicts = len(conflicts)
            self.last_conflicted = frozenset(conflicted)
        return added

    def lookup(self, tokens: list[bytes]) -> dict[bytes, int]:
        rows = self._rows("look up tokens", "SELECT token, d_diff FROM corrections WHERE token = ANY(%s)",
                          ([bytes(t) for t in tokens],))
        return {token: d_diff for token, d_diff in rows}

    def count(self) -> int:
        return self._scalar("count corrections", "SELECT count(*) FROM corrections")
