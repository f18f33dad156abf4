"""The dashboard without a browser: its data source over a real SQLite store, its HTTP server, its CLI."""
from __future__ import annotations

import hashlib
import http.client
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from dpsense.cloud import cli
from dpsense.cloud.dashboard.data import LATENCY_BUCKETS_S, RATE_WINDOW_S, StoreSource
from dpsense.cloud.dashboard.server import DashboardServer, is_loopback
from dpsense.cloud.storage import DeadLetter, Reading, StorageError, open_analyst_store

NOW = 1_700_000_000.0


def _reading(device: int, boot: int, seq: int, values: tuple[int, ...], at: float) -> Reading:
    token = hashlib.sha256(repr((device, boot, seq)).encode()).digest()[:8]
    return Reading(device, boot, seq, token, 1, values, "dpsense/readings/d%d" % device, at)


@pytest.fixture
def url(tmp_path: Path) -> str:
    """A store with 3 devices, one gap, one dead letter and two closed windows.

    Rows 1..12 arrive in order: device 1 seq 0..3 at NOW-200 (before the rate's minute) in
    rows 1..4, device 2 seq 0,1,3 (2 missing) at NOW-10 in rows 5..7, device 3 seq 0..4 at
    NOW-10..NOW-6 in rows 8..12. Window 0 is rows 1..6, window 1 rows 7..12.
    """
    u = "sqlite:///%s" % (tmp_path / "analyst.db")
    with open_analyst_store(u) as s:
        s.add_batch([_reading(1, 7, q, (100 * q, -q), NOW - 200) for q in range(4)], [])
        s.add_batch([_reading(2, 1, q, (5, 50 + q), NOW - 10) for q in (0, 1, 3)]
                    + [_reading(3, 1, q, (7000 + q, 9), NOW - 10 + q) for q in range(5)],
                    [DeadLetter("dpsense/readings/d2", b"\x00", "truncated", NOW - 5)])
        # Window 0: rows 2 and 3 presumed, 3 removed as a false positive, 5 added.
        s.save_window_result(0, {"window": 0, "first_row": 1, "last_row": 6, "n": 6, "presumed": 2, "fp": 1,
                                 "fn": 1, "candidates": 2, "missing_corrections": 0, "split_accepted": True,
                                 "presumed_rows": [2, 3], "candidate_rows": [2, 5], "round_s": 0.2})
        # Window 1: rows 10..12 (device 3, seq 2..4) presumed and kept; corrections missing.
        s.save_window_result(1, {"window": 1, "first_row": 7, "last_row": 12, "n": 6, "presumed": 3, "fp": 0,
                                 "fn": 0, "candidates": 3, "missing_corrections": 4, "split_accepted": False,
                                 "presumed_rows": [10, 11, 12], "candidate_rows": [10, 11, 12], "round_s": 3.0})
    return u


def _source(url: str) -> StoreSource:
    return StoreSource(lambda: open_analyst_store(url), min_interval=0, clock=lambda: NOW)


def test_summary_counts_what_the_store_holds(url: str) -> None:
    s = _source(url).summary()
    with open_analyst_store(url) as store:
        gaps = store.gaps()
        assert s.stored == store.count() == 12
        assert s.dead_letters == store.dead_letter_count() == 1
        assert s.missing == sum(g.missing for g in gaps) == 1
    assert s.boots_with_gaps == 1
    assert s.rate == 8 / RATE_WINDOW_S          # device 1's readings are older than the minute
    assert s.windows_closed == 2
    assert s.latency is not None
    assert (s.latency.count, s.latency.total_s, s.latency.last_s) == (2, 3.2, 3.0)
    # 0.2 s falls in every bucket from 0.25 up, 3.0 s from 5 up.
    assert s.latency.buckets == tuple((b >= 0.25) + (b >= 5) for b in LATENCY_BUCKETS_S)
    # Today's store does not record these: unknown, not zero.
    assert (s.ingested, s.duplicates, s.rounds_failed) == (None, None, None)


def test_devices_count_readings_gaps_and_candidates(url: str) -> None:
    rows = _source(url).devices()
    assert [(d.device, d.readings, d.boots, d.missing, d.last_seen) for d in rows] == [
        (1, 4, 1, 0, NOW - 200), (2, 3, 1, 1, NOW - 10), (3, 5, 1, 0, NOW - 6)]
    # Candidates: row 2 (device 1), row 5 (device 2), rows 10..12 (device 3).
    assert [d.candidates for d in rows] == [1, 1, 3]


def test_windows_are_listed_latest_first_with_their_verdicts(url: str) -> None:
    src = _source(url)
    w1, w0 = src.windows(10)
    assert (w1.window, w1.readings, w1.candidates, w1.missing_corrections, w1.split_accepted, w1.round_s) == \
        (1, 6, 3, 4, False, 3.0)
    assert (w0.presumed, w0.false_positives, w0.false_negatives, w0.candidates) == (2, 1, 1, 2)
    assert w0.closed_at == NOW - 10             # row 6 is device 2's seq 1
    assert w1.closed_at == NOW - 6
    assert [w.window for w in src.windows(1)] == [1]
    assert src.windows(0) == []
    with pytest.raises(ValueError):
        src.windows(-1)


def test_candidates_are_split_by_verdict(url: str) -> None:
    c = _source(url).candidates(0)
    assert c is not None
    assert (c.window, c.readings, c.columns, c.candidates) == (0, 6, 2, 2)
    assert [(p.index, p.device, p.seq, p.values) for p in c.presumed] == [(1, 1, 1, (100, -1))]
    assert [(p.index, p.device, p.seq, p.values) for p in c.added] == [(4, 2, 0, (5, 50))]
    assert [(p.index, p.device, p.seq) for p in c.removed] == [(2, 1, 2)]
    assert [p.index for p in c.others] == [0, 3, 5]
    assert _source(url).candidates(7) is None
    assert _source(url).candidates(0, group="hall-a") is None


def test_new_readings_are_read_incrementally(url: str) -> None:
    src = _source(url)
    assert src.summary().stored == 12
    with open_analyst_store(url) as s:
        s.add_batch([_reading(4, 1, 0, (1, 1), NOW - 1)], [])
    assert src.summary().stored == 13
    assert [d.device for d in src.devices()] == [1, 2, 3, 4]


def test_a_result_naming_rows_the_store_lacks_is_an_error(url: str) -> None:
    with open_analyst_store(url) as s:
        s.save_window_result(2, {"window": 2, "first_row": 13, "last_row": 20, "n": 8, "presumed": 0, "fp": 0,
                                 "fn": 0, "candidates": 0, "presumed_rows": [], "candidate_rows": []})
    with pytest.raises(StorageError, match="window 2"):
        _source(url).summary()


# -- HTTP -------------------------------------------------------------------------------

@pytest.fixture
def served(url: str) -> Iterator[DashboardServer]:
    server = DashboardServer(("127.0.0.1", 0), _source(url), store_label="sqlite:///<b>&'x'.db")
    t = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    t.start()
    yield server
    server.shutdown()
    server.server_close()
    t.join(5)


def _request(server: DashboardServer, path: str, method: str = "GET",
             host: str | None = None) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=10)
    headers = {"Host": host} if host else {}
    conn.request(method, path, headers=headers)
    r = conn.getresponse()
    body = r.read()
    conn.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, body


def _json(server: DashboardServer, path: str) -> Any:
    status, _, body = _request(server, path)
    assert status == 200, body
    return json.loads(body)


def test_page_escapes_what_it_shows_and_allows_only_its_own_script(served: DashboardServer) -> None:
    status, headers, body = _request(served, "/")
    assert status == 200
    text = body.decode()
    assert "sqlite:///&lt;b&gt;&amp;&#x27;x&#x27;.db" in text
    assert "<b>" not in text
    csp = headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src 'sha256-" in csp and "unsafe-inline" not in csp
    assert headers["x-content-type-options"] == "nosniff"


def test_json_endpoints(served: DashboardServer) -> None:
    assert _json(served, "/api/summary")["summary"]["stored"] == 12
    assert [w["window"] for w in _json(served, "/api/windows?limit=5")["windows"]] == [1, 0]
    assert [d["readings"] for d in _json(served, "/api/devices")["devices"]] == [4, 3, 5]
    c = _json(served, "/api/candidates?window=1")
    assert c["candidates"] == 3 and [p["seq"] for p in c["presumed"]] == [2, 3, 4]


@pytest.mark.parametrize("path, status", [
    ("/api/candidates", 400), ("/api/candidates?window=x", 400), ("/api/candidates?window=-1", 400),
    ("/api/candidates?window=9", 404), ("/api/windows?limit=100000", 400), ("/api/windows?limit=1;2", 400),
    ("/nothing", 404), ("/api/summary?a=1&&b", 400),
])
def test_bad_requests_get_one_error(served: DashboardServer, path: str, status: int) -> None:
    got, _, body = _request(served, path)
    assert got == status
    assert json.loads(body)["error"]


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "HEAD"])
def test_only_get(served: DashboardServer, method: str) -> None:
    status, headers, _ = _request(served, "/api/summary", method)
    assert status == 405 and headers["allow"] == "GET"


def test_a_foreign_host_name_is_refused_on_loopback(served: DashboardServer) -> None:
    assert _request(served, "/api/summary", host="attacker.example:%d" % served.server_address[1])[0] == 421
    assert _request(served, "/api/summary", host="localhost:%d" % served.server_address[1])[0] == 200


def test_metrics_are_the_store_counters(served: DashboardServer) -> None:
    status, headers, body = _request(served, "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    value = {s.name: s.value for f in families.values() for s in f.samples}
    assert value["dpsense_readings_stored_total"] == 12
    assert value["dpsense_dead_letters_total"] == 1
    assert value["dpsense_sequence_numbers_missing"] == 1
    assert value["dpsense_windows_closed_total"] == 2
    assert value["dpsense_round_latency_seconds_count"] == 2
    assert value["dpsense_round_latency_seconds_sum"] == pytest.approx(3.2)
    # Known to exist, absent until the store records them.
    for name in ("dpsense_readings_ingested", "dpsense_readings_duplicates", "dpsense_rounds_failed"):
        assert families[name].type == "counter" and families[name].samples == []


def test_a_store_that_cannot_be_read_is_a_503_logged_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def broken() -> Any:
        raise StorageError("no analyst store at %s yet" % tmp_path)
    server = DashboardServer(("127.0.0.1", 0), StoreSource(broken), store_label="x")
    t = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    t.start()
    try:
        for _ in range(3):
            status, _, body = _request(server, "/api/summary")
            assert status == 503 and "no analyst store" in json.loads(body)["error"]
            assert _request(server, "/metrics")[0] == 503
            assert _request(server, "/")[0] == 200
    finally:
        server.shutdown()
        server.server_close()
    assert capsys.readouterr().err == "dashboard: cannot read the store: no analyst store at %s yet\n" % tmp_path


@pytest.mark.parametrize("host, loopback", [("127.0.0.1", True), ("127.1.2.3", True), ("::1", True),
                                            ("[::1]", True), ("localhost", True), ("0.0.0.0", False),
                                            ("192.0.2.1", False), ("::", False)])
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


# -- command line -----------------------------------------------------------------------

@pytest.mark.parametrize("extra", [["--port", "70000"], ["--port", "http"], ["--refresh", "0"],
                                   ["--refresh", "nan"], ["--analyst-db", "sqlite://"],
                                   ["--analyst-db", "mysql://db/x"], ["--analyst-db", "sqlite://relative.db"]])
def test_bad_arguments_end_with_one_line(extra: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["dashboard", "--data-dir", str(tmp_path), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dpsense dashboard: ") and err.count("\n") == 1, err


def test_a_port_in_use_ends_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert cli.main(["dashboard", "--data-dir", str(tmp_path), "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dpsense dashboard: cannot listen on 127.0.0.1 port %d" % port) and err.count("\n") == 1


def test_a_non_loopback_host_is_warned_about(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 192.0.2.1 (TEST-NET-1) is on no interface here: the warning comes first, then binding fails.
    assert cli.main(["dashboard", "--data-dir", str(tmp_path), "--host", "192.0.2.1", "--port", "0"]) == 2
    warning, error = capsys.readouterr().err.splitlines()
    assert warning == ("dpsense dashboard: warning: listening on 192.0.2.1: the page has no authentication, "
                       "anyone who can reach this address can read it")
    assert error.startswith("dpsense dashboard: cannot listen on 192.0.2.1")


