"""cloud/sim/fleetpub.py against a real broker: every record arrives once, in each device's order, under
its own account, from worker processes; a refused account is one clear error, not a hang."""
from __future__ import annotations

import shutil
import threading
import time
from collections import defaultdict

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from dpsense.cloud.transport import topics
from dpsense.cloud.deploy.broker import Broker, free_port
from dpsense.cloud.deploy.config import Settings
from dpsense.cloud.sim.fleetpub import FleetPublisher
from dpsense.cloud.sim.simulate import Encoded
from dpsense.protocol import wire

pytestmark = pytest.mark.skipif(shutil.which("mosquitto_passwd") is None,
                                reason="Debian package 'mosquitto' is not installed")
DEVICES = 5


@pytest.fixture()
def fleet(tmp_path):
    b = Broker(tmp_path, port=free_port())
    analyst = b.add_account("analyst")
    correction = b.add_account("correction")
    devices = b.add_devices(list(range(1, DEVICES + 1)))
    with b.running():
        yield b, Settings(data_dir=tmp_path, broker_port=b.port), analyst, correction, devices


def _listen(broker: Broker, account: str, password: str, topic: str, got: list[tuple[str, bytes]]) -> mqtt.Client:
    c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=account, protocol=mqtt.MQTTv311)
    c.username_pw_set(account, password)
    subscribed = threading.Event()
    c.on_subscribe = lambda *a: subscribed.set()
    c.on_connect = lambda cl, *a: cl.subscribe(topic, qos=1)
    c.on_message = lambda cl, u, m: got.append((m.topic, bytes(m.payload)))
    c.connect(broker.host, broker.port)
    c.loop_start()
    assert subscribed.wait(10)
    return c


def _records(n: int) -> Encoded:
    """Record i from device i % DEVICES + 1, its seq = i // DEVICES; token = i (8 bytes)."""
    import numpy as np
    dev = np.array([i % DEVICES + 1 for i in range(n)])
    seq = np.array([i // DEVICES for i in range(n)])
    readings = [wire.encode_reading(int(dev[i]), 1, int(seq[i]), i.to_bytes(8, "little"), 1, [i, -i])
                for i in range(n)]
    corrections = [wire.encode_correction(int(dev[i]), 1, int(seq[i]), i.to_bytes(8, "little"), i) for i in range(n)]
    empty = np.zeros((n, 2), dtype=np.int64)
    return Encoded(dev, seq, readings, corrections, empty, empty)


@pytest.mark.parametrize("processes", [1, 2, 8])
def test_every_record_arrives_once_in_device_order(fleet, processes):
    broker, settings, analyst, correction, devices = fleet
    readings: list[tuple[str, bytes]] = []
    corrections: list[tuple[str, bytes]] = []
    subs = [_listen(broker, "analyst", analyst, topics.READINGS_ALL, readings),
            _listen(broker, "correction", correction, topics.CORRECTIONS, corrections)]
    n = 3000
    enc = _records(n)
    # No ingest runs here, so nothing is ever committed: no resends during the test.
    pub = FleetPublisher(settings, devices, DEVICES, processes=processes, commit_timeout_s=3600)
    assert pub.processes == min(processes, DEVICES)
    pub.connect()
    try:
        seconds = pub.publish(enc, timeout=120, wait="broker")
        pub.send([(3, topics.STATUS % "d3", b'{"event":"boot"}')])
        deadline = time.monotonic() + 30
        while pub.acked < 2 * n + 1:
            assert time.monotonic() < deadline, "only %d acknowledged" % pub.acked
            time.sleep(0.01)
    finally:
        pub.close()
    assert seconds > 0
    deadline = time.monotonic() + 30
    while len(readings) < n or len(corrections) < n:
        assert time.monotonic() < deadline, "received %d readings, %d corrections" % (len(readings), len(corrections))
        time.sleep(0.01)
    time.sleep(0.2)
    for c in subs:
        c.disconnect()
        c.loop_stop()
    assert sorted(p for _, p in readings) == sorted(enc.readings)          # each once, nothing else
    assert sorted(p for _, p in corrections) == sorted(enc.corrections)
    per_device: dict[int, list[int]] = defaultdict(list)
    for topic, payload in readings:
        _, (device, _, seq, _, _, _) = wire.decode(payload)
        assert topic == topics.READINGS % topics.device_username(device)   # its own account's topic
        per_device[device].append(seq)
    assert sorted(per_device) == list(range(1, DEVICES + 1))
    for seqs in per_device.values():
        assert seqs == sorted(seqs)                                        # one connection keeps order


def test_a_refused_account_is_one_error_naming_it(fleet):
    broker, settings, _, _, devices = fleet
    wrong = dict(devices, d2="not-the-password")
    pub = FleetPublisher(settings, wrong, DEVICES, processes=2)
    t0 = time.monotonic()
    with pytest.raises(ConnectionError, match=r"refused: d2: "):
        pub.connect(timeout=10)
    assert time.monotonic() - t0 < 20


def test_a_missing_password_or_bad_counts_are_refused_before_anything_starts(fleet):
    _, settings, _, _, devices = fleet
    with pytest.raises(ValueError, match="no password for simulated device d6"):
        FleetPublisher(settings, devices, DEVICES + 1)
    with pytest.raises(ValueError, match="processes must be >= 1"):
        FleetPublisher(settings, devices, DEVICES, processes=0)
    with pytest.raises(ValueError, match="devices must be >= 1"):
        FleetPublisher(settings, devices, 0)


def test_the_books_keep_each_record_until_both_ingests_committed_it(fleet, tmp_path):
    """The analyst's ingest starts 2 s late, with no session at the broker yet, so the broker
    drops every reading published before it subscribes: only the workers' resends (commit
    timeout 1 s) can bring them in. ``publish(committed=True)`` returns only once every record
    is in both stores, each once."""
    from dpsense.cloud.ingest.service import Connection, IngestService
    from dpsense.cloud.storage import open_analyst_store, open_correction_store
    broker, settings, analyst, correction, devices = fleet
    stop = threading.Event()
    started: dict[str, float] = {}

    def ingest(role: str, password: str, delay: float) -> None:
        if stop.wait(delay):
            return
        name = role + "-ingest"
        url = "sqlite:///%s/%s.db" % (tmp_path, role)
        opener = open_analyst_store if role == "analyst" else open_correction_store
        with opener(url) as store:
            conn = Connection(broker.host, broker.port, name, password, name)
            svc = (IngestService.for_analyst if role == "analyst" else IngestService.for_correction)(
                conn, store, log=lambda s: None)
            started[role] = time.monotonic()
            svc.run(stop)

    threads = [threading.Thread(target=ingest, args=("correction", correction, 0.0)),
               threading.Thread(target=ingest, args=("analyst", analyst, 2.0))]
    for t in threads:
        t.start()
    n = 600
    enc = _records(n)
    pub = FleetPublisher(settings, devices, DEVICES, processes=2, commit_timeout_s=1.0)
    try:
        pub.connect()
        pub.publish(enc, timeout=120)
        done = time.monotonic()
        assert pub.committed == n
    finally:
        pub.close()
        stop.set()
        for t in threads:
            t.join(30)
    assert done > started["analyst"]
    with open_analyst_store("sqlite:///%s/analyst.db" % tmp_path) as a:
        keys = [(r.device_id, r.boot_id, r.seq) for _, r in a.readings_after(0, 10 ** 6)]
        assert len(keys) == len(set(keys)) == n
    with open_correction_store("sqlite:///%s/correction.db" % tmp_path) as c:
        assert c.count() == n


def test_resends_never_inflate_a_count_and_close_says_what_was_never_committed(fleet):
    """No ingest runs, so nothing is committed and the books resend every record each 0.3 s.
    The broker acknowledges each resend too; ``acked`` still counts each message once, nothing
    is counted committed, and ``close`` says how many records were never committed."""
    _, settings, _, _, devices = fleet
    n = 200
    enc = _records(n)
    pub = FleetPublisher(settings, devices, DEVICES, processes=2, commit_timeout_s=0.3)
    pub.connect()
    try:
        pub.publish(enc, timeout=60, wait="broker")
        time.sleep(2.5)                     # several resend rounds, each PUBACKed by the broker
        assert pub.acked == 2 * n
        assert pub.committed == 0 and pub.uncommitted == n
    finally:
        left = pub.close()
    assert left == n


def test_publish_waits_for_the_commit_not_for_the_broker(fleet, tmp_path):
    """Only the correction server's ingest runs: the broker acknowledges every message, but no
    reading is committed, so ``publish`` does not count a record done and says how many were."""
    from dpsense.cloud.ingest.service import Connection, IngestService
    from dpsense.cloud.storage import open_correction_store
    broker, settings, _, correction, devices = fleet
    stop = threading.Event()

    def ingest() -> None:
        with open_correction_store("sqlite:///%s/correction.db" % tmp_path) as store:
            conn = Connection(broker.host, broker.port, "correction-ingest", correction, "correction-ingest")
            IngestService.for_correction(conn, store, log=lambda s: None).run(stop)

    t = threading.Thread(target=ingest)
    t.start()
    pub = FleetPublisher(settings, devices, DEVICES, processes=1)
    try:
        pub.connect()
        with pytest.raises(TimeoutError, match=r"only 0 of 100 records committed"):
            pub.publish(_records(100), timeout=4)
        assert pub.acked == 200
    finally:
        left = pub.close()
        stop.set()
        t.join(30)
    assert left == 100
