"""The continuous mode against a real Mosquitto: a steady fleet of 10 boards in two groups,
`dpsense analyst --window 5s`, the correction server started before w_O exists, results as CSV,
alerts, the webhook, and the correction server stopped and started again mid-stream."""
from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from dpsense.cloud.transport import topics
from dpsense.cloud.deploy.broker import Broker, free_port
from dpsense.cloud.cli import main
from dpsense.cloud.storage import AnalystStore, open_analyst_store
from tests.integration import procs
from tests.integration.procs import stop

pytestmark = pytest.mark.skipif(shutil.which("mosquitto_passwd") is None,
                                reason="Debian package 'mosquitto' is not installed")
ROOT = Path(__file__).resolve().parents[2]
WINDOW = 5.0
RATE = 100                      # readings per second across the fleet: 250 per window and group


def _wait(pred, timeout: float, step: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(step)
    return True


class Webhook:
    def __init__(self) -> None:
        self.docs: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:   # noqa: N802 - http.server's name
                outer.docs.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d/dpsense" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Stack:
    """Broker, correction server and analyst as the README runs them, in the README's order."""

    def __init__(self, tmp: Path) -> None:
        self.dir = tmp / "data"
        self.logs = tmp
        self.broker = Broker(self.dir, port=free_port())
        self.common = ["--data-dir", str(self.dir), "--broker-port", str(self.broker.port)]
        # The broker keeps no password: each service gets its own in its environment.
        self.passwords = {account: self.broker.add_account(account)
                          for account in ("analyst", "correction", "alerts")}
        for d in range(1, 11):      # two groups of five boards
            assert main(["broker", "add-device", str(d), "--group", "hall-a" if d <= 5 else "hall-b",
                         *self.common]) == 0
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.webhook = Webhook()
        self.alerts: list[tuple[str, dict]] = []

    def service(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        p = procs.service(self.logs, name, [*args, *self.common], self.passwords.get(name))
        self.procs[name] = p
        return p

    def log(self, name: str) -> str:
        path = self.logs / ("%s.log" % name)
        return path.read_text() if path.exists() else ""

    def start_correction_server(self) -> None:
        self.service("correction", "correction-server")
        assert _wait(lambda: "subscribed to dpsense/corrections" in self.log("correction"), 30), self.log("correction")

    def start(self) -> None:
        self.broker.start()
        self.start_correction_server()
        self.service("analyst", "analyst", "--window", "5s", "--dbscan-min-samples", "10", "--round-timeout", "3",
                     "--webhook", self.webhook.url)
        assert _wait(lambda: "subscribed to dpsense/readings/+" in self.log("analyst")
                     and "subscribed to dpsense/status/+" in self.log("analyst"), 30), self.log("analyst")
        watcher = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="t-alerts", protocol=mqtt.MQTTv311)
        watcher.username_pw_set("alerts", self.passwords["alerts"])
        subscribed = threading.Event()
        watcher.on_connect = lambda c, u, f, r, p: c.subscribe(topics.ALERTS_ALL, qos=1)
        watcher.on_subscribe = lambda *a: subscribed.set()
        watcher.on_message = lambda c, u, m: self.alerts.append((m.topic, json.loads(m.payload)))
        watcher.connect(self.broker.host, self.broker.port)
        watcher.loop_start()
        self.watcher = watcher
        assert subscribed.wait(10)

    def simulate(self, seconds: float) -> subprocess.Popen[bytes]:
        return self.service("simulate", "simulate", "--devices", "10", "--rate", str(RATE), "--duration",
                            str(seconds), "--n", "4000", "--epsilon", "2", "--seed", "3")

    def store(self) -> AnalystStore:
        return open_analyst_store("sqlite:///%s" % (self.dir / "analyst.db"))

    def settled(self) -> bool:
        """Every interval that has readings is past and every closed window has its verdicts."""
        with self.store() as s:
            last = max((r.received_at for _, r in s.readings_after(s.max_row_id() - 1, 1)), default=None)
            counts = s.window_counts()
        return (last is not None and time.time() > math.floor(last / WINDOW) * WINDOW + WINDOW + 2
                and counts["closed"] + counts["held"] == 0)

    def close(self) -> None:
        self.watcher.loop_stop()
        self.watcher.disconnect()
        for p in self.procs.values():
            stop(p)
        self.broker.stop()
        self.webhook.close()


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(tmp_path)
    try:
        s.start()
        yield s
    finally:
        s.close()


def _epoch(iso: str) -> float:
    """``2025-11-25T16:40:05.000Z`` (the analyst's log) as seconds since the epoch."""
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _dpsense(stack: Stack, *args: str) -> str:
    res = subprocess.run([sys.executable, "-m", "dpsense.cloud.cli", *args, *stack.common], capture_output=True,
                         text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=60)
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_a_steady_fleet_gets_one_verdict_per_window_and_group_within_5_s(stack: Stack) -> None:
    assert "refusing rounds until then" in stack.log("correction")      # started before any profile existed
    sim = stack.simulate(22)
    assert sim.wait(90) == 0, stack.log("simulate")
    assert _wait(stack.settled, 30), stack.log("analyst")
    with stack.store() as s:
        everything = s.windows()
        payloads = dict(s.window_results())
        row_key = {row: (r.device_id, r.boot_id, r.seq) for row, r in s.readings_after(0, 10 ** 6)}
        pending = s.pending_by_group(0, s.max_row_id())
        carried = [e for e in s.events(10 ** 4) if e.kind == "carried"]
    assert len(row_key) == 22 * RATE
    # A window the detector found too sparse gave its readings back (state carried, no result).
    windows = [w for w in everything if w.state != "carried"]

    # One stored result per window and group, each within 5 s of its close.
    assert {w.group for w in windows} == {"hall-a", "hall-b"}
    for group in ("hall-a", "hall-b"):
        ends = [w.end for w in windows if w.group == group]
        assert len(ends) == len(set(ends)) >= 4
        assert all(e % WINDOW == 0 for e in ends)
    # A window below --min-round readings (a tail) gets no round: R = O', no attempt.
    assert all(w.state == "done" and w.attempts == (0 if payloads[w.id]["skipped"] else 1) for w in windows)
    assert all(payloads[w.id]["skipped"] == (w.n < 100) for w in windows)
    assert sorted(payloads) == [w.id for w in windows]
    delays = [w.done_at - w.end for w in windows]
    assert max(delays) <= 5.0, delays
    # Every reading is in exactly one window, or still pending.
    assert sum(w.n for w in windows) + sum(p.count for p in pending.values()) == len(row_key)
    # A window below the minimum is carried and said so (docs/operating.md, "The minimum window"):
    # the tail, and also mid-stream a window that holds few readings when it closes, --settle
    # after its end (the stream's first, partial interval; readings the ingest had not yet
    # committed). Its readings are in a later window of its group, or still pending at the end.
    said = re.compile(r"the window (\S+) to (\S+) has [0-9]+ readings")
    for e in carried:
        m = said.search(e.text)
        if e.window is not None:
            span = next((w.start, w.end) for w in everything if w.id == e.window)
        else:
            assert m is not None, e.text
            span = (_epoch(m.group(1)), _epoch(m.group(2)))
        assert e.group in pending or any(w.group == e.group and w.start <= span[0] and w.end > span[1]
                                         for w in windows), e.text
    # A group's readings pending at the end are its tail, which was said to be carried.
    assert set(pending) <= {e.group for e in carried}, (pending, [e.text for e in carried])

    # `dpsense results candidates --format csv`: every candidate with device, boot and seq.
    rows = list(csv.DictReader(io.StringIO(_dpsense(stack, "results", "candidates", "--format", "csv"))))
    assert len(rows) == sum(w.candidates for w in windows) == sum(p["candidates"] for p in payloads.values()) > 0
    for w in windows:
        mine = {(int(r["device"]), int(r["boot"]), int(r["seq"])) for r in rows if int(r["window"]) == w.id}
        assert mine == {row_key[row] for row in payloads[w.id]["candidate_rows"]}
        assert all(r["group"] == w.group for r in rows if int(r["window"]) == w.id)

    # Alerts on the alert topic and the webhook: one document per window with candidates.
    with_candidates = {w.id: w for w in windows if w.candidates}
    assert _wait(lambda: len(stack.alerts) == len(with_candidates) == len(stack.webhook.docs), 10)
    for topic, doc in stack.alerts:
        w = with_candidates[doc["window"]]
        assert topic == "dpsense/alerts/%s" % w.group and len(doc["candidates"]) == w.candidates
    assert sorted(d["window"] for d in stack.webhook.docs) == sorted(with_candidates)

    # The boards' status messages: per device, epsilon per record and in total, the round's
    # epsilon_A (1, the correction server's default) on each reading of a window that ran one.
    devices = json.loads(_dpsense(stack, "results", "devices", "--format", "json"))
    assert [(d["device"], d["group"]) for d in devices] == [(d, "hall-a" if d <= 5 else "hall-b") for d in range(1, 11)]
    assert all(d["eps_record"] == 4 and d["eps_total"] == 4 * d["readings"] + d["round_readings"]
               and 0 < d["round_readings"] <= d["readings"] for d in devices)


def test_correction_server_stopped_mid_stream_holds_windows_until_it_is_back(stack: Stack) -> None:
    sim = stack.simulate(30)
    with stack.store() as s:
        assert _wait(lambda: s.window_counts()["done"] >= 2, 40), stack.log("analyst")
    stop(stack.procs["correction"])
    stopped = time.time()
    time.sleep(9)
    with stack.store() as s:
        during = [w for w in s.windows() if w.end > stopped]
        assert during and all(w.state in ("closed", "held") for w in during)
        assert not {w.id for w in during} & {wid for wid, _ in s.window_results()}
        assert not [v for v in s.verdicts(candidates_only=False) if v.window in {w.id for w in during}]
        assert any(e.kind == "held" for e in s.events(50))
    assert re.search(r"held after \d+ round attempts?: no 'result' answer", stack.log("analyst"))  # mode bands, the default
    restarted = time.time()
    stack.start_correction_server()
    assert sim.wait(90) == 0, stack.log("simulate")
    assert _wait(stack.settled, 90), stack.log("analyst")
    answered = {int(line.split()[3]) for line in stack.log("correction").splitlines()
                if line.startswith("correction server: round ") and line.endswith(" answered")}
    with stack.store() as s:
        windows = s.windows()
        held = [w for w in windows if w.id in {d.id for d in during}]
        results = dict(s.window_results())
    assert all(w.state == "done" for w in windows)
    # No window is stored as corrected without its round: each has the round the server answered.
    # (A tail window below --min-round readings runs no round and is stored uncorrected, R = O'.)
    assert all((w.round_id in answered and results[w.id]["round"] == w.round_id) if w.n >= 100
               else (results[w.id]["skipped"] and w.round_id is None) for w in windows)
    # Windows wait in order: the oldest was tried and held, the others waited behind it.
    assert all(w.done_at > restarted and w.missing == 0 for w in held) and held[0].attempts >= 2
    status = _dpsense(stack, "status")
    assert "0 readings without a correction record, 0 correction records without a reading" in status
    assert "0 held after a failed round" in status


def test_readings_of_1_and_16_columns_among_2_are_set_apart_and_the_analyst_keeps_running(
        stack: Stack, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 15: the protocol allows 1..16 columns; a board publishing readings of 1 and 16
    columns into its group's windows of 2-column readings neither stops the analyst nor is scored."""
    from dpsense.protocol import wire
    assert main(["broker", "add-device", "11", "--group", "hall-a", *stack.common]) == 0
    capsys.readouterr()
    name, password = stack.broker.add_device(11)       # a password this test knows
    stack.broker.reload()
    sim = stack.simulate(16)
    odd = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=name, protocol=mqtt.MQTTv311)
    odd.username_pw_set(name, password)
    odd.connect(stack.broker.host, stack.broker.port)
    odd.loop_start()
    try:
        time.sleep(2)
        for s in range(12):
            values = [7] if s % 2 else list(range(16))
            token = bytes([11, s, 0, 0, 0, 0, 0, 9])
            info = odd.publish(topics.READINGS % name, wire.encode_reading(11, 999, s, token, 1, values), qos=1)
            info.wait_for_publish(10)
            assert info.is_published()
            time.sleep(0.5)
    finally:
        odd.loop_stop()
        odd.disconnect()
    assert sim.wait(90) == 0, stack.log("simulate")
    assert _wait(stack.settled, 60), stack.log("analyst")
    assert stack.procs["analyst"].poll() is None, stack.log("analyst")
    with stack.store() as s:
        windows = s.windows()
        apart = s.set_apart_by_device()
        odd_rows = {row for row, r in s.readings_after(0, 10 ** 6) if len(r.values) != 2}
        scored = {v.row_id for v in s.verdicts(candidates_only=False)}
        members = {row for w in windows for row in s.window_members(w.id).row_ids.tolist()}
    assert len(odd_rows) == 12 and apart == {11: 12}
    assert all(w.state == "done" for w in windows) and sum(w.candidates or 0 for w in windows) > 0
    assert not odd_rows & scored and not odd_rows & members
    assert "set apart" in stack.log("analyst")
    assert "device 11: 12" in _dpsense(stack, "status")
