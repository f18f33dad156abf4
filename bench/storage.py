"""Readings committed per second by the analyst store, SQLite and PostgreSQL, as a markdown table.

    python bench/storage.py                 # about 30 s: 2 s per cell
    python bench/storage.py --quick         # about 10 s: 0.5 s per cell
    python bench/storage.py --postgres postgresql://user@host/db   # an existing server

Every cell times ``add_batch`` alone (building the readings is not counted) on a fresh database,
with the durability the services run with: SQLite in WAL mode with ``synchronous=FULL`` (an
fsync per commit), PostgreSQL with its defaults (``fsync`` and ``synchronous_commit`` on). Cells:
new readings at batch sizes 1, 100 and 500; a batch of 500 delivered again (all duplicates,
the conflict check runs); and, as the baseline measured in the same run, the bare driver
writing the same rows into a table with no unique key, one transaction per 500 rows
(``executemany`` INSERT for SQLite, binary COPY for PostgreSQL). Without ``--postgres`` a
throw-away server is started (tests/pgserver.py, the test suite's); the PostgreSQL rows are left
out, with the reason, when it is not installed.
"""
from __future__ import annotations

import argparse
import itertools
import os
import platform
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

# The checkout, for tests.pgserver: this script runs from a checkout, not from the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dpsense.cloud.storage import AnalystStore, Reading, StorageError, open_analyst_store  # noqa: E402
from dpsense.cloud.storage.repository import pack_values  # noqa: E402

BATCH_SIZES = (1, 100, 500)
NCOLS = 3
DEVICES = 1000


@dataclass(frozen=True)
class Cell:
    backend: str
    case: str
    batch: int
    readings: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.readings / self.seconds


def readings(start: int = 0) -> Iterator[Reading]:
    """An endless stream of distinct readings from ``DEVICES`` devices, round robin."""
    now = time.time()
    for i in itertools.count(start):
        device, seq = i % DEVICES + 1, i // DEVICES
        yield Reading(device, 1, seq, os.urandom(8), 1, (seq, -seq, i % 4096), "dpsense/r/d%d" % device, now)


def batches(size: int, stream: Iterator[Reading]) -> Iterator[list[Reading]]:
    while True:
        yield list(itertools.islice(stream, size))


def timed(add: Callable[[list[Reading]], object], source: Iterator[list[Reading]], budget: float) -> tuple[int, float]:
    """Feed batches to ``add`` until ``budget`` seconds were spent inside it; (readings, seconds)."""
    n, spent = 0, 0.0
    while spent < budget:
        batch = next(source)
        t0 = time.perf_counter()
        add(batch)
        spent += time.perf_counter() - t0
        n += len(batch)
    return n, spent


def store_cells(backend: str, new_store: Callable[[], AnalystStore], budget: float) -> list[Cell]:
    cells = []
    for size in BATCH_SIZES:
        with new_store() as store:
            n, spent = timed(lambda b: store.add_batch(b, []), batches(size, readings()), budget)
        cells.append(Cell(backend, "new readings", size, n, spent))
    with new_store() as store:
        stored = list(itertools.islice(batches(500, readings()), 40))    # 20,000 readings
        for batch in stored:
            store.add_batch(batch, [])
        n, spent = timed(lambda b: store.add_batch(b, []), itertools.cycle(stored), budget)
    cells.append(Cell(backend, "redelivered (all duplicates)", 500, n, spent))
    return cells


def _rows(batch: list[Reading]) -> list[tuple[object, ...]]:
    return [(r.device_id, r.boot_id, r.seq, r.token, r.config_id, pack_values(r.values), r.topic, r.received_at)
            for r in batch]


_PLAIN_COLUMNS = "device_id, boot_id, seq, token, config_id, vals, topic, received_at"


def sqlite_baseline(path: str, budget: float) -> Cell:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("CREATE TABLE plain (device_id INTEGER, boot_id INTEGER, seq INTEGER, token BLOB,"
                     " config_id INTEGER, vals BLOB, topic TEXT, received_at REAL)")

        def add(batch: list[Reading]) -> None:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany("INSERT INTO plain VALUES (?, ?, ?, ?, ?, ?, ?, ?)", _rows(batch))
            conn.execute("COMMIT")

        n, spent = timed(add, batches(500, readings()), budget)
    finally:
        conn.close()
    return Cell("SQLite", "baseline: bare sqlite3 INSERT, no key", 500, n, spent)


def postgres_baseline(url: str, budget: float) -> Cell:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE plain (device_id bigint, boot_id bigint, seq bigint, token bytea,"
                     " config_id integer, vals bytea, topic text, received_at double precision)")

        def add(batch: list[Reading]) -> None:
            with conn.transaction(), conn.cursor() as cur:
                with cur.copy("COPY plain (%s) FROM STDIN (FORMAT BINARY)" % _PLAIN_COLUMNS) as copy:
                    copy.set_types(["int8", "int8", "int8", "bytea", "int4", "bytea", "text", "float8"])
                    for row in _rows(batch):
                        copy.write_row(row)

        n, spent = timed(add, batches(500, readings()), budget)
    return Cell("PostgreSQL", "baseline: bare psycopg COPY, no key", 500, n, spent)


def server_version(url: str) -> str:
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    return str(row[0]) if row else "?"


def table(cells: list[Cell]) -> str:
    lines = ["| backend | case | batch | readings | seconds | readings/s | commits/s |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for c in cells:
        lines.append("| %s | %s | %d | %d | %.2f | %s | %s |" % (
            c.backend, c.case, c.batch, c.readings, c.seconds, "{:,.0f}".format(c.rate),
            "{:,.0f}".format(c.rate / c.batch)))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="0.5 s per cell instead of 2 s")
    p.add_argument("--budget", type=float, help="seconds spent in add_batch per cell")
    p.add_argument("--postgres", metavar="URL",
                   help="an existing server whose user may CREATE DATABASE (default: a throw-away server)")
    p.add_argument("--dir", help="where to put the temporary directory of SQLite files (default: the system's)")
    args = p.parse_args(argv)
    budget = args.budget or (0.5 if args.quick else 2.0)

    cells: list[Cell] = []
    notes: list[str] = []
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="dpsense-bench-", dir=args.dir)))
        files = (str(workdir / ("bench%d.db" % i)) for i in itertools.count())
        cells += store_cells("SQLite", lambda: open_analyst_store(next(files)), budget)
        cells.append(sqlite_baseline(next(files), budget))
        notes.append("SQLite files in %s" % workdir.parent)

        server = args.postgres
        if server is None:
            from tests.pgserver import PostgresNotFound, temporary_postgres
            try:
                server = stack.enter_context(temporary_postgres())
            except PostgresNotFound as err:
                notes.append("PostgreSQL rows left out: %s" % err)
        if server is not None:
            from tests.pgserver import create_database
            tag = "%d_%d" % (os.getpid(), int(time.time()))
            databases = ("dpsense_bench_%s_%d" % (tag, i) for i in itertools.count())
            cells += store_cells("PostgreSQL", lambda: open_analyst_store(create_database(server, next(databases))),
                                 budget)
            cells.append(postgres_baseline(create_database(server, next(databases)), budget))
            notes.append("PostgreSQL %s" % server_version(server))
            if args.postgres:
                notes.append("databases dpsense_bench_%s_* were left on the server" % tag)

    print(table(cells))
    print()
    print("%s, %d CPUs, Python %s, SQLite %s, %.1f s in add_batch per cell, %d values per reading."
          % (platform.platform(), os.cpu_count() or 0, platform.python_version(), sqlite3.sqlite_version,
             budget, NCOLS))
    for note in notes:
        print(note)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except StorageError as err:
        print("bench/storage.py: %s" % err, file=sys.stderr)
        sys.exit(1)
