"""A publish the broker refuses is counted for its device (issue 24, item 8): a gateway's MQTT v5
connection sees the PUBACK's reason code, says it on the device's status topic, and the analyst's
store, `dpsense status` and /metrics show the count per device."""
from __future__ import annotations

import shutil
import threading
from fractions import Fraction
import time
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from dpsense.cloud.analyst.devices import classify_status
from dpsense.cloud.deploy.broker import Broker, free_port
from dpsense.cloud.ops import results
from dpsense.cloud.storage import open_analyst_store
from dpsense.cloud.transport import topics
from dpsense.cloud.transport.gateway.relay import Gateway
from dpsense.cloud.transport.gateway.service import on_publish_for
from tests.integration.procs import wait_for

pytestmark = pytest.mark.skipif(shutil.which("mosquitto_passwd") is None,
                                reason="Debian package 'mosquitto' is not installed")


def test_a_refused_publish_is_counted_for_its_device(tmp_path: Path) -> None:
    broker = Broker(tmp_path, port=free_port())
    pw = broker.add_account("analyst")
    user, dpw = broker.add_device(7)
    statuses: list[tuple[str, bytes]] = []
    logs: list[str] = []
    with broker.running():
        listener = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="analyst-status", protocol=mqtt.MQTTv311)
        listener.username_pw_set("analyst-status", pw)
        subscribed = threading.Event()
        listener.on_subscribe = lambda *a: subscribed.set()
        listener.on_message = lambda c, u, m: statuses.append((m.topic, bytes(m.payload)))
        listener.connect(broker.host, broker.port)
        listener.subscribe(topics.STATUS_ALL, qos=1)
        listener.loop_start()
        assert subscribed.wait(5)
        # The gateway's client, wired as cloud/transport/gateway/service.py wires it.
        client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=user, protocol=mqtt.MQTTv5)
        client.username_pw_set(user, dpw)
        gw = Gateway(7, lambda t, p: client.publish(t, p, qos=1).mid, logs.append)
        client.on_publish = on_publish_for(gw)
        client.connect(broker.host, broker.port, clean_start=True)
        client.loop_start()
        assert wait_for(client.is_connected, 5, step=0.05)
        gw.publish(topics.READINGS % user, b"allowed")
        gw.publish(topics.READINGS % "d8", b"another device's topic")       # not d7's to write
        assert wait_for(lambda: gw.stats.refused == 1 and statuses, 5, step=0.05), (gw.stats, logs)
        time.sleep(0.3)
        client.disconnect()
        client.loop_stop()
        listener.disconnect()
        listener.loop_stop()
    assert gw.stats.refused == 1 and gw.acks.acked == 3          # both publishes and the status answered
    assert any("refused a publish of d7 (Not authorized)" in line for line in logs), logs
    (topic, payload), = statuses
    assert topic == topics.STATUS % "d7"
    status = classify_status(topic, payload, time.time())
    with open_analyst_store("sqlite:///%s" % (tmp_path / "analyst.db")) as store:
        store.add_statuses([status], [])
        rows = {r.device_id: r for r in results.devices(store)}
    assert rows[7].refused == 1


def test_the_count_reaches_metrics_and_status(tmp_path: Path) -> None:
    """The stored count is the device's counter in /metrics and a line of `dpsense status`."""
    import json
    import subprocess
    import sys

    from prometheus_client import generate_latest

    from dpsense.cloud.ops.dashboard.data import StoreSource
    from dpsense.cloud.ops.dashboard.metrics import metrics_registry
    db = "sqlite:///%s" % (tmp_path / "analyst.db")
    with open_analyst_store(db) as store:
        boot = json.dumps({"event": "boot", "device": 7, "boot": 5, "eps_record": "1/2"}).encode()
        store.add_statuses([classify_status(topics.STATUS % "d7", boot, time.time() - 1)], [])
        for d, n in ((7, 2), (9, 0)):
            payload = json.dumps({"event": "refused", "device": d, "refused": n}).encode()
            store.add_statuses([classify_status(topics.STATUS % ("d%d" % d), payload, time.time())], [])
        # The gateway's report is newer than the board's boot status and does not hide it.
        row = {r.device_id: r for r in results.devices(store)}[7]
        assert (row.refused, row.eps_record, row.status_event) == (2, Fraction(1, 2), "boot")
    text = generate_latest(metrics_registry(StoreSource(lambda: open_analyst_store(db)))).decode()
    assert 'dpsense_device_publishes_refused_total{device="d7",group="default"} 2.0' in text, text
    assert 'dpsense_device_publishes_refused_total{device="d9",group="default"} 0.0' in text
    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, "-m", "dpsense.cloud.cli", "status", "--data-dir", str(tmp_path),
                        "--analyst-db", db], capture_output=True, text=True, timeout=60, cwd=root)
    assert r.returncode == 0, r.stderr
    assert "refused     2 publishes refused by the broker (reported by the gateways): d7: 2" in r.stdout, r.stdout
