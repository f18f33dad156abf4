"""The dashboard without a browser: its data source over a real SQLite store, its HTTP server, its CLI."""
from __future__ import annotations

import hashlib
import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from fractions import Fraction
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from dpsense.cloud import cli

from dpsense.cloud.ops import results
from dpsense.cloud.ops.dashboard.data import RATE_WINDOW_S, StoreSource
from dpsense.cloud.ops.dashboard.server import DashboardServer, is_loopback
from dpsense.cloud.storage import DeadLetter, DeviceStatus, Reading, StorageError, Verdict, open_analyst_store
from dpsense.cloud.storage.records import WindowOutcome

NOW = 1_700_000_000.0


def _reading(device: int, boot: int, seq: int, values: tuple[int, ...], at: float) -> Reading:
    token = hashlib.sha256(repr((device, boot, seq)).encode()).digest()[:8]
    return Reading(device, boot, seq, token, 1, values, "dpsense/readings/d%d" % device, at)


def _verdict(w: int, group: str, row: int, device: int, seq: int, at: float, kind: str) -> Verdict:
    """``kind``: "kept" (presumed, a candidate), "removed" (presumed, a false positive), "added"."""
    return Verdict(w, group, row, device, 1 if device > 1 else 7, seq, at, kind != "added", kind == "removed",
                   kind == "added", kind != "removed")


@pytest.fixture
def url(tmp_path: Path) -> str:
    """Three devices in two groups, one gap, one duplicate, one dead letter, two done windows and a held one.

    Device 3 is in group hall-a, devices 1 and 2 in the default group. Rows 1..12 arrive in
    order: device 1 (boot 7) seq 0..3 at NOW-200 in rows 1..4, device 2 seq 0,1,3 (2 missing) at
    NOW-10 in rows 5..7, device 3 seq 0..4 at NOW-10..NOW-6 in rows 8..12; then device 1's seq 0
    again (a duplicate) and a dead letter. Window 0 (default) is rows 1..7: row 2 presumed and
    kept, row 3 presumed and removed, row 5 added. Window 1 (hall-a) is rows 8..12 with rows
    10..12 presumed and kept, 4 correction records missing. Window 2 (hall-a) is rows 13..14
    (device 3 seq 5, 6), held after a failed round. Device 1 sent a status message.
    """
    u = "sqlite:///%s" % (tmp_path / "analyst.db")
    with open_analyst_store(u) as s:
        s.set_device_group(3, "hall-a", NOW - 300)
        s.add_batch([_reading(1, 7, q, (100 * q, -q), NOW - 200) for q in range(4)], [])
        s.add_batch([_reading(2, 1, q, (5, 50 + q), NOW - 10) for q in (0, 1, 3)]
                    + [_reading(3, 1, q, (7000 + q, 9), NOW - 10 + q) for q in range(5)], [])
        s.add_batch([_reading(1, 7, 0, (0, 0), NOW - 5)], [DeadLetter("dpsense/readings/d2", b"\x00", "truncated",
                                                                      NOW - 5)])
        w0 = s.close_window("default", "count", upto_row=12, closed_at=NOW - 9)
        w1 = s.close_window("hall-a", "count", upto_row=12, closed_at=NOW - 5)
        assert w0 is not None and w1 is not None and (w0.id, w0.n, w1.id, w1.n) == (0, 7, 1, 5)
        s.complete_window(0, WindowOutcome(2, 1, 1, 2, 0, 0.01, 0.2, NOW - 8), [
            _verdict(0, "default", 2, 1, 1, NOW - 200, "kept"), _verdict(0, "default", 3, 1, 2, NOW - 200, "removed"),
            _verdict(0, "default", 5, 2, 0, NOW - 10, "added")], {})
        s.complete_window(1, WindowOutcome(3, 0, 0, 3, 4, 0.01, 3.0, NOW - 2), [
            _verdict(1, "hall-a", 8 + q, 3, q, NOW - 10 + q, "kept") for q in (2, 3, 4)], {})
        s.add_batch([_reading(3, 1, q, (7000 + q, 9), NOW - 4) for q in (5, 6)], [])
        w2 = s.close_window("hall-a", "count", upto_row=14, closed_at=NOW - 3)
        assert w2 is not None and w2.id == 2
        s.start_attempt(2, 3)
        s.hold_window(2, "no answer from the correction server", NOW - 1, "window 2 held: no answer")
        s.add_statuses([DeviceStatus(1, 7, NOW - 250, {"event": "boot", "board": "esp32", "entropy": "urandom",
                                                        "eps_record": "1/2", "eps_record_worst": "3/4",
                                                        "window": 0, "spent": "5/2", "cap": "10"},
                                     "dpsense/status/d1")], [])
    return u


class Clock:
    def __init__(self) -> None:
        self.t = NOW

    def __call__(self) -> float:
        return self.t


def _source(url: str, clock: Clock | None = None) -> StoreSource:
    return StoreSource(lambda: open_analyst_store(url), min_interval=0, cost_share=None, clock=clock or (lambda: NOW))


def test_summary_is_the_stores_counters(url: str) -> None:
    s = _source(url).summary()
    with open_analyst_store(url) as store:
        m = results.metrics(store)
        assert s.stored == store.count() == 14
        assert s.dead_letters == store.dead_letter_count() == 1
        assert s.gaps == sum(g.missing for g in store.gaps()) == 1
    # 14 readings + 1 duplicate + 1 dead letter.
    assert (s.ingested, s.duplicates) == (m.ingested, m.duplicates) == (16, 1)
    assert (s.windows_closed, s.windows_held, s.rounds_completed, s.rounds_failed) == (3, 1, 2, 1)
    assert s.round_seconds_total == pytest.approx(3.2)
    assert s.last_round_s == 3.0                # window 1, the latest done
    assert s.candidates == m.candidates == 5
    assert s.rate is None                       # one refresh: no rate yet


def test_rate_is_the_growth_of_stored_readings(url: str) -> None:
    clock = Clock()
    src = _source(url, clock)
    assert src.summary().rate is None
    with open_analyst_store(url) as s:
        s.add_batch([_reading(4, 1, q, (1, 1), NOW + 1) for q in range(10)], [])
    clock.t += 5
    assert src.summary().rate == 2.0            # 14 -> 24 readings in 5 s
    with open_analyst_store(url) as s:
        s.add_batch([_reading(4, 1, q, (1, 1), NOW + 30) for q in range(10, 16)], [])
    clock.t = NOW + 35
    assert src.summary().rate == 16 / 35
    # The base is the latest refresh at least RATE_WINDOW_S ago: the one at NOW + 5 (24 readings).
    clock.t = NOW + 5 + RATE_WINDOW_S + 5
    assert src.summary().rate == 6 / (RATE_WINDOW_S + 5)


def test_reads_closer_than_min_interval_share_one_answer(url: str) -> None:
    opened = []

    def opener() -> Any:
        opened.append(1)
        return open_analyst_store(url)
    src = StoreSource(opener, min_interval=3600)
    assert src.summary() is src.summary()
    assert src.devices() is src.devices()
    assert len(opened) == 2


def test_a_slow_read_is_repeated_only_after_its_cost_share(url: str) -> None:
    """A read that took t seconds is reused for t / cost_share seconds, whatever min_interval says."""
    def slow() -> Any:
        time.sleep(0.2)
        return open_analyst_store(url)
    src = StoreSource(slow, min_interval=0, cost_share=0.1)
    first = src.summary()
    assert src.summary() is first               # within 10 x 0.2 s
    with pytest.raises(ValueError):
        StoreSource(slow, cost_share=0)


def test_devices_show_readings_candidates_and_the_ledger(url: str) -> None:
    rows = _source(url).devices()
    assert [(d.device_id, d.group, d.readings, d.candidates, d.last_seen) for d in rows] == [
        (1, "default", 4, 1, NOW - 200), (2, "default", 3, 1, NOW - 10), (3, "hall-a", 7, 3, NOW - 4)]
    d1, d2, _ = rows
    assert (d1.eps_window, d1.cap, d1.eps_record_worst, d1.entropy) == (Fraction(5, 2), 10, Fraction(3, 4), "urandom")
    assert d1.eps_total == 4 * Fraction(1, 2)
    assert (d2.eps_window, d2.eps_total, d2.cap, d2.entropy) == (None, None, None, None)   # no status yet
    with open_analyst_store(url) as store:
        assert rows == results.devices(store)


def test_windows_are_listed_latest_first_with_their_state(url: str) -> None:
    src = _source(url)
    w2, w1, w0 = src.windows(10)
    assert (w2.id, w2.group, w2.seq, w2.state, w2.candidates, w2.last_error) == (
        2, "hall-a", 1, "held", None, "no answer from the correction server")
    assert (w1.id, w1.group, w1.seq, w1.n, w1.candidates, w1.missing, w1.round_s) == (1, "hall-a", 0, 5, 3, 4, 3.0)
    assert (w0.group, w0.presumed, w0.removed_fp, w0.added_fn, w0.candidates) == ("default", 2, 1, 1, 2)
    assert [w.id for w in src.windows(1)] == [2]
    assert src.windows(0) == []
    with pytest.raises(ValueError):
        src.windows(-1)


def test_events_tell_of_the_held_window(url: str) -> None:
    (e,) = _source(url).events(5)
    assert (e.kind, e.group, e.window, e.text) == ("held", "hall-a", 2, "window 2 held: no answer")


def test_candidates_are_split_by_verdict(url: str) -> None:
    c = _source(url).candidates(0)
    assert c is not None
    assert (c.window, c.group, c.group_window, c.readings, c.columns, c.candidates) == (0, "default", 0, 7, 2, 2)
    assert [(p.index, p.device, p.seq, p.values) for p in c.presumed] == [(1, 1, 1, (100, -1))]
    assert [(p.index, p.device, p.seq, p.values) for p in c.added] == [(4, 2, 0, (5, 50))]
    assert [(p.index, p.device, p.seq) for p in c.removed] == [(2, 1, 2)]
    assert [p.index for p in c.others] == [0, 3, 5, 6]
    with open_analyst_store(url) as store:
        assert c.candidates == len(results.candidates(store, window=0))


def test_candidates_are_per_window_and_group(url: str) -> None:
    src = _source(url)
    c = src.candidates(1, group="hall-a")
    assert c is not None and [p.seq for p in c.presumed] == [2, 3, 4] and c.group_window == 0
    assert src.candidates(1, group="default") is None
    assert src.candidates(2) is None            # held: no verdicts yet
    assert src.candidates(7) is None


def test_a_store_that_cannot_be_opened_raises(tmp_path: Path) -> None:
    def broken() -> Any:
        raise StorageError("gone")
    with pytest.raises(StorageError, match="gone"):
        StoreSource(broken).summary()


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
    assert _json(served, "/api/summary")["summary"]["stored"] == 14
    assert [(w["id"], w["state"]) for w in _json(served, "/api/windows?limit=5")["windows"]] == [
        (2, "held"), (1, "done"), (0, "done")]
    devices = _json(served, "/api/devices")["devices"]
    assert [d["readings"] for d in devices] == [4, 3, 7]
    assert (devices[0]["eps_window"], devices[0]["eps_total"], devices[0]["cap"]) == (2.5, 2.0, 10.0)
    assert devices[1]["eps_window"] is None
    assert [e["window"] for e in _json(served, "/api/events?limit=3")["events"]] == [2]
    c = _json(served, "/api/candidates?window=1&group=hall-a")
    assert c["candidates"] == 3 and [p["seq"] for p in c["presumed"]] == [2, 3, 4] and c["group"] == "hall-a"


@pytest.mark.parametrize("path, status", [
    ("/api/candidates", 400), ("/api/candidates?window=x", 400), ("/api/candidates?window=-1", 400),
    ("/api/candidates?window=9", 404), ("/api/candidates?window=2", 404), ("/api/candidates?window=1&group=x", 404),
    ("/api/windows?limit=100000", 400), ("/api/windows?limit=1;2", 400), ("/api/events?limit=1000", 400),
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


def test_metrics_are_the_store_counters(served: DashboardServer, url: str) -> None:
    status, headers, body = _request(served, "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    value = {s.name: s.value for f in families.values() for s in f.samples}
    with open_analyst_store(url) as store:
        m = results.metrics(store)
    for name, want in [("dpsense_readings_ingested", m.ingested), ("dpsense_readings_stored", m.stored),
                       ("dpsense_readings_duplicates", m.duplicates), ("dpsense_dead_letters", m.dead_letters),
                       ("dpsense_windows_closed", m.windows_closed), ("dpsense_rounds_failed", m.rounds_failed),
                       ("dpsense_readings_carried", m.readings_carried), ("dpsense_candidates", m.candidates)]:
        assert families[name].type == "counter" and value[name + "_total"] == want, name
    assert families["dpsense_sequence_numbers_missing"].type == "gauge"
    assert value["dpsense_sequence_numbers_missing"] == m.gaps == 1
    assert value["dpsense_windows_held"] == m.windows_held == 1
    assert (value["dpsense_readings_ingested_total"], value["dpsense_rounds_failed_total"]) == (16, 1)
    # The round latency: a summary of the completed rounds (count and sum, as the store keeps them).
    assert families["dpsense_round_latency_seconds"].type == "summary"
    assert value["dpsense_round_latency_seconds_count"] == m.rounds_completed == 2
    assert value["dpsense_round_latency_seconds_sum"] == pytest.approx(m.round_seconds_total) == 3.2


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




def test_metrics_carry_device_group_and_reason_labels(served: DashboardServer, url: str) -> None:
    """What an operator alerts on: per device (readings, last seen, epsilon), per group (pending
    readings and their age, windows awaiting a verdict), dead letters per reason class."""
    body = _request(served, "/metrics")[2].decode()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(body) for s in f.samples}

    def get(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted(labels.items())))]

    assert get("dpsense_device_readings_total", device="d1", group="default") == 4
    assert get("dpsense_device_readings_total", device="d3", group="hall-a") == 7
    assert get("dpsense_device_last_seen_timestamp_seconds", device="d3", group="hall-a") == NOW - 4
    assert get("dpsense_device_epsilon_spent", device="d1", group="default") == 2.0     # 4 x 1/2
    assert get("dpsense_device_epsilon_window_cap", device="d1", group="default") == 10
    assert ("dpsense_device_epsilon_window_cap", (("device", "d2"), ("group", "default"))) not in samples
    assert get("dpsense_group_windows_waiting", group="hall-a") == 1
    assert get("dpsense_group_oldest_waiting_window_timestamp_seconds", group="hall-a") == NOW - 3
    assert get("dpsense_group_windows_waiting", group="default") == 0
    assert get("dpsense_group_readings_pending", group="default") == 0
    assert ("dpsense_group_oldest_pending_timestamp_seconds", (("group", "default"),)) not in samples
    assert get("dpsense_dead_letters_by_reason_total", reason="truncated") == 1


def test_reason_kinds_drop_the_particulars() -> None:
    from dpsense.cloud.storage.repository import group_reasons
    assert group_reasons([("no key for device 12 (tools/flash.py provision gives it one)", 2),
                          ("no key for device 3 (tools/flash.py provision gives it one)", 1),
                          ("kind 9 message on the corrections topic", 1)]) == [
        ("no key for device N", 3), ("kind N message on the corrections topic", 1)]


def test_every_metric_the_alert_rules_name_is_exported(served: DashboardServer) -> None:
    import re
    rules = (Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "dpsense-alerts.yml").read_text()
    named = set(re.findall(r"\bdpsense_[a-z_]+", rules))
    body = _request(served, "/metrics")[2].decode()
    families = list(text_string_to_metric_families(body))
    exported = {f.name for f in families} | {s.name for f in families for s in f.samples}
    assert len(named) >= 6 and named <= exported, named - exported


def test_aggregates_are_null_without_a_profile_and_parameters_are_checked(served: DashboardServer,
                                                                         tmp_path: Path) -> None:
    assert json.loads(_request(served, "/api/aggregates?column=0")[2])["aggregates"] is None
    for bad in ("column=x", "window=0", "window=700&span=600", "span=99999999999"):
        assert _request(served, "/api/aggregates?" + bad)[0] == 400, bad
        assert _request(served, "/api/histogram?group=default&" + bad)[0] == 400, bad
    assert _request(served, "/api/histogram?column=0")[0] == 400            # no group
    assert json.loads(_request(served, "/api/histogram?group=default")[2])["histogram"] is None


def test_aggregates_per_group_from_the_profile(url: str, tmp_path: Path) -> None:
    """With a profile (two columns, quantum 1), each group's windows of the fixture: device 1's
    readings 200 s ago and devices 2 and 3's 10 s ago fall in two 600 s windows at most."""
    from dpsense.cloud.cli.commands.dashboard import mean_bands
    from dpsense.cloud.deploy.profile import DeviceProfile, save_profile
    save_profile(tmp_path, DeviceProfile(quantum=1.0, domain=10_000.0, delta_q=(10, 10), epsilon="1",
                                         centre_q=(0, 0)))
    src = StoreSource(lambda: open_analyst_store(url), min_interval=0, cost_share=None, clock=lambda: NOW,
                      aggregator=mean_bands(tmp_path))
    a = src.aggregates(0, 600.0, 3600.0)
    assert a is not None and a.columns == 2 and sorted(a.groups) == ["default", "hall-a"]
    assert sum(b.n for b in a.groups["default"]) == 7 and sum(b.n for b in a.groups["hall-a"]) == 7
    assert all(b.lo <= b.value <= b.hi for bs in a.groups.values() for b in bs)
    assert "spends no privacy budget" in a.note
    with pytest.raises(ValueError, match="column must be in 0..1"):
        src.aggregates(2, 600.0, 3600.0)
    from dpsense.cloud.cli.commands.dashboard import latest_histogram
    src = StoreSource(lambda: open_analyst_store(url), min_interval=0, cost_share=None, clock=lambda: NOW,
                      histogrammer=latest_histogram(tmp_path))
    h = src.histogram("hall-a", 0, 600.0, 3600.0)
    assert h is not None and h.group == "hall-a" and len(h.labels) == len(h.released) == len(h.value) == 12
    assert sum(h.released) == h.n == 7 and "spends no privacy budget" in h.note
    assert src.histogram("nobody", 0, 600.0, 3600.0) is None
