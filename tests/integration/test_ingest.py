"""Ingest against the real broker and SQLite: crash safety and bad input."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from paho.mqtt.enums import CallbackAPIVersion

from dpsense.cloud.transport import topics
from dpsense.cloud.deploy.broker import Broker, free_port
from dpsense.cloud.ingest.classify import classify_reading
from dpsense.cloud.ingest.service import Connection, IngestService
from dpsense.cloud.storage import open_analyst_store
from dpsense.cloud.storage.repository import DeadLetter
from dpsense.protocol import wire
from tests import vectors

pytestmark = pytest.mark.skipif(shutil.which("mosquitto_passwd") is None,
                                reason="Debian package 'mosquitto' is not installed")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def broker(tmp_path):
    b = Broker(tmp_path, port=free_port())
    # The broker keeps no password in clear: the test holds them.
    b.test_passwords = {"analyst": b.add_account("analyst")}  # type: ignore[attr-defined]
    b.test_passwords.update(b.add_devices([1, 2, 3, 4]))  # type: ignore[attr-defined]
    with b.running():
        yield b


def _device(broker: Broker, device_id: int) -> mqtt.Client:
    name = topics.device_username(device_id)
    c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=name, protocol=mqtt.MQTTv311)
    c.username_pw_set(name, broker.test_passwords[name])
    c.max_inflight_messages_set(1000)
    c.max_queued_messages_set(0)
    c.connect(broker.host, broker.port)
    c.loop_start()
    return c


def _reading(device_id: int, seq: int) -> bytes:
    return wire.encode_reading(device_id, 1, seq, seq.to_bytes(8, "little"), 1, [seq, -seq - 1])


def _ingest_proc(broker: Broker, url: str, log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), DPSENSE_BROKER_PASSWORD=broker.test_passwords["analyst"])
    with open(log, "ab") as f:
        return subprocess.Popen(
            [sys.executable, "-m", "dpsense.cloud.cli", "ingest", "--role", "analyst", "--data-dir",
             str(broker.dir.parent), "--broker-port", str(broker.port), "--analyst-db", url,
             "--batch-size", "200"],
            env=env, stdout=subprocess.DEVNULL, stderr=f)


def _count(url: str) -> int:
    try:
        with open_analyst_store(url) as s:
            return s.count()
    except Exception:  # noqa: BLE001 - not created yet
        return 0


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    if request.param == "sqlite":
        return "sqlite:///%s" % (tmp_path / "analyst.db")
    from tests.pgserver import create_database
    return create_database(request.getfixturevalue("postgres_url"), "ingest_%s" % tmp_path.name.lower()[-20:])


def _wait(pred, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_kill_9_mid_stream_then_restart_stores_every_reading_exactly_once(broker, tmp_path, store_url):
    """The ingest process is SIGKILLed mid-stream and restarted: every reading the broker
    acknowledged ends up stored exactly once (SQLite and PostgreSQL)."""
    log = tmp_path / "ingest.log"
    per_device, devices = 3000, (1, 2, 3, 4)
    total = per_device * len(devices)
    proc = _ingest_proc(broker, store_url, log)
    try:
        assert _wait(lambda: log.exists() and b"ingest: subscribed" in log.read_bytes(), 30), log.read_text()
        clients = {d: _device(broker, d) for d in devices}

        infos: list[mqtt.MQTTMessageInfo] = []

        def publish_all() -> None:
            for seq in range(per_device):
                for d in devices:
                    infos.append(clients[d].publish(topics.READINGS % topics.device_username(d),
                                                    _reading(d, seq), qos=1))
                if seq % 200 == 0:
                    time.sleep(0.01)
            for info in infos:          # published = acknowledged by the broker
                info.wait_for_publish(30)

        pub = threading.Thread(target=publish_all)
        pub.start()
        assert _wait(lambda: _count(store_url) > total // 4, 60), "ingest stored nothing"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        killed_at = _count(store_url)
        assert killed_at < total, "the kill came too late to test anything"
        pub.join()
        assert all(i.is_published() for i in infos)
        for c in clients.values():
            c.loop_stop()
            c.disconnect()
        proc = _ingest_proc(broker, store_url, log)
        assert _wait(lambda: _count(store_url) >= total, 90), "stored %d of %d" % (_count(store_url), total)
        time.sleep(1.0)
    finally:
        proc.terminate()
        proc.wait(10)
    with open_analyst_store(store_url) as s:
        assert s.count() == total
        assert s.dead_letter_count() == 0
        gaps = s.gaps()
        assert sorted((g.device_id, g.first_seq, g.last_seq, g.received, g.missing) for g in gaps) == \
            [(d, 0, per_device - 1, per_device, 0) for d in devices]


_payloads = st.one_of(
    st.binary(max_size=80),
    st.integers(0, len(vectors.READING_V2) - 1).map(lambda n: vectors.READING_V2[:n]),
    st.tuples(st.integers(0, len(vectors.READING_V2) - 1), st.integers(0, 255)).map(
        lambda t: vectors.READING_V2[:t[0]] + bytes([t[1]]) + vectors.READING_V2[t[0] + 1:]),
    st.just(vectors.CORRECTION_V2),
    st.integers(0, 10**6).map(lambda s: _reading(1, s)),
)


@pytest.fixture()
def live_ingest(broker, tmp_path):
    """An IngestService running in a thread; SQLite connections belong to their thread,
    so the store is opened inside it."""
    db = tmp_path / "fuzz.db"
    conn = Connection(broker.host, broker.port, "analyst-ingest", broker.test_passwords["analyst"],
                      "analyst-ingest")
    svc = IngestService.for_analyst(conn, None, batch_size=50, log=lambda s: None)
    stop = threading.Event()
    result: dict[str, BaseException] = {}

    def run() -> None:
        with open_analyst_store("sqlite:///%s" % db) as store:
            svc.store = store
            try:
                svc.run(stop)
            except BaseException as e:  # noqa: BLE001 - reported by the test
                result["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    assert _wait(lambda: svc.session.up.is_set(), 10)
    yield svc, db, result
    stop.set()
    t.join(10)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.lists(_payloads, min_size=1, max_size=60))
def test_malformed_payloads_end_in_dead_letters_and_the_service_keeps_running(broker, live_ingest, batch):
    svc, db, result = live_ingest
    before = svc.stats.received
    dev = _device(broker, 1)
    for p in batch:
        dev.publish(topics.READINGS % "d1", p, qos=1)
    dev.publish(topics.READINGS % "d1", b"", qos=1)     # an empty payload is malformed too
    assert _wait(lambda: svc.stats.received >= before + len(batch) + 1, 20)
    dev.loop_stop()
    dev.disconnect()
    assert "error" not in result
    # Oracle: classify each payload on its own; the store must hold exactly that.
    with open_analyst_store("sqlite:///%s" % db) as s:
        dead = {(d.reason, d.payload) for d in s.dead_letters(100000)}
        for p in batch + [b""]:
            r = classify_reading(topics.READINGS % "d1", p, 0.0)
            if isinstance(r, DeadLetter):
                assert (r.reason, p) in dead
        assert s.dead_letter_count() >= 1


def test_the_ingest_reconnects_after_a_broker_restart_and_stores_every_reading_once(broker, live_ingest):
    """The ingest's own network thread (cloud/transport/mqttio.py NetworkLoop, not paho's loop_start)
    reconnects to its persistent session; readings published while it was away arrive then."""
    svc, db, result = live_ingest
    sock = svc._client.buffered_socket()
    assert sock is not None and sock.coalesce      # block reads, PUBACKs in one write per batch
    dev = _device(broker, 2)
    for seq in range(100):
        dev.publish(topics.READINGS % "d2", _reading(2, seq), qos=1).wait_for_publish(5)
    assert _wait(lambda: svc.stats.stored >= 100, 20)
    dev.loop_stop()
    dev.disconnect()
    broker.stop()
    broker.start()
    dev = _device(broker, 2)
    for seq in range(100, 200):
        dev.publish(topics.READINGS % "d2", _reading(2, seq), qos=1).wait_for_publish(5)
    dev.loop_stop()
    dev.disconnect()
    assert _wait(lambda: svc.stats.stored >= 200, 30), svc.stats
    assert "error" not in result
    assert svc.stats.reconnects >= 1 and svc.stats.stored == 200
    with open_analyst_store("sqlite:///%s" % db) as s:
        assert s.count() == 200
