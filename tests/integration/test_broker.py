"""The generated Mosquitto configuration: ACLs per role, and no loss for a slow subscriber."""
from __future__ import annotations

import shutil
import threading
import time

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from dpsense.cloud import topics
from dpsense.cloud.broker import Broker, BrokerError, free_port

pytestmark = pytest.mark.skipif(shutil.which("mosquitto_passwd") is None,
                                reason="Debian package 'mosquitto' is not installed")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = Broker(tmp_path_factory.mktemp("broker"), port=free_port())
    for role in ("analyst", "correction", "curator", "alerts"):
        b.add_account(role)
    b.add_device(7)
    b.add_device(8)
    with b.running():
        yield b


class Peer:
    """A paho client that records what it receives and which publishes the broker acknowledged."""

    def __init__(self, broker: Broker, user: str, client_id: str | None = None, clean: bool = True):
        self.got: list[tuple[str, bytes]] = []
        self.granted: list[int] = []
        self.subscribed = threading.Event()
        self.c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id or "t-" + user,
                             clean_session=clean, protocol=mqtt.MQTTv311)
        self.c.username_pw_set(user, broker.password(user))
        self.c.max_inflight_messages_set(1000)
        self.c.max_queued_messages_set(0)
        self.c.on_message = lambda c, u, m: self.got.append((m.topic, bytes(m.payload)))
        self.c.on_subscribe = self._on_subscribe
        self.c.connect(broker.host, broker.port)
        self.c.loop_start()
        deadline = time.monotonic() + 5
        while not self.c.is_connected():
            assert time.monotonic() < deadline, "%s could not connect" % user
            time.sleep(0.01)

    def _on_subscribe(self, c, u, mid, reason_codes, props):
        self.granted = [rc.value for rc in reason_codes]
        self.subscribed.set()

    def subscribe(self, topic: str) -> list[int]:
        self.subscribed.clear()
        self.c.subscribe(topic, qos=1)
        assert self.subscribed.wait(5)
        return self.granted

    def close(self):
        self.c.disconnect()
        self.c.loop_stop()


def _wait_for(pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_device_publishes_only_under_its_own_topic(broker):
    analyst = Peer(broker, "analyst")
    analyst.subscribe(topics.READINGS_ALL)
    spoofer = Peer(broker, "d7", client_id="t-d7-spoof")
    info = spoofer.c.publish(topics.READINGS % "d8", b"spoofed", qos=1)
    try:
        info.wait_for_publish(5)
    except RuntimeError:
        pass        # Mosquitto 2.0 drops the connection of a client that publishes where it may not
    spoofer.close()
    d7 = Peer(broker, "d7")
    d7.c.publish(topics.READINGS % "d7", b"own", qos=1).wait_for_publish(5)
    assert _wait_for(lambda: len(analyst.got) >= 1)
    time.sleep(0.3)
    assert analyst.got == [("dpsense/readings/d7", b"own")]
    d7.close()
    analyst.close()


def test_analyst_cannot_read_corrections_and_correction_server_cannot_read_readings(broker):
    analyst = Peer(broker, "analyst")
    cs = Peer(broker, "correction")
    # The broker grants the SUBSCRIBE but never delivers denied messages (MQTT 3.1.1).
    analyst.subscribe(topics.CORRECTIONS)
    cs.subscribe(topics.READINGS_ALL)
    cs.subscribe(topics.CORRECTIONS)
    d7 = Peer(broker, "d7")
    d7.c.publish(topics.CORRECTIONS, b"corr", qos=1).wait_for_publish(5)
    d7.c.publish(topics.READINGS % "d7", b"reading", qos=1).wait_for_publish(5)
    assert _wait_for(lambda: len(cs.got) >= 1)
    time.sleep(0.3)
    assert cs.got == [(topics.CORRECTIONS, b"corr")]
    assert analyst.got == []
    for p in (analyst, cs, d7):
        p.close()


def test_alerts_account_reads_alerts_and_nothing_else(broker):
    """The operator's read-only account gets the analyst's alerts and no other topic; devices
    never see alerts; nobody but the analyst can put an alert there."""
    watcher = Peer(broker, "alerts")
    for topic in (topics.ALERTS_ALL, topics.READINGS_ALL, topics.CORRECTIONS, topics.STATUS_ALL,
                  topics.ROUND_TO_CS, topics.ROUND_TO_ANALYST, "#"):
        watcher.subscribe(topic)
    d8 = Peer(broker, "d8")
    d8.subscribe(topics.ALERTS_ALL)
    cs = Peer(broker, "correction")
    cs.subscribe(topics.CORRECTIONS)
    analyst = Peer(broker, "analyst")
    analyst.subscribe(topics.READINGS_ALL)
    analyst.subscribe(topics.STATUS_ALL)
    d7 = Peer(broker, "d7")
    d7.c.publish(topics.READINGS % "d7", b"reading", qos=1).wait_for_publish(5)
    d7.c.publish(topics.STATUS % "d7", b"{}", qos=1).wait_for_publish(5)
    d7.c.publish(topics.CORRECTIONS, b"corr", qos=1).wait_for_publish(5)
    for step in ("presumed", "split"):
        (analyst if step == "presumed" else cs).c.publish(
            topics.ROUND_TO_CS if step == "presumed" else topics.ROUND_TO_ANALYST, step.encode(), qos=1)
    for topic in (topics.ALERTS % "hall-a", topics.CORRECTIONS, topics.READINGS % "alerts", topics.STATUS % "alerts"):
        spoof = Peer(broker, "alerts", client_id="t-alerts-spoof")
        try:
            spoof.c.publish(topic, b"spoofed", qos=1).wait_for_publish(2)
        except (RuntimeError, ValueError):
            pass        # Mosquitto may drop a client that publishes where it may not
        spoof.close()
    d7.c.publish(topics.ALERTS % "hall-a", b"device alert", qos=1)
    analyst.c.publish(topics.ALERTS % "hall-a", b"alert", qos=1).wait_for_publish(5)
    assert _wait_for(lambda: len(watcher.got) >= 1)
    assert _wait_for(lambda: len(cs.got) >= 1)
    time.sleep(0.5)
    assert watcher.got == [("dpsense/alerts/hall-a", b"alert")]
    assert d8.got == []
    assert cs.got == [(topics.CORRECTIONS, b"corr")]
    assert sorted(analyst.got) == [("dpsense/readings/d7", b"reading"), ("dpsense/status/d7", b"{}")]
    for p in (watcher, d8, cs, analyst, d7):
        p.close()


def test_unknown_user_and_wrong_password_are_refused(broker):
    c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="intruder")
    c.username_pw_set("d7", "wrong")
    codes = []
    c.on_connect = lambda cl, u, f, rc, p: codes.append(rc)
    c.connect(broker.host, broker.port)
    c.loop_start()
    assert _wait_for(lambda: codes, 5)
    c.loop_stop()
    assert codes[0].is_failure


def test_account_names_are_checked(broker):
    with pytest.raises(BrokerError):
        broker.add_account("d9", "analyst")
    with pytest.raises(BrokerError):
        broker.add_account("sensor-9", "device")
    with pytest.raises(BrokerError):
        broker.add_account("x", "root")


def _publish_while_subscriber_is_away(broker: Broker, count: int, client_id: str) -> Peer:
    sub = Peer(broker, "analyst", client_id=client_id, clean=False)
    sub.subscribe(topics.READINGS_ALL)
    sub.close()                                   # falls behind: offline, session kept
    d8 = Peer(broker, "d8")
    infos = [d8.c.publish(topics.READINGS % "d8", b"%d" % i, qos=1) for i in range(count)]
    for info in infos:
        info.wait_for_publish(30)
    d8.close()
    return Peer(broker, "analyst", client_id=client_id, clean=False)


def test_no_message_lost_for_a_subscriber_that_falls_behind(broker):
    """5,000 QoS 1 messages (5x Mosquitto's default queue limit) all reach a persistent
    subscriber that was offline while they were published."""
    n = 5000
    sub = _publish_while_subscriber_is_away(broker, n, "slow-analyst")
    assert _wait_for(lambda: len(sub.got) >= n, 30), "received %d of %d" % (len(sub.got), n)
    time.sleep(0.3)
    assert sorted(int(p) for _, p in sub.got) == list(range(n))
    sub.close()


def test_mosquitto_defaults_would_have_lost_messages(tmp_path):
    """The same scenario against Mosquitto's default queue limit loses messages: the test
    above can fail, and the setting it relies on matters."""
    b = Broker(tmp_path, port=free_port())
    b.add_account("analyst")
    b.add_device(8)
    b.write_config()
    conf = b.conf_path.read_text().replace("max_queued_messages 0", "max_queued_messages 1000")
    b.write_config = lambda: b.conf_path  # keep the edited file
    b.conf_path.write_text(conf)
    with b.running():
        sub = _publish_while_subscriber_is_away(b, 3000, "default-analyst")
        _wait_for(lambda: len(sub.got) >= 3000, 5)
        time.sleep(0.5)
        assert len(sub.got) < 3000
        sub.close()


def test_broker_restart_keeps_queued_messages(tmp_path):
    """Messages queued for an offline persistent session survive a clean broker restart."""
    b = Broker(tmp_path, port=free_port())
    b.add_account("analyst")
    b.add_device(8)
    with b.running():
        sub = Peer(b, "analyst", client_id="restart-analyst", clean=False)
        sub.subscribe(topics.READINGS_ALL)
        sub.close()
        d8 = Peer(b, "d8")
        for i in range(500):
            d8.c.publish(topics.READINGS % "d8", b"%d" % i, qos=1).wait_for_publish(10)
        d8.close()
    with b.running():
        sub = Peer(b, "analyst", client_id="restart-analyst", clean=False)
        assert _wait_for(lambda: len(sub.got) >= 500, 15), "received %d of 500" % len(sub.got)
        sub.close()


@pytest.mark.parametrize("argv", [["analyst"], ["correction-server", "--w-o", "5"], ["ingest", "--role", "analyst"]])
def test_a_service_the_broker_refuses_says_so_in_one_line(broker, tmp_path, argv):
    """A wrong password: the broker answers CONNACK "Not authorized"; the service stops at once
    with that reason (it used to wait 10 s and say only "no broker connection")."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, DPSENSE_BROKER_PASSWORD="wrong")
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "dpsense.cloud.cli", *argv, "--data-dir", str(tmp_path),
                        "--broker-port", str(broker.port)], capture_output=True, text=True, timeout=30, env=env)
    assert time.monotonic() - t0 < 8, r.stderr
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    user = "correction" if argv[0] == "correction-server" else "analyst"
    assert r.stderr.splitlines()[-1] == ("dpsense %s: the broker at 127.0.0.1:%d refused account %s: Not authorized"
                                         % (argv[0], broker.port, user)), r.stderr
