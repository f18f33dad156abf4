"""Windows as an operator gives them, the results API, `dpsense results`, `dpsense status`, status messages."""
from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timezone
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from dpsense.cloud.ops import results
from dpsense.cloud.analyst.service import AnalystParams
from dpsense.cloud.cli import main
from dpsense.cloud.analyst.devices import check_group, classify_status
from dpsense.cloud.storage import (
    AnalystStore,
    Correction,
    DeadLetter,
    DeviceStatus,
    Reading,
    Verdict,
    open_analyst_store,
    open_correction_store,
)
from dpsense.cloud.storage.records import WindowOutcome
from dpsense.cloud.analyst.windows import WindowSpec, min_window_size, parse_window


@pytest.mark.parametrize("text, spec", [
    ("30s", WindowSpec(seconds=30)), ("15m", WindowSpec(seconds=900)), ("1h", WindowSpec(seconds=3600)),
    ("2.5s", WindowSpec(seconds=2.5)), ("1d", WindowSpec(seconds=86400)), ("100000", WindowSpec(count=100000)),
    (" 5S ", WindowSpec(seconds=5)),
])
def test_window_texts(text: str, spec: WindowSpec) -> None:
    assert parse_window(text) == spec


@pytest.mark.parametrize("text", ["", "1", "0s", "0.5s", "-5s", "5x", "abc", "5 minutes", "1e3"])
def test_bad_window_texts(text: str) -> None:
    with pytest.raises(ValueError):
        parse_window(text)


def test_time_windows_are_aligned_on_the_epoch() -> None:
    spec = WindowSpec(seconds=900)
    t = datetime(2025, 11, 25, 16, 40, 5, tzinfo=timezone.utc).timestamp()
    assert datetime.fromtimestamp(spec.interval_start(t), timezone.utc).strftime("%H:%M") == "16:30"
    assert spec.interval_end(t) - spec.interval_start(t) == 900
    assert spec.interval_end(spec.interval_start(t)) == spec.interval_end(t)      # a start belongs to its window


@pytest.mark.parametrize("detector, min_samples, floor", [("dbscan", 60, 120), ("kr", 5, 12), ("beta_r", 5, 12)])
def test_minimum_window(detector: str, min_samples: int, floor: int) -> None:
    assert min_window_size(detector, min_samples) == floor
    assert AnalystParams(eps_q=1.0, min_samples=min_samples, detector=detector, window=1000).floor == floor


@pytest.mark.parametrize("kwargs", [
    {"window": 100},                                # a count window below 2 x 60
    {"window": WindowSpec(seconds=5), "min_window": 59},    # below DBSCAN's support: all outliers
    {"window": WindowSpec(seconds=5), "retry_min": 0},
])
def test_analyst_params_refuse_windows_that_cannot_be_scored(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        AnalystParams(eps_q=1.0, min_samples=60, **kwargs)


def test_since() -> None:
    assert results.parse_since("15m", now=10_000.0) == 10_000.0 - 900
    assert results.parse_since("2025-11-25T16:00") == datetime(2025, 11, 25, 16, tzinfo=timezone.utc).timestamp()
    assert results.parse_since("2025-11-25T16:00:00Z") == results.parse_since("2025-11-25T17:00:00+01:00")
    assert results.parse_since("1700000000") == 1_700_000_000.0
    assert results.iso_time(1_700_000_000.25) == "2023-11-14T22:13:20.250Z"
    for bad in ("yesterday", "inf", "15 parsecs"):
        with pytest.raises(ValueError):
            results.parse_since(bad)


@pytest.mark.parametrize("topic, payload, reason", [
    ("dpsense/status/d7", b'{"event":"boot","device":7,"boot":3}', None),
    ("dpsense/status/d7", b'{"event":"boot"}', None),
    ("dpsense/status/analyst", b'{}', "not a device status topic"),
    ("dpsense/readings/d7", b'{}', "not a device status topic"),
    ("dpsense/status/d7", b'{"device":8}', "does not match"),
    ("dpsense/status/d7", b'[1, 2]', "not a JSON object"),
    ("dpsense/status/d7", b'\xff', "not JSON"),
    ("dpsense/status/d7", b'{"x": "' + b"a" * 3000 + b'"}', "over 2048 bytes"),
])
def test_status_messages(topic: str, payload: bytes, reason: str | None) -> None:
    got = classify_status(topic, payload, 5.0)
    if reason is None:
        assert isinstance(got, DeviceStatus) and got.device_id == 7
    else:
        assert isinstance(got, DeadLetter) and reason in got.reason


@pytest.mark.parametrize("name", ["", "a/b", "+", "#", "hall a", "-x", "x" * 65])
def test_group_names_are_one_topic_level(name: str) -> None:
    with pytest.raises(ValueError):
        check_group(name)


def _reading(device: int, boot: int, seq: int, at: float) -> Reading:
    return Reading(device, boot, seq, bytes([device, boot, seq, 0, 0, 0, 0, 0]), 1, (seq, 0),
                   "dpsense/readings/d%d" % device, at)


def _filled(store: AnalystStore) -> None:
    store.set_device_group(7, "hall-a", 1.0)
    store.add_batch([_reading(7, 1, s, 100.0 + s) for s in range(3)] + [_reading(7, 2, s, 110.0 + s) for s in range(2)]
                    + [_reading(8, 1, s, 120.0 + s) for s in range(4)], [])
    store.add_statuses([
        DeviceStatus(7, 1, 99.0, {"event": "boot", "eps_record": "1/5", "eps_record_worst": "3", "cap": "1",
                                  "entropy": "os.urandom", "board": "esp32"}, "dpsense/status/d7"),
        DeviceStatus(7, 2, 109.0, {"event": "boot", "eps_record": "2/5", "cap": "1", "entropy": "os.urandom"},
                     "dpsense/status/d7"),
        DeviceStatus(7, 2, 111.5, {"event": "window_cap", "eps_record": "2/5", "window": 3, "spent": "4/5",
                                   "cap": "1"}, "dpsense/status/d7")], [])
    w = store.close_window("default", "count", upto_row=store.max_row_id(), closed_at=125.0, limit=4)
    assert w is not None
    store.complete_window(w.id, WindowOutcome(1, 0, 0, 1, 0, 0.0, 0.1, 126.0),
                          [Verdict(w.id, "default", 7, 8, 1, 1, 121.0, True, False, False, True)], {"candidates": 1})


def test_devices_show_what_each_board_spent(tmp_path: Path) -> None:
    with open_analyst_store("sqlite:///%s/a.db" % tmp_path) as store:
        _filled(store)
        rows = {d.device_id: d for d in results.devices(store)}
        m = results.metrics(store)
    d7, d8 = rows[7], rows[8]
    assert (d7.group, d7.readings, d7.boots, d7.candidates, d7.last_seen) == ("hall-a", 5, 2, 0, 111.0)
    assert d7.eps_total == 3 * Fraction(1, 5) + 2 * Fraction(2, 5)       # per boot, its own eps_record
    assert (d7.eps_record, d7.eps_window, d7.ledger_window, d7.cap) == (Fraction(2, 5), Fraction(4, 5), 3, 1)
    assert (d7.status_event, d7.status_at, d7.entropy) == ("window_cap", 111.5, None)
    assert (d8.group, d8.readings, d8.candidates, d8.eps_total, d8.eps_record) == ("default", 4, 1, None, None)
    assert (m.stored, m.ingested, m.windows_closed, m.windows_held, m.rounds_completed, m.candidates) == \
        (9, 9, 1, 0, 1, 1)
    assert m.last_round_seconds == 0.1 and m.gaps == 0


def test_devices_charge_the_round_view_to_each_reading_of_a_window_that_ran_a_round(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # After a round the analyst holds eps_record + epsilon_A of each reading of the window.
    db = "sqlite:///%s/a.db" % tmp_path
    with open_analyst_store(db) as store:
        store.add_batch([_reading(7, 1, s, 100.0 + s) for s in range(6)], [])
        store.add_statuses([DeviceStatus(7, 1, 99.0, {"event": "boot", "eps_record": "1/5", "eps_a": "1/2"},
                                         "dpsense/status/d7")], [])
        w = store.close_window("default", "count", upto_row=store.max_row_id(), closed_at=125.0, limit=4)
        assert w is not None
        store.start_attempt(w.id, 1)
        before = {d.device_id: d for d in results.devices(store)}[7]
        assert before.round_readings == w.n and before.eps_a == Fraction(1, 2)
        assert before.eps_total == 6 * Fraction(1, 5) + w.n * 1          # the correction server's default
        rows = {d.device_id: d for d in results.devices(store, epsilon_a=Fraction(2))}
        assert rows[7].eps_total == 6 * Fraction(1, 5) + w.n * 2
    code, out, _ = _run(capsys, "results", "devices", "--format", "json", "--analyst-epsilon", "1/2",
                        "--data-dir", str(tmp_path), "--analyst-db", db)
    (d,) = json.loads(out)
    assert code == 0 and d["eps_total"] == float(6 * Fraction(1, 5) + w.n * Fraction(1, 2))
    assert (d["round_readings"], d["eps_a"]) == (w.n, 0.5)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_results_command_formats(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = "sqlite:///%s/a.db" % tmp_path
    with open_analyst_store(db) as store:
        _filled(store)
    common = ["--data-dir", str(tmp_path), "--analyst-db", db]
    code, out, _ = _run(capsys, "results", "candidates", "--format", "csv", *common)
    assert code == 0
    assert list(csv.DictReader(io.StringIO(out))) == [
        {"window": "0", "group": "default", "device": "8", "boot": "1", "seq": "1",
         "received_at": "1970-01-01T00:02:01.000Z", "verdict": "candidate"}]
    code, out, _ = _run(capsys, "results", "windows", "--format", "json", *common)
    (w,) = json.loads(out)
    assert (w["window"], w["readings"], w["state"], w["candidates"]) == (0, 4, "done", 1)
    code, out, _ = _run(capsys, "results", "devices", *common)
    lines = out.splitlines()
    assert lines[0].split()[:5] == ["device", "group", "readings", "candidates", "last_seen"]
    assert lines[1].split()[:4] == ["7", "hall-a", "5", "0"] and len(lines) == 3
    code, out, err = _run(capsys, "results", "candidates", "--since", "yesterday", *common)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "--since" in err


def test_status_reports_records_without_their_pair(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    adb, cdb = "sqlite:///%s/a.db" % tmp_path, "sqlite:///%s/c.db" % tmp_path
    with open_analyst_store(adb) as a, open_correction_store(cdb) as c:
        a.add_batch([_reading(1, 1, s, 1.0) for s in range(5)], [])
        c.add_batch([Correction(bytes([1, 1, s, 0, 0, 0, 0, 0]), 0, 1.0) for s in range(3, 9)], [])
        a.add_event("carried", "group default: the window ... has 5 readings", 2.0, carried=5)
    code, out, _ = _run(capsys, "status", "--data-dir", str(tmp_path), "--analyst-db", adb, "--correction-db", cdb)
    assert code == 0
    assert "3 readings without a correction record, 4 correction records without a reading" in out
    assert "carried" in out
    assert "ack backlog 3 records kept on their boards (reading stored, correction record not): device 1: 3" in out
    assert "per window  readings without a correction record: not yet in a window: 3" in out


def test_status_shows_the_ack_backlog_per_device(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    adb, cdb = "sqlite:///%s/a.db" % tmp_path, "sqlite:///%s/c.db" % tmp_path
    with open_analyst_store(adb) as a, open_correction_store(cdb) as c:
        a.add_batch([_reading(d, 1, s, 1.0) for d in (1, 2, 3) for s in range(4)], [])
        rows = [r for _, r in a.readings_after(0, 100)]
        w = a.close_window("default", "count", upto_row=a.max_row_id() - 2, closed_at=2.0)
        assert w is not None and w.n == 10
        # device 1: all four committed on both sides; device 2: one; device 3: none
        keep = [r for r in rows if r.device_id == 1 or (r.device_id == 2 and r.seq == 0)]
        c.add_batch([Correction(r.token, 0, 1.0) for r in keep], [])
    code, out, _ = _run(capsys, "status", "--data-dir", str(tmp_path), "--analyst-db", adb, "--correction-db", cdb)
    assert code == 0
    assert "ack backlog 7 records kept on their boards (reading stored, correction record not): " \
           "device 2: 3, device 3: 4" in out
    assert "per window  readings without a correction record: window %d: 5, not yet in a window: 2" % w.id in out
    with open_correction_store(cdb) as c:
        c.add_batch([Correction(r.token, 0, 1.0) for r in rows if r not in keep], [])
    code, out, _ = _run(capsys, "status", "--data-dir", str(tmp_path), "--analyst-db", adb, "--correction-db", cdb)
    assert "ack backlog 0 records: every stored reading's correction record is stored too" in out


def test_fleet_encoder_continues_where_it_stopped() -> None:
    from dpsense.cloud.sim.calibration import calibrate
    from dpsense.cloud.sim.simulate import encode_fleet
    from dpsense.cloud.sim.simulate import FleetEncoder
    rng = np.random.default_rng(2)
    x = rng.normal(0, 3, (25, 2))
    profile = calibrate(rng.normal(0, 3, (2000, 2)), "1", 0.01)
    whole = encode_fleet(x, profile, 3, seed=5, boot_id=9)
    enc = FleetEncoder(profile, 3, seed=5, boot_id=9)
    parts = [enc.encode(x[:10]), enc.encode(x[10:])]
    assert [r for p in parts for r in p.readings] == whole.readings
    assert [c for p in parts for c in p.corrections] == whole.corrections
    assert json.loads(enc.status(2))["eps_record"] == "2"


def test_status_and_devices_count_readings_set_apart_per_device(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    adb, cdb = "sqlite:///%s/a.db" % tmp_path, "sqlite:///%s/c.db" % tmp_path
    with open_analyst_store(adb) as a:
        wide = Reading(9, 1, 0, bytes([9] * 8), 1, tuple(range(16)), "dpsense/readings/d9", 1.5)
        a.add_batch([_reading(1, 1, s, 1.0) for s in range(5)] + [wide], [])
        w = a.close_window("default", "count", upto_row=a.max_row_id(), closed_at=2.0, limit=6)
        assert w is not None
        m = a.window_members(w.id, columns=2)
        a.complete_window(w.id, WindowOutcome(0, 0, 0, 0, 0, 0.0, 0.0, 3.0), [], {"window": w.id}, None, m.odd)
    common = ["--data-dir", str(tmp_path), "--analyst-db", adb]
    code, out, _ = _run(capsys, "status", *common, "--correction-db", cdb)
    assert code == 0 and "set apart   1 readings not scored" in out and "device 9: 1" in out
    code, out, _ = _run(capsys, "results", "devices", "--format", "json", *common)
    assert {d["device"]: d["set_apart"] for d in json.loads(out)} == {1: 0, 9: 1}


def test_a_status_message_s_figures_are_read_only_as_plain_fractions() -> None:
    """A device writes its status message: an exponent would make Fraction build a huge integer
    (seconds of CPU and hundreds of MB for "1e999999999") in `results devices` and the dashboard."""
    with open_analyst_store("sqlite://") as store:
        store.add_statuses([DeviceStatus(3, 1, 1.0, {"event": "boot", "eps_record": "1e999999999",
                                                      "eps_record_worst": "0.25", "cap": "1/20",
                                                      "spent": "-1", "entropy": "os.urandom"})], [])
        (d,) = results.devices(store)
    assert (d.eps_record, d.eps_record_worst, d.cap, d.eps_window) == (None, Fraction(1, 4), Fraction(1, 20), None)
