"""The storage contract (cloud/storage/repository.py), run against SQLite and PostgreSQL alike."""
from __future__ import annotations

import hashlib
import itertools
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from dpsense.cloud.storage import (
    CONFLICTING_DUPLICATE,
    AnalystStore,
    Correction,
    CorrectionStore,
    DeadLetter,
    Gap,
    Reading,
    StorageError,
    StorageUnavailable,
    open_analyst_store,
    open_correction_store,
    open_store,
)
from dpsense.cloud.storage.repository import DEAD_LETTER_PREFIX
from dpsense.cloud.storage.sqlite import SCHEMA_VERSION
from dpsense.protocol import wire

_DATABASE_NUMBERS = itertools.count()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def new_url(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], str]:
    """Each call returns the URL of a fresh, empty database of the backend under test."""
    if request.param == "sqlite":
        files = itertools.count()
        return lambda: "sqlite:///%s/store%d.db" % (tmp_path, next(files))
    from tests.pgserver import create_database
    server = request.getfixturevalue("postgres_url")
    return lambda: create_database(server, "test%d" % next(_DATABASE_NUMBERS))


@pytest.fixture
def analyst(new_url: Callable[[], str]) -> Iterator[AnalystStore]:
    with open_analyst_store(new_url()) as store:
        yield store


@pytest.fixture
def cs(new_url: Callable[[], str]) -> Iterator[CorrectionStore]:
    with open_correction_store(new_url()) as store:
        yield store


def token_of(*key: object) -> bytes:
    return hashlib.sha256(repr(key).encode()).digest()[:8]


def reading(device: int, boot: int, seq: int, values: tuple[int, ...] = (1200, -5), *,
            token: bytes | None = None, at: float = 1000.0) -> Reading:
    return Reading(device, boot, seq, token or token_of(device, boot, seq), 3, values,
                   "dpsense/r/d%d" % device, at)


# -- analyst: idempotence and conflicts ---------------------------------------------------------

def test_redelivered_batch_is_stored_once(analyst: AnalystStore) -> None:
    batch = [reading(7, 1, 0), reading(7, 1, 1), reading(8, 1, 0)]
    assert analyst.add_batch(batch, []) == 3
    assert analyst.add_batch(batch, []) == 0
    assert analyst.add_batch(batch[1:] + [reading(7, 1, 2)], []) == 1
    assert analyst.count() == 4
    assert analyst.dead_letter_count() == 0


def test_duplicate_inside_one_batch_is_stored_once(analyst: AnalystStore) -> None:
    assert analyst.add_batch([reading(7, 1, 0), reading(7, 1, 0, at=2000.0)], []) == 1
    assert [r.received_at for _, r in analyst.readings_after(0, 10)] == [1000.0]
    assert analyst.dead_letter_count() == 0


def test_conflicting_duplicate_becomes_a_dead_letter(analyst: AnalystStore) -> None:
    original = reading(7, 1, 42)
    other_values = reading(7, 1, 42, (1200, -6), at=1001.0)
    other_token = reading(7, 1, 42, token=b"\xff" * 8, at=1002.0)
    assert analyst.add_batch([original], []) == 1
    assert analyst.add_batch([other_values, reading(7, 1, 43)], []) == 1
    assert analyst.add_batch([other_token], []) == 0

    assert [r for _, r in analyst.readings_after(0, 10)] == [original, reading(7, 1, 43)]
    letters = analyst.dead_letters(10)
    assert [d.reason for d in letters] == [CONFLICTING_DUPLICATE] * 2
    assert [d.received_at for d in letters] == [1002.0, 1001.0]    # most recent first
    assert letters[1].topic == "dpsense/r/d7"
    assert wire.decode(letters[1].payload) == (wire.KIND_READING, (7, 1, 42, token_of(7, 1, 42), 3, (1200, -6)))
    assert letters[0].payload == wire.encode_reading(7, 1, 42, b"\xff" * 8, 3, [1200, -5])

    # the same conflicting message delivered again is not a second dead letter
    assert analyst.add_batch([other_values], []) == 0
    assert analyst.dead_letter_count() == 2


def test_a_batch_longer_than_one_insert_statement_is_counted_and_kept_in_order(analyst: AnalystStore) -> None:
    # 2500 rows: SQLite writes them in three multi-row INSERTs (cloud/storage/sqlite.py); 500 of
    # them (every fifth) were stored before, and one repeats inside the batch at the very end.
    before = [reading(9, 1, s) for s in range(0, 2500, 5)]
    assert analyst.add_batch(before, []) == 500
    batch = [reading(9, 1, s, at=2000.0 + s) for s in range(2500)] + [reading(9, 1, 1234, at=9999.0)]
    assert analyst.add_batch(batch, []) == 2000
    assert analyst.count() == 2500 and analyst.dead_letter_count() == 0
    rows = [r for _, r in analyst.readings_after(0, 5000)]
    assert [r.seq for r in rows[500:]] == [s for s in range(2500) if s % 5]     # arrival order
    assert {r.received_at for r in rows if r.seq == 1234} == {2000.0 + 1234}


def test_conflict_inside_one_batch_keeps_the_first(analyst: AnalystStore) -> None:
    first, second = reading(7, 1, 0, (1, 1)), reading(7, 1, 0, (2, 2))
    assert analyst.add_batch([first, second], []) == 1
    assert [r.values for _, r in analyst.readings_after(0, 10)] == [(1, 1)]
    (letter,) = analyst.dead_letters()
    assert wire.decode_reading(letter.payload)[5] == (2, 2)


def test_batch_is_one_transaction(analyst: AnalystStore) -> None:
    broken = DeadLetter("t", b"", "payload missing", 0.0)
    object.__setattr__(broken, "payload", None)      # fails only when the batch stores it
    with pytest.raises(TypeError):
        analyst.add_batch([reading(7, 1, 0), reading(7, 1, 1)], [broken])
    assert analyst.count() == 0
    assert analyst.add_batch([reading(7, 1, 0), reading(7, 1, 1)], []) == 2


def test_values_outside_int32_are_refused(analyst: AnalystStore) -> None:
    with pytest.raises(ValueError, match="int32"):
        analyst.add_batch([reading(7, 1, 0, (2**31,))], [])
    assert analyst.count() == 0


# -- dead letters ---------------------------------------------------------------------------------

def test_dead_letters_keep_raw_payload_topic_and_reason(analyst: AnalystStore, cs: CorrectionStore) -> None:
    letters = [
        DeadLetter("dpsense/r/d7", b"", "malformed: short message: 0 bytes", 1.0),
        DeadLetter("dpsense/r/d7", bytes(range(256)), "malformed: unsupported version 0", 2.0),
        DeadLetter("weird/t\u00f6pic", b"\x00\xff\x00", "not a device readings topic", 3.0),
    ]
    for store in (analyst, cs):
        assert store.add_batch([], letters) == 0
        assert store.dead_letters() == letters[::-1]
        assert store.dead_letters(limit=1) == [letters[2]]
        store.add_batch([], letters)                                   # redelivered: stored once
        store.add_batch([], [DeadLetter("dpsense/r/d7", b"", "another reason", 4.0)])
        assert store.dead_letter_count() == 4


def test_a_dead_letter_keeps_a_prefix_its_size_and_hash_and_counts_repeats(analyst: AnalystStore,
                                                                          cs: CorrectionStore) -> None:
    big = bytes(range(256)) * 4096                          # 1 MiB
    bad = DeadLetter("dpsense/readings/d7", b"\x07" * 30, "malformed: unsupported version 7", 1.0)
    for store in (analyst, cs):
        store.add_batch([], [DeadLetter("dpsense/readings/d7", big, "malformed: too long", 0.5)])
        for i in range(5):                                  # five identical bad payloads: one row, 5 repeats
            store.add_batch([], [DeadLetter(bad.topic, bad.payload, bad.reason, 1.0 + i)])
        store.add_batch([], [bad, bad])                     # twice in one batch counts twice
        first, second = store.dead_letters()
        assert (first.payload, first.size, first.repeats, first.received_at) == (bad.payload, 30, 7, 1.0)
        assert (second.payload, second.size, second.sha256) == (big[:DEAD_LETTER_PREFIX], len(big),
                                                                hashlib.sha256(big).digest())
        assert DEAD_LETTER_PREFIX == 256 and second.repeats == 1 and store.dead_letter_count() == 2


def test_the_ingest_counters_count_a_conflicting_duplicate_as_a_dead_letter(analyst: AnalystStore) -> None:
    analyst.add_batch([reading(7, 1, s) for s in range(4)], [])
    bad = DeadLetter("dpsense/r/d7", b"\x01", "malformed: short message: 1 bytes", 2.0)
    assert analyst.add_batch([reading(7, 1, 0), reading(7, 1, 1), reading(7, 1, 2, (1, 1)), reading(7, 1, 9)],
                             [bad, bad]) == 1
    assert analyst.last_conflicts == 1
    c = analyst.counters()
    assert (c["ingest_received"], c["ingest_stored"], c["ingest_duplicates"], c["ingest_dead_letters"]) == \
        (10, 5, 2, 3)
    assert analyst.dead_letter_messages() == 3 and analyst.dead_letter_count() == 2


# -- analyst: reading back ---------------------------------------------------------------------

def test_gaps_account_per_device_and_boot(analyst: AnalystStore) -> None:
    analyst.add_batch([reading(1, 1, s) for s in (0, 1, 2)] + [reading(2, 1, 3)], [])
    analyst.add_batch([reading(1, 1, s) for s in (5, 7, 2)] + [reading(1, 2, 10), reading(2, 1, 4)], [])
    assert analyst.gaps() == [
        Gap(1, 1, first_seq=0, last_seq=7, received=5, missing=3),     # 3, 4 and 6 never arrived
        Gap(1, 2, first_seq=10, last_seq=10, received=1, missing=0),
        Gap(2, 1, first_seq=3, last_seq=4, received=2, missing=0),
    ]


def test_a_sequence_that_wraps_within_a_boot_is_not_a_gap(analyst: AnalystStore) -> None:
    top = 2**32 - 1
    analyst.add_batch([reading(1, 1, s) for s in (top - 2, top - 1, top, 0, 1)], [])  # wraps, nothing lost
    analyst.add_batch([reading(1, 2, s) for s in (top - 1, 0, 3)], [])                # top, 1 and 2 lost
    analyst.add_batch([reading(2, 1, s) for s in (0, 2**31, top)], [])  # shortest cover runs through the wrap
    analyst.add_batch([reading(3, 1, s) for s in (5, 6, 9)], [])                       # no wrap, 7 and 8 lost
    assert analyst.gaps() == [
        Gap(1, 1, first_seq=top - 2, last_seq=1, received=5, missing=0),
        Gap(1, 2, first_seq=top - 1, last_seq=3, received=3, missing=3),
        Gap(2, 1, first_seq=2**31, last_seq=0, received=3, missing=2**31 - 2),
        Gap(3, 1, first_seq=5, last_seq=9, received=3, missing=2),
    ]


def test_windows_follow_arrival_order(analyst: AnalystStore) -> None:
    arrivals = [reading(2, 1, 5, (10, 11), at=1.0), reading(1, 1, 9, (-20, 21), at=2.0),
                reading(1, 1, 1, (30, -2**31 + 1), at=3.0), reading(3, 7, 0, (40, 2**31 - 1), at=4.0)]
    analyst.add_batch(arrivals[:2], [])
    analyst.add_batch(arrivals[2:], [])

    rows = analyst.readings_after(0, 100)
    assert [r for _, r in rows] == arrivals
    ids = [rid for rid, _ in rows]
    assert ids == sorted(ids)
    assert [r for _, r in analyst.readings_after(ids[1], 1)] == arrivals[2:3]
    assert analyst.readings_after(ids[-1], 100) == []
    # count_after counts what readings_after would return, without reading it
    assert [analyst.count_after(ids[0] - 1, k) for k in (0, 1, 3, 100)] == [0, 1, 3, 4]
    assert (analyst.count_after(ids[1], 100), analyst.count_after(ids[-1], 100)) == (2, 0)

    first = analyst.window(ids[0], 3)
    assert first.row_ids == ids[:3]
    assert first.tokens == [r.token for r in arrivals[:3]]
    assert first.values.dtype == np.int64
    np.testing.assert_array_equal(first.values, [[10, 11], [-20, 21], [30, -2**31 + 1]])
    rest = analyst.window(first.row_ids[-1] + 1, 3)
    assert rest.row_ids == ids[3:]
    np.testing.assert_array_equal(rest.values, [[40, 2**31 - 1]])
    empty = analyst.window(ids[-1] + 1, 3)
    assert (empty.row_ids, empty.tokens, empty.values.shape) == ([], [], (0, 0))
    with pytest.raises(ValueError):
        analyst.window(0, -1)
    with pytest.raises(ValueError):
        analyst.readings_after(0, -1)
    with pytest.raises(ValueError):
        analyst.count_after(0, -1)


def test_window_refuses_mixed_column_counts(analyst: AnalystStore) -> None:
    analyst.add_batch([reading(1, 1, 0, (1, 2)), reading(1, 1, 1, (1, 2, 3))], [])
    with pytest.raises(ValueError, match="2 and 3 values"):
        analyst.window(0, 10)


def test_meta_is_a_key_value_table(analyst: AnalystStore) -> None:
    assert analyst.get_meta("next_window_row") is None
    analyst.set_meta("next_window_row", "1")
    analyst.set_meta("next_window_row", "501")
    analyst.set_meta("window_size", "500")
    assert analyst.get_meta("next_window_row") == "501"
    assert analyst.get_meta("window_size") == "500"


def test_window_results_are_json_by_window_id(analyst: AnalystStore) -> None:
    analyst.save_window_result(2, {"candidates": [b.hex() for b in (b"\x01" * 8,)], "threshold": 2.5})
    analyst.save_window_result(1, {"candidates": [], "note": "first"})
    analyst.save_window_result(1, {"candidates": [], "note": "rerun"})
    assert analyst.window_results() == [
        (1, {"candidates": [], "note": "rerun"}),
        (2, {"candidates": ["0101010101010101"], "threshold": 2.5}),
    ]
    with pytest.raises(ValueError):
        analyst.save_window_result(3, {"threshold": float("nan")})


def test_everything_survives_reopening(new_url: Callable[[], str]) -> None:
    analyst_url, cs_url = new_url(), new_url()
    batch = [reading(7, 1, s, (s, -s)) for s in range(5)]
    letter = DeadLetter("dpsense/r/d7", b"\x01\x09", "malformed: unsupported kind", 5.0)
    with open_analyst_store(analyst_url) as store:
        store.add_batch(batch, [letter])
        store.set_meta("next_window_row", "3")
        store.save_window_result(0, {"candidates": [1]})
    with open_correction_store(cs_url) as store:
        store.add_batch([Correction(b"\x01" * 8, -1234, 6.0)], [letter])

    with open_analyst_store(analyst_url) as store:
        assert store.add_batch(batch, []) == 0
        assert [r for _, r in store.readings_after(0, 10)] == batch
        assert store.dead_letters() == [letter]
        assert store.get_meta("next_window_row") == "3"
        assert store.window_results() == [(0, {"candidates": [1]})]
    with open_store(cs_url, "correction") as store:
        assert store.lookup([b"\x01" * 8]) == {b"\x01" * 8: -1234}
        assert store.dead_letters() == [letter]


def test_a_database_holds_one_kind_of_store(new_url: Callable[[], str]) -> None:
    url = new_url()
    open_analyst_store(url).close()
    with pytest.raises(StorageError, match="analyst store, not a correction store"):
        open_correction_store(url)


def test_closed_store_raises_storage_error(new_url: Callable[[], str]) -> None:
    store = open_analyst_store(new_url())
    store.close()
    store.close()
    with pytest.raises(StorageError):
        store.count()


# -- correction server ---------------------------------------------------------------------------

def test_corrections_are_stored_once_per_token(cs: CorrectionStore) -> None:
    batch = [Correction(token_of(i), -i, 1.0) for i in range(4)]
    assert cs.add_batch(batch, []) == 4
    assert cs.add_batch(batch + [batch[0]], []) == 0
    assert cs.count() == 4
    assert cs.lookup([token_of(3), token_of(0), b"\x00" * 8, token_of(3)]) == {token_of(3): -3, token_of(0): 0}
    assert cs.lookup([]) == {}
    assert cs.dead_letter_count() == 0


def test_conflicting_correction_becomes_a_dead_letter(cs: CorrectionStore) -> None:
    token = b"\x01\x23\x45\x67\x89\xab\xcd\xef"
    cs.add_batch([Correction(token, 7, 1.0)], [])
    assert cs.add_batch([Correction(token, -1234, 2.0)], []) == 0
    assert cs.lookup([token]) == {token: 7}
    (letter,) = cs.dead_letters()
    assert (letter.reason, letter.received_at) == (CONFLICTING_DUPLICATE, 2.0)
    # Read back from the store the correction has no header: device, boot and seq are 0.
    assert letter.payload == bytes([2, 2, 0, 0] + [0] * 12) + token + (-1234).to_bytes(4, "little", signed=True)
    cs.add_batch([Correction(token, -1234, 3.0)], [])
    assert cs.dead_letter_count() == 1


def test_an_oversize_status_dead_letter_keeps_the_whole_size_and_sha256(analyst: AnalystStore) -> None:
    """The status classifier cut the payload to 2048 bytes before the store saw it: size and
    SHA-256 then described the cut (docs/protocol.md section 10 says the whole payload's)."""
    from dpsense.cloud.analyst.devices import MAX_STATUS_BYTES, classify_status
    payload = b'{"event":"boot","pad":"' + b"x" * 5000 + b'"}'
    letter = classify_status("dpsense/status/d7", payload, 1.0)
    assert isinstance(letter, DeadLetter) and letter.reason == "status message over %d bytes" % MAX_STATUS_BYTES
    analyst.add_batch([], [letter])
    (back,) = analyst.dead_letters()
    assert (back.size, back.sha256) == (len(payload), hashlib.sha256(payload).digest())
    assert back.payload == payload[:DEAD_LETTER_PREFIX]


def _columns(url: str) -> dict[str, set[str]]:
    """``table -> column names`` of the database at ``url``."""
    if url.startswith("sqlite:///"):
        conn = sqlite3.connect(url[len("sqlite:///"):])
        try:
            tables = [t for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            return {t: {row[1] for row in conn.execute("PRAGMA table_info(%s)" % t)} for t in tables}
        finally:
            conn.close()
    import psycopg
    with psycopg.connect(url) as pg:
        rows = pg.execute("SELECT table_name, column_name FROM information_schema.columns"
                            " WHERE table_schema = current_schema()").fetchall()
    columns: dict[str, set[str]] = {}
    for table, column in rows:
        columns.setdefault(table, set()).add(column)
    return columns


def test_correction_store_has_no_device_column(new_url: Callable[[], str]) -> None:
    url = new_url()
    with open_correction_store(url) as store:
        store.add_batch([Correction(b"\x02" * 8, 5, 1.0)], [])
    columns = _columns(url)
    assert columns["corrections"] == {"row_id", "token", "d_diff", "received_at"}
    assert "readings" not in columns
    names = {c for cols in columns.values() for c in cols}
    assert not {c for c in names if "device" in c or "boot" in c or c in ("seq", "vals", "config_id")}


# -- PostgreSQL specifics ---------------------------------------------------------------------------

@pytest.mark.postgres
def test_postgres_store_reconnects_after_losing_its_connection(postgres_url: str) -> None:
    import psycopg

    from tests.pgserver import create_database
    url = create_database(postgres_url, "reconnect%d" % next(_DATABASE_NUMBERS))
    with open_analyst_store(url) as store:
        store.add_batch([reading(7, 1, 0)], [])
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                          " WHERE application_name = 'dpsense-analyst' AND datname = current_database()")
        with pytest.raises(StorageUnavailable):                 # the ingest retries this kind
            store.add_batch([reading(7, 1, 1)], [])
        assert store.add_batch([reading(7, 1, 1)], []) == 1    # the retry runs on a new connection
        assert store.count() == 2


def test_missing_postgres_names_the_debian_package(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests import pgserver
    monkeypatch.setattr(pgserver, "SEARCH_GLOB", "/nonexistent/*/bin")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(pgserver.PostgresNotFound, match="Debian package `postgresql`"):
        with pgserver.temporary_postgres():
            pass


# -- SQLite specifics -------------------------------------------------------------------------------

def test_sqlite_file_settings(tmp_path: Path) -> None:
    path = "%s/a.db" % tmp_path
    open_analyst_store(path).close()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        conn.close()
    store = open_analyst_store("sqlite:///" + path)
    try:
        assert store._conn.execute("PRAGMA synchronous").fetchone() == (2,)    # type: ignore[attr-defined]
    finally:
        store.close()


def test_sqlite_refuses_foreign_databases(tmp_path: Path) -> None:
    path = "%s/other.db" % tmp_path
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (x)")
    conn.close()
    with pytest.raises(StorageError, match="not made by dpsense"):
        open_analyst_store(path)


def test_sqlite_store_belongs_to_its_thread(tmp_path: Path) -> None:
    errors: list[BaseException] = []
    with open_analyst_store("%s/a.db" % tmp_path) as store:
        thread = threading.Thread(target=lambda: _record_error(errors, store.count))
        thread.start()
        thread.join()
        assert store.count() == 0
    assert len(errors) == 1 and isinstance(errors[0], StorageError)


def _record_error(errors: list[BaseException], call: Callable[[], object]) -> None:
    try:
        call()
    except BaseException as err:
        errors.append(err)


def test_in_memory_sqlite() -> None:
    with open_analyst_store("sqlite://") as store:
        assert store.add_batch([reading(1, 1, 0)], []) == 1


@pytest.mark.parametrize("url", ["mysql://h/db", "sqlite://host/file.db", "sqlite:///", ""])
def test_bad_urls_are_refused(url: str) -> None:
    with pytest.raises(ValueError):
        open_analyst_store(url)


_WRITER = r"""
import sys, time
from dpsense.cloud.storage import Reading, open_analyst_store
url, size = sys.argv[1], int(sys.argv[2])
store = open_analyst_store(url)
seq = 0
while True:
    store.add_batch([Reading(1, 1, s, s.to_bytes(8, "little"), 1, (s, -s, 7), "dpsense/r/d1", time.time())
                     for s in range(seq, seq + size)], [])
    seq += size
    print(seq, flush=True)
"""


@pytest.mark.parametrize("kill_after, delay", [(1, 0.0), (17, 0.0031), (60, 0.0117)])
def test_sqlite_loses_no_reported_commit_on_sigkill(tmp_path: Path, kill_after: int, delay: float) -> None:
    """A writer killed with SIGKILL mid-stream keeps every batch it reported as committed."""
    url, size = "sqlite:///%s/killed.db" % tmp_path, 100
    with subprocess.Popen([sys.executable, "-c", _WRITER, url, str(size)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        try:
            reported = 0
            for _ in range(kill_after):
                line = proc.stdout.readline()
                assert line, "writer died: %s" % proc.stderr.read()
                reported = int(line)
            time.sleep(delay)    # land at different points of a batch
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
        reported = max([reported] + [int(line) for line in proc.stdout.read().split()])
    assert proc.returncode == -signal.SIGKILL

    with open_analyst_store(url) as store:
        n = store.count()
        assert reported <= n <= reported + size    # at most one batch committed but not reported
        assert n % size == 0                       # whole batches only
        assert store.gaps() == [Gap(1, 1, 0, n - 1, n, 0)]
        rows = store.readings_after(0, n + 1)
        assert [r.seq for _, r in rows] == list(range(n))
        assert all(r.values == (r.seq, -r.seq, 7) for _, r in rows)
    conn = sqlite3.connect(url[len("sqlite:///"):])
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        conn.close()
