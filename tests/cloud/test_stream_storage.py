"""The analyst store's stream tables (cloud/storage/stream.py) on SQLite and PostgreSQL alike."""
from __future__ import annotations

import hashlib
import itertools
import json
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from dpsense.cloud.storage import (
    AnalystStore,
    Correction,
    DeviceStatus,
    Reading,
    StorageError,
    Verdict,
    open_analyst_store,
    open_correction_store,
)
from dpsense.cloud.storage.records import WindowOutcome

_NUMBERS = itertools.count()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def new_url(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], str]:
    if request.param == "sqlite":
        files = itertools.count()
        return lambda: "sqlite:///%s/stream%d.db" % (tmp_path, next(files))
    from tests.pgserver import create_database
    server = request.getfixturevalue("postgres_url")
    return lambda: create_database(server, "stream%d" % next(_NUMBERS))


@pytest.fixture
def analyst(new_url: Callable[[], str]) -> Iterator[AnalystStore]:
    with open_analyst_store(new_url()) as store:
        yield store


def token_of(*key: object) -> bytes:
    return hashlib.sha256(repr(key).encode()).digest()[:8]


def reading(device: int, seq: int, at: float, boot: int = 1) -> Reading:
    return Reading(device, boot, seq, token_of(device, boot, seq), 1, (seq, -seq), "dpsense/readings/d%d" % device, at)


def test_time_windows_take_each_pending_reading_once_per_group(analyst: AnalystStore) -> None:
    analyst.set_device_group(2, "hall-a", 1.0)
    analyst.add_batch([reading(d, s, 100.0 + s) for s in range(10) for d in (1, 2, 3)], [])
    top = analyst.max_row_id()
    assert {g: p.count for g, p in analyst.pending_by_group(0, top).items()} == {"default": 20, "hall-a": 10}
    assert analyst.pending_in_group("hall-a", top, 105.0).count == 5
    w = analyst.close_window("default", "time", upto_row=top, closed_at=105.0, before=105.0, start=100.0, end=105.0)
    assert w is not None and (w.id, w.group, w.seq, w.n, w.state) == (0, "default", 0, 10, "closed")
    m = analyst.window_members(w.id)
    assert sorted(set(m.device_ids.tolist())) == [1, 3] and m.values.shape == (10, 2)
    assert (m.received_at < 105.0).all() and m.tokens[0] == token_of(1, 1, 0)
    assert analyst.close_window("default", "time", upto_row=top, closed_at=105.0, before=105.0) is None
    w2 = analyst.close_window("hall-a", "count", upto_row=top, closed_at=106.0, limit=4)
    assert w2 is not None and (w2.id, w2.seq, w2.n, w2.start, w2.end) == (1, 0, 4, 100.0, 103.0)
    assert analyst.first_pending_at("hall-a", top, 0.0) == 104.0
    assert {g: p.count for g, p in analyst.pending_by_group(0, top).items()} == {"default": 10, "hall-a": 6}
    assert analyst.window_counts() == {"closed": 2, "held": 0, "done": 0, "carried": 0}
    assert analyst.counters()["windows_closed"] == 2


def test_a_window_is_done_only_with_its_outcome_in_one_transaction(analyst: AnalystStore) -> None:
    analyst.add_batch([reading(1, s, 200.0 + s) for s in range(6)], [])
    w = analyst.close_window("default", "count", upto_row=analyst.max_row_id(), closed_at=210.0, limit=6)
    assert w is not None
    analyst.start_attempt(w.id, 41)
    analyst.hold_window(w.id, "no answer", 211.0, "window 0 held: no answer")
    v = Verdict(w.id, "default", 1, 1, 1, 0, 200.0, True, False, False, True)
    outcome = WindowOutcome(1, 0, 0, 1, 0, 0.01, 0.02, 212.0)
    with pytest.raises(StorageError):         # the same reading twice: the whole outcome is refused
        analyst.complete_window(w.id, outcome, [v, v], {"candidates": 1})
    (held,) = analyst.windows()
    assert (held.state, held.attempts, held.round_id, held.last_error) == ("held", 1, 41, "no answer")
    assert analyst.window_results() == [] and analyst.verdicts() == []
    analyst.complete_window(w.id, outcome, [v], {"candidates": 1}, note="late")
    (done,) = analyst.windows()
    assert (done.state, done.candidates, done.round_s, done.last_error) == ("done", 1, 0.02, None)
    assert analyst.window_results() == [(w.id, {"candidates": 1})]
    assert analyst.verdicts() == [v] and analyst.candidate_counts() == {1: 1}
    assert [e.kind for e in analyst.events()] == ["completed", "held"]
    c = analyst.counters()
    assert (c["rounds_failed"], c["rounds_completed"], c["round_seconds_total"]) == (1, 1, 0.02)


def test_verdict_filters(analyst: AnalystStore) -> None:
    analyst.add_batch([reading(1, s, 300.0 + s) for s in range(4)], [])
    w = analyst.close_window("default", "count", upto_row=4, closed_at=305.0, limit=4)
    assert w is not None
    vs = [Verdict(w.id, "default", 1, 1, 1, 0, 300.0, True, True, False, False),
          Verdict(w.id, "default", 3, 1, 1, 2, 302.0, False, False, True, True)]
    analyst.complete_window(w.id, WindowOutcome(1, 1, 1, 1, 0, 0.0, 0.0, 306.0), vs, {})
    assert analyst.verdicts() == vs[1:]
    assert analyst.verdicts(candidates_only=False) == vs
    assert analyst.verdicts(since=301.0, candidates_only=False) == vs[1:]
    assert analyst.verdicts(window=w.id + 1) == [] and analyst.verdicts(group="hall-a") == []
    assert [v.verdict for v in vs] == ["removed_fp", "added_fn"]


def test_status_messages_keep_known_fields_latest_per_boot(analyst: AnalystStore) -> None:
    s1 = DeviceStatus(7, 1, 10.0, {"event": "boot", "eps_record": "1/5", "cap": "1", "secret": 42}, "dpsense/status/d7")
    s2 = DeviceStatus(7, 1, 20.0, {"event": "window_cap", "spent": "1", "cap": "1"}, "dpsense/status/d7")
    s3 = DeviceStatus(7, 2, 30.0, {"event": "boot", "eps_record": "2/5"}, "dpsense/status/d7")
    assert analyst.add_statuses([s1, s2], []) == 2
    assert analyst.add_statuses([s1, s3], []) == 1          # s1 again: ignored
    got = analyst.latest_statuses()
    assert [(s.device_id, s.boot_id, s.received_at, s.fields.get("event")) for s in got] == \
        [(7, 1, 20.0, "window_cap"), (7, 2, 30.0, "boot")]
    assert all("secret" not in s.fields for s in got)


def test_ingest_counters_are_kept_in_the_batch_transaction(analyst: AnalystStore) -> None:
    from dpsense.cloud.storage import DeadLetter
    batch = [reading(1, s, 1.0) for s in range(3)]
    analyst.add_batch(batch, [DeadLetter("t", b"x", "malformed", 1.0)])
    analyst.add_batch(batch[:2], [])
    c = analyst.counters()
    assert (c["ingest_received"], c["ingest_stored"], c["ingest_duplicates"]) == (6, 3, 2)


def test_token_lists_of_both_stores(new_url: Callable[[], str]) -> None:
    with open_analyst_store(new_url()) as a, open_correction_store(new_url()) as c:
        a.add_batch([reading(1, s, 1.0) for s in range(5)], [])
        c.add_batch([Correction(token_of(1, 1, s), s, 1.0) for s in (3, 4, 5)], [])
        ta, tc = a.token_array(), c.token_array()
    assert ta.dtype == np.uint64 and len(ta) == 5 and len(tc) == 3
    assert len(np.setdiff1d(ta, tc)) == 3 and len(np.setdiff1d(tc, ta)) == 1     # seqs 0-2, and 5


# The dead_letters table of schemas 1 and 2: whole payloads, one row per (topic, reason, payload).
_OLD_DEAD_LETTERS = """CREATE TABLE dead_letters (
    id %s PRIMARY KEY, topic text NOT NULL, payload %s NOT NULL, reason text NOT NULL,
    received_at double precision NOT NULL, digest %s NOT NULL UNIQUE)"""


def _schema_1(url: str, dead: Sequence[tuple[str, bytes, str, float, bytes]] = ()) -> None:
    """A store as dpsense wrote it before schema 2: two count windows done, readings after them
    pending, and the dead letters ``dead`` (topic, payload, reason, received_at, old digest)."""
    rows = [(d, 1, s, token_of(d, 1, s), 1, np.array([s, -s], "<i4").tobytes(), "dpsense/readings/d%d" % d,
             500.0 + s) for s in range(10) for d in (1, 2)]
    results = [(0, {"first_row": 1, "last_row": 8, "n": 8, "presumed_rows": [2, 5], "candidate_rows": [5, 7],
                    "detect_s": 0.1, "round_s": 0.2, "missing_corrections": 0}),
               (1, {"first_row": 9, "last_row": 16, "n": 8, "presumed_rows": [], "candidate_rows": []})]
    insert = "INSERT INTO readings (device_id, boot_id, seq, token, config_id, vals, topic, received_at) VALUES "
    if url.startswith("sqlite:///"):
        from dpsense.cloud.storage import sqlite as backend
        from dpsense.cloud.storage.stream import SQLITE_V2
        conn = sqlite3.connect(url[len("sqlite:///"):])
        for statement in backend._ANALYST_SQL[:-len(SQLITE_V2)]:
            conn.execute(statement)
        conn.execute("DROP TABLE dead_letters")
        conn.execute(_OLD_DEAD_LETTERS % ("INTEGER", "BLOB", "BLOB"))
        conn.executemany("INSERT INTO dead_letters (topic, payload, reason, received_at, digest)"
                         " VALUES (?, ?, ?, ?, ?)", dead)
        conn.executemany(insert + "(?, ?, ?, ?, ?, ?, ?, ?)", rows)
        conn.executemany("INSERT INTO results VALUES (?, ?)", [(i, json.dumps(p)) for i, p in results])
        conn.execute("PRAGMA application_id = %d" % backend._APPLICATION_IDS["analyst"])
        conn.execute("PRAGMA user_version = 1")
        conn.commit()
        conn.close()
        return
    import psycopg

    from dpsense.cloud.storage import postgres as pg
    from dpsense.cloud.storage.stream import POSTGRES_V2
    with psycopg.connect(url) as conn:
        conn.execute("CREATE TABLE dpsense_schema (kind text NOT NULL, version integer NOT NULL)")
        conn.execute("INSERT INTO dpsense_schema VALUES ('analyst', 1)")
        for statement in pg._ANALYST_SQL[:-len(POSTGRES_V2)]:
            conn.execute(statement)
        conn.execute("DROP TABLE dead_letters")
        conn.execute(_OLD_DEAD_LETTERS % ("bigint GENERATED ALWAYS AS IDENTITY", "bytea", "bytea"))
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO dead_letters (topic, payload, reason, received_at, digest)"
                            " VALUES (%s, %s, %s, %s, %s)", dead)
            cur.executemany(insert + "(%s, %s, %s, %s, %s, %s, %s, %s)", rows)
            cur.executemany("INSERT INTO results VALUES (%s, %s::jsonb)", [(i, json.dumps(p)) for i, p in results])


def _old_digest(topic: str, reason: str, payload: bytes) -> bytes:
    h = hashlib.sha256()
    for part in (topic.encode(), reason.encode()):
        h.update(len(part).to_bytes(4, "little"))
        h.update(part)
    h.update(payload)
    return h.digest()


def test_an_old_store_s_dead_letters_keep_a_prefix_and_count_repeats_after_the_upgrade(
        new_url: Callable[[], str]) -> None:
    from dpsense.cloud.storage import DeadLetter
    big = bytes(range(256)) * 4096                       # 1 MiB kept whole before schema 3
    url = new_url()
    _schema_1(url, [("dpsense/readings/d3", big, "malformed: x", 5.0, _old_digest("dpsense/readings/d3",
                                                                                   "malformed: x", big))])
    with open_analyst_store(url) as store:
        (d,) = store.dead_letters()
        assert (d.payload, d.size, d.sha256, d.repeats) == (big[:256], len(big), hashlib.sha256(big).digest(), 1)
        store.add_batch([], [DeadLetter("dpsense/readings/d3", big, "malformed: x", 9.0)])
        (d,) = store.dead_letters()
        assert (d.repeats, d.received_at, store.dead_letter_count()) == (2, 5.0, 1)


def test_a_schema_1_store_is_upgraded_with_its_windows(new_url: Callable[[], str]) -> None:
    url = new_url()
    _schema_1(url)
    with open_analyst_store(url) as store:
        assert store.count() == 20
        ws = store.windows()
        assert [(w.id, w.group, w.kind, w.n, w.state) for w in ws] == [(0, "default", "count", 8, "done"),
                                                                       (1, "default", "count", 8, "done")]
        assert (ws[0].presumed, ws[0].removed_fp, ws[0].added_fn, ws[0].candidates) == (2, 1, 1, 2)
        assert [(v.row_id, v.verdict) for v in store.verdicts(candidates_only=False)] == \
            [(2, "removed_fp"), (5, "candidate"), (7, "added_fn")]
        assert {g: p.count for g, p in store.pending_by_group(0, store.max_row_id()).items()} == {"default": 4}
        assert [w for _, w in store.window_results()][0]["round_s"] == 0.2
    with open_analyst_store(url) as store:      # reopened: upgraded once
        assert len(store.windows()) == 2


def test_released_rows_of_a_group_and_an_interval(analyst: AnalystStore) -> None:
    analyst.set_device_group(2, "hall-a", 1.0)
    analyst.add_batch([reading(d, s, 100.0 + s) for s in range(10) for d in (1, 2)], [])
    rows = analyst.released_rows("hall-a", 102.0, 105.0)
    assert [float(r[0]) for r in rows] == [102.0, 103.0, 104.0] and all(int(r[1]) == 1 for r in rows)
    assert [np.frombuffer(bytes(r[2]), dtype="<i4").tolist() for r in rows] == [[2, -2], [3, -3], [4, -4]]
    assert len(analyst.released_rows("default", 0.0, 1000.0)) == 10
    assert analyst.released_rows("nobody", 0.0, 1000.0) == []
