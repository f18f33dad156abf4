"""Sealed correction records over the real broker (Mosquitto) into the correction server's
ingest (cloud/correction/sealed.py): what a broker-side reader of the corrections topic
sees, and what the ingest does with forged, replayed and plain records."""
from __future__ import annotations

import shutil
import struct
import threading
import time

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from dpsense.cloud.transport import topics
from dpsense.cloud.deploy.broker import Broker, free_port
from dpsense.cloud.correction.sealed import KeyStore, sealed_ingest, sealer_for
from dpsense.cloud.transport.session import Connection
from dpsense.cloud.storage import open_correction_store
from dpsense.protocol import seal, wire

pytestmark = pytest.mark.skipif(shutil.which("mosquitto_passwd") is None,
                                reason="Debian package 'mosquitto' is not installed")
N = 200


def _client(broker: Broker, user: str, password: str) -> mqtt.Client:
    c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=user, protocol=mqtt.MQTTv311)
    c.username_pw_set(user, password)
    c.connect(broker.host, broker.port)
    c.loop_start()
    return c


def _until(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.05)


def test_broker_side_reader_sees_only_sealed_bytes_and_forgeries_are_dead_letters(tmp_path):
    broker = Broker(tmp_path, port=free_port())
    cs_pw = broker.add_account("correction")
    dev_pw = broker.add_devices([1, 2])
    keys = KeyStore.for_data_dir(tmp_path).add_device(1)
    url = "sqlite:///%s" % (tmp_path / "correction.db")
    open_correction_store(url).close()
    stop = threading.Event()
    ready = threading.Event()
    held: dict[str, object] = {}
    with broker.running():
        # The reader: an account the broker lets read dpsense/corrections (the correction
        # server's own), standing for the broker, its operator or a gateway.
        seen: list[bytes] = []
        subscribed = threading.Event()
        reader = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="correction", protocol=mqtt.MQTTv311)
        reader.username_pw_set("correction", cs_pw)
        reader.on_message = lambda c, u, m: seen.append(bytes(m.payload))
        reader.on_subscribe = lambda *a: subscribed.set()
        reader.connect(broker.host, broker.port)
        reader.subscribe(topics.CORRECTIONS, qos=1)
        reader.loop_start()
        assert subscribed.wait(10)
        conn = Connection(broker.host, broker.port, "correction-ingest", cs_pw, "correction-ingest")

        def run() -> None:
            # SQLite connections belong to the thread that opened them: the ingest's own.
            with open_correction_store(url) as own:
                svc = sealed_ingest(conn, own, tmp_path, batch_wait=0.01,
                                    log=lambda line: ready.set() if "subscribed" in line else None)
                held["svc"] = svc
                svc.run(stop)
        t = threading.Thread(target=run, daemon=True)
        t.start()
        assert ready.wait(10), "the ingest did not subscribe"
        store = open_correction_store(url)
        d1 = _client(broker, "d1", dev_pw["d1"])
        d2 = _client(broker, "d2", dev_pw["d2"])
        try:
            s = sealer_for(keys)
            sent = []
            for i in range(N):
                token = struct.pack("<Q", 0x1122334455660000 + i)
                d_diff = (-1) ** i * (1000 + i)
                rec = s.seal(1, 77, i, i + 1, token, d_diff)
                sent.append((token, d_diff, rec))
                d1.publish(topics.CORRECTIONS, rec, qos=1).wait_for_publish(5)
            _until(lambda: store.count() == N, 30, "%d sealed records stored" % N)
            # A byte-identical resend: a duplicate, not a dead letter.
            d1.publish(topics.CORRECTIONS, sent[5][2], qos=1).wait_for_publish(5)
            # Forged: one bit of the ciphertext changed.
            forged = bytearray(sent[7][2])
            forged[24] ^= 0x01
            d1.publish(topics.CORRECTIONS, bytes(forged), qos=1).wait_for_publish(5)
            # Replayed nonce: nonce 3 again, with other bytes (a board whose nonce went back).
            again = sealer_for(keys).seal(1, 78, 0, 3, b"\xaa" * 8, 42)
            d1.publish(topics.CORRECTIONS, again, qos=1).wait_for_publish(5)
            # A device with keys sending in clear (a downgrade), and one without keys sealing.
            plain = wire.encode_correction(1, 77, 999, b"\xbb" * 8, 7)
            d1.publish(topics.CORRECTIONS, plain, qos=1).wait_for_publish(5)
            d2.publish(topics.CORRECTIONS, sealer_for(keys).seal(2, 1, 0, 1, b"\xcc" * 8, 9),
                       qos=1).wait_for_publish(5)
            _until(lambda: store.dead_letter_messages() >= 4, 30, "4 dead letters")
            _until(lambda: len(seen) >= N + 5, 10, "the reader's copies")
        finally:
            for c in (d1, d2, reader):
                c.loop_stop()
                c.disconnect()
            stop.set()
            t.join(15)
    reasons = sorted(d.reason for d in store.dead_letters())
    assert store.count() == N
    assert held["svc"].stats.duplicates == 1  # type: ignore[attr-defined]
    assert any(r == "forged or damaged: the tag does not match" for r in reasons), reasons
    assert any(r.startswith("replayed nonce 3 of device 1 with different bytes") for r in reasons), reasons
    assert any("not configured plaintext" in r for r in reasons), reasons
    assert any(r.startswith("no key for device 2") for r in reasons), reasons
    got = store.lookup([tok for tok, _, _ in sent])
    assert got == {tok: dd for tok, dd, _ in sent}
    # What the reader saw of the board's records: 48 sealed bytes each, neither token nor d_diff.
    board = seen[:N]
    assert [len(p) for p in board] == [seal.SEALED_SIZE] * N
    for (token, d_diff, rec), p in zip(sent, board):
        assert p == rec and p[1] == seal.KIND_SEALED
        assert token not in p and struct.pack("<i", d_diff) not in p
        assert token[:4] not in p[seal.HEAD_SIZE:]
    store.close()
