"""The generated Mosquitto configuration: ACLs per role, and no loss for a slow subscriber."""
from __future__ import annotations

import shutil
import threading
import time

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from dpsense.cloud.transport import topics
from dpsense.cloud.deploy.broker import Broker, BrokerError, free_port

pytestmark = pytest.mark.skipif(shutil.which("mosquitto_passwd") is None,
                                reason="Debian package 'mosquitto' is not installed")


# The broker keeps no password in clear: the tests hold what it returned, per broker port.
PASSWORDS: dict[tuple[int, str], str] = {}


def _accounts(b: Broker, roles=(), devices=()) -> Broker:
    for role in roles:
        pw = b.add_account(role)
        PASSWORDS[(b.port, role)] = pw
        if role in ("analyst", "correction"):
            PASSWORDS[(b.port, role + "-ingest")] = pw
    for d in devices:
        name, pw = b.add_device(d)
        PASSWORDS[(b.port, name)] = pw
    return b


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = _accounts(Broker(tmp_path_factory.mktemp("broker"), port=free_port()),
                  ("analyst", "correction", "curator", "alerts"), (7, 8))
    PASSWORDS[(b.port, "ops")] = b.add_account("ops", "alerts")
    with b.running():
        yield b


class Peer:
    """A paho client that records what it receives and which publishes the broker acknowledged."""

    def __init__(self, broker: Broker, user: str, client_id: str | None = None, clean: bool = True,
                 password: str | None = None):
        self.got: list[tuple[str, bytes]] = []
        self.granted: list[int] = []
        self.subscribed = threading.Event()
        self.c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id or "t-" + user,
                             clean_session=clean, protocol=mqtt.MQTTv311)
        self.c.username_pw_set(user, password or PASSWORDS[(broker.port, user)])
        self.disconnects: list[object] = []
        self.c.on_disconnect = lambda c, u, flags, reason, props: self.disconnects.append(reason)
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
    # "ops", a second account of the alerts role (the fixture's): a connection of the watcher's
    # own account would take over its session, since the client id is the account name.
    for topic in (topics.ALERTS % "hall-a", topics.CORRECTIONS, topics.READINGS % "ops", topics.STATUS % "ops"):
        spoof = Peer(broker, "ops")
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
    b = _accounts(Broker(tmp_path, port=free_port()), ("analyst",), (8,))
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
    b = _accounts(Broker(tmp_path, port=free_port()), ("analyst",), (8,))
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
def test_a_service_the_broker_refuses_says_so_in_one_line(broker, tmp_path, argv):  # noqa: D103
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
    user = {"correction-server": "correction", "analyst": "analyst", "ingest": "analyst-ingest"}[argv[0]]
    assert r.stderr.splitlines()[-1] == ("dpsense %s: the broker at 127.0.0.1:%d refused account %s: Not authorized"
                                         % (argv[0], broker.port, user)), r.stderr


# -- access: what every account is denied (issue 15, "must be true") --------------------------

@pytest.mark.parametrize("taken", ["analyst-ingest", "dpsense-ingest-analyst", "analyst",
                                   "dpsense-analyst", "correction", "correction-ingest",
                                   "dpsense-correction", "dpsense-ingest-correction"])
def test_a_device_cannot_take_a_services_client_id(broker, taken):
    """The broker makes every connection's client id its user name: a device that sends the
    ingest's (or the analyst's, or the correction server's) client id gets its own session,
    and the service's connection and persistent session stay as they were."""
    service = "analyst-ingest" if "analyst" in taken else "correction-ingest"
    topic = topics.READINGS_ALL if service == "analyst-ingest" else topics.CORRECTIONS
    ingest = Peer(broker, service, client_id=taken, clean=False)
    ingest.subscribe(topic)
    thief = Peer(broker, "d7", client_id=taken)
    send = topics.READINGS % "d7" if service == "analyst-ingest" else topics.CORRECTIONS
    thief.c.publish(send, b"after the takeover attempt", qos=1).wait_for_publish(5)
    assert _wait_for(lambda: ingest.got, 5), "the service stopped receiving"
    time.sleep(0.3)
    assert ingest.disconnects == [] and ingest.c.is_connected()
    assert ingest.got == [(send, b"after the takeover attempt")]
    log = broker.log_path.read_text(errors="replace")
    assert "%s already connected" % service not in log
    assert "%s already connected" % taken not in log
    thief.close()
    ingest.c.unsubscribe(topic)
    ingest.close()


def test_a_device_reads_nothing_but_its_own_acknowledgements(broker):
    """d7 subscribes to everything; of all the traffic below it receives only dpsense/ack/d7/r."""
    d7 = Peer(broker, "d7")
    for f in ("#", topics.READINGS_ALL, topics.CORRECTIONS, topics.STATUS_ALL, topics.ACK_ALL,
              topics.ACK % "d8", topics.ROUND_TO_CS, topics.ROUND_TO_ANALYST, topics.ACK % "d7",
              topics.ACK_READINGS % "d7"):
        d7.subscribe(f)
    ingest = Peer(broker, "analyst-ingest")
    d8 = Peer(broker, "d8")
    cs = Peer(broker, "correction")
    analyst = Peer(broker, "analyst")
    sent = [(d8, topics.READINGS % "d8"), (d8, topics.CORRECTIONS), (d8, topics.STATUS % "d8"),
            (analyst, topics.ROUND_TO_CS), (cs, topics.ROUND_TO_ANALYST),
            (ingest, topics.ACK_READINGS % "d8"), (ingest, topics.ACK_READINGS % "d7")]
    for peer, topic in sent:
        peer.c.publish(topic, b"x", qos=1).wait_for_publish(5)
    assert _wait_for(lambda: d7.got, 5)
    time.sleep(0.5)
    assert d7.got == [(topics.ACK_READINGS % "d7", b"x")]
    for p in (d7, ingest, d8, cs, analyst):
        p.close()


def _v5_publisher(broker: Broker, user: str) -> tuple[mqtt.Client, list[tuple[int, int]]]:
    """An MQTT v5 client of ``user``: the broker's PUBACK says why it refused a publish."""
    acks: list[tuple[int, int]] = []
    c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=user, protocol=mqtt.MQTTv5)
    c.username_pw_set(user, PASSWORDS[(broker.port, user)])
    c.on_publish = lambda cl, u, mid, reason, props: acks.append((mid, reason.value))
    c.connect(broker.host, broker.port)
    c.loop_start()
    assert _wait_for(c.is_connected, 5)
    return c, acks


def test_each_ingest_may_acknowledge_only_its_own_kind_of_record(broker):
    """The analyst's ingest may publish reading acknowledgements only, the correction server's
    ingest correction acknowledgements only: the other kind's topic is refused (PUBACK 0x87, Not
    authorized) and nothing reaches the device, so neither can release the other's records."""
    d7 = Peer(broker, "d7")
    assert d7.subscribe(topics.ACK % "d7") == [1]
    expect = {("analyst-ingest", topics.ACK_READINGS % "d7"): 0, ("analyst-ingest", topics.ACK_CORRECTIONS % "d7"): 0x87,
              ("correction-ingest", topics.ACK_CORRECTIONS % "d7"): 0,
              ("correction-ingest", topics.ACK_READINGS % "d7"): 0x87}
    got = {}
    for (user, topic), code in expect.items():
        c, acks = _v5_publisher(broker, user)
        mid = c.publish(topic, user.encode(), qos=1).mid
        assert _wait_for(lambda: acks, 5), (user, topic)
        got[(user, topic)] = dict(acks)[mid]
        c.disconnect()
        c.loop_stop()
    assert got == expect
    assert _wait_for(lambda: len(d7.got) >= 2, 5)
    time.sleep(0.3)
    assert sorted(d7.got) == sorted([(topics.ACK_CORRECTIONS % "d7", b"correction-ingest"),
                                     (topics.ACK_READINGS % "d7", b"analyst-ingest")])
    d7.close()


def test_anonymous_is_refused(broker):
    c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="anonymous")
    codes = []
    c.on_connect = lambda cl, u, f, rc, p: codes.append(rc)
    c.connect(broker.host, broker.port)
    c.loop_start()
    assert _wait_for(lambda: codes, 5)
    c.loop_stop()
    assert codes[0].is_failure and "authori" in str(codes[0]).lower()


def test_no_password_is_kept_in_clear_and_every_file_is_private(broker):
    names = {p.name for p in broker.dir.rglob("*")}
    assert "credentials" not in names
    text = "\n".join(p.read_text(errors="replace") for p in broker.dir.rglob("*")
                     if p.is_file() and p.stat().st_size < 10 ** 6)
    for (port, user), pw in PASSWORDS.items():
        if port == broker.port:
            assert pw not in text, "the password of %s is in the broker's files" % user
    for line in (broker.dir / "passwd").read_text().splitlines():
        assert line.split(":", 1)[1].startswith("$7$"), line       # PBKDF2-SHA512 hashes
    for p in [broker.dir, *broker.dir.rglob("*")]:
        assert p.stat().st_mode & 0o077 == 0, "%s is %o" % (p, p.stat().st_mode)


def test_add_account_writes_the_password_once_where_asked(tmp_path):
    """`dpsense broker add-account --password-file` writes a 0600 file (umask 022 or not);
    without it the password is printed once; the broker's folder never holds it."""
    import os
    import subprocess
    import sys
    pw_file = tmp_path / "analyst.pw"
    r = subprocess.run([sys.executable, "-m", "dpsense.cloud.cli", "broker", "add-account", "analyst",
                        "--data-dir", str(tmp_path / "data"), "--password-file", str(pw_file)],
                       capture_output=True, text=True, timeout=30, umask=0o022)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "" and "written to %s" % pw_file in r.stderr
    assert pw_file.stat().st_mode & 0o777 == 0o600
    pw = pw_file.read_text().strip()
    r = subprocess.run([sys.executable, "-m", "dpsense.cloud.cli", "broker", "add-device", "7",
                        "--data-dir", str(tmp_path / "data")],
                       capture_output=True, text=True, timeout=30)
    name, pw7 = r.stdout.split()
    assert name == "d7" and len(pw7) >= 20
    found = [p for p in (tmp_path / "data").rglob("*") if p.is_file()
             and (pw.encode() in p.read_bytes() or pw7.encode() in p.read_bytes())]
    assert found == []
    os.chmod(pw_file, 0o644)             # a secret others can read is refused, in one line
    r = subprocess.run([sys.executable, "-m", "dpsense.cloud.cli", "ingest", "--role", "analyst",
                        "--data-dir", str(tmp_path / "data"), "--password-file", str(pw_file)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "readable by others (mode 0644)" in r.stderr


def test_a_plain_listener_stays_on_loopback(tmp_path):
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "dpsense.cloud.cli", "broker", "run", "--data-dir",
                        str(tmp_path), "--broker-host", "0.0.0.0", "--broker-port", str(free_port())],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "plain-text listener on 0.0.0.0" in r.stderr and "--tls" in r.stderr


# -- supervision ----------------------------------------------------------------------------

def test_broker_run_exits_when_its_mosquitto_is_killed(tmp_path):
    """kill -9 of the Mosquitto child: `dpsense broker run` says so in one line and exits 2
    within about a second (it polls twice a second)."""
    import os
    import re
    import signal
    import subprocess
    import sys
    port = free_port()
    p = subprocess.Popen([sys.executable, "-m", "dpsense.cloud.cli", "broker", "run", "--data-dir",
                          str(tmp_path), "--broker-port", str(port)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stderr.readline()
        m = re.search(r"mosquitto \(pid (\d+)\)", line)
        assert m, line
        os.kill(int(m.group(1)), signal.SIGKILL)
        t0 = time.monotonic()
        rc = p.wait(10)
        took = time.monotonic() - t0
        err = p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stdout.close()
        p.stderr.close()
    assert rc == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert re.match(r"dpsense broker: mosquitto \(pid %s\) was killed by SIGKILL \(log: " % m.group(1), err), err
    assert took < 3.0


def test_the_broker_refuses_a_packet_over_its_limit_and_passes_a_chunked_round(broker):
    """max_packet_size is MAX_PACKET (64 KiB): a 70,000-byte publish is dropped with its
    connection; a 1.1 MB round message in chunks (cloud/correction/chunks.py) arrives whole."""
    import os

    from dpsense.cloud.correction import chunks
    assert "max_packet_size %d" % chunks.MAX_PACKET in broker.conf_path.read_text()
    cs = Peer(broker, "correction")
    cs.subscribe(topics.ROUND_TO_CS)
    analyst = Peer(broker, "analyst")
    info = analyst.c.publish(topics.ROUND_TO_CS, os.urandom(70_000), qos=1)
    try:
        info.wait_for_publish(5)
    except RuntimeError:
        pass        # the broker closed the connection
    assert _wait_for(lambda: analyst.disconnects, 5)
    analyst.close()
    analyst = Peer(broker, "analyst", client_id="t-analyst-2")
    payload = os.urandom(1_100_000)
    for part in chunks.split(payload):
        analyst.c.publish(topics.ROUND_TO_CS, part, qos=1).wait_for_publish(5)
    joiner = chunks.Reassembler()
    assert _wait_for(lambda: len(cs.got) >= len(chunks.split(payload)))
    whole = [w for w in (joiner.feed(p) for _, p in cs.got) if w is not None]
    assert whole == [payload] and all(len(p) <= chunks.CHUNK_SIZE for _, p in cs.got)
    analyst.close()
    cs.close()


def test_a_killed_broker_run_takes_its_mosquitto_with_it(tmp_path):
    """kill -9 of `dpsense broker run` itself: its Mosquitto ends too (the kernel's parent-death
    signal), so the port is free for the next `broker run` within seconds."""
    import os
    import re
    import signal
    import subprocess
    import sys
    port = free_port()
    p = subprocess.Popen([sys.executable, "-m", "dpsense.cloud.cli", "broker", "run", "--data-dir",
                          str(tmp_path), "--broker-port", str(port)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        m = re.search(r"mosquitto \(pid (\d+)\)", p.stderr.readline())
        assert m
        mosquitto = int(m.group(1))
        p.kill()
        p.wait(10)
        deadline = time.monotonic() + 10
        while os.path.exists("/proc/%d" % mosquitto) and b"zombie" not in _state(mosquitto):
            assert time.monotonic() < deadline, "mosquitto %d outlived its killed parent" % mosquitto
            time.sleep(0.05)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stderr.close()
    with Broker(tmp_path, port=port).running():       # the port is free again
        pass


def _state(pid: int) -> bytes:
    try:
        with open("/proc/%d/status" % pid, "rb") as f:
            return f.read().lower()
    except OSError:
        return b"zombie"
