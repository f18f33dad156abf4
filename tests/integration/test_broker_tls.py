"""MQTT over TLS end to end: the lab CA of cloud/deploy/tls.py, Mosquitto's TLS listener, the
ingest and the simulator as TLS clients, and the refusal of a broker the CA did not sign.

All on loopback: the server certificate names ``localhost`` and 127.0.0.1, the names the
clients connect to (the board's side is hil_tests/test_tls.py).
"""
from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from dpsense.cloud.deploy import tls

from dpsense.cloud.transport import topics
from dpsense.cloud.deploy.broker import Broker, free_port
from dpsense.cloud.storage import open_analyst_store
from dpsense.protocol import wire

pytestmark = pytest.mark.skipif(shutil.which("mosquitto_passwd") is None,
                                reason="Debian package 'mosquitto' is not installed")


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    tls.make_ca(d / "ca")
    tls.make_cert(d / "ca", d / "ca", ["localhost", "127.0.0.1"])
    tls.make_ca(d / "other", name="not our CA")
    return d


def test_lab_ca_files_are_private_and_the_der_matches_the_pem(pki):
    ca = tls.ca_files(pki / "ca")
    for p in (ca.pem, ca.der, ca.key, pki / "ca" / tls.SERVER_KEY, pki / "ca" / tls.SERVER_PEM):
        assert p.stat().st_mode & 0o777 == 0o600, p
    assert (pki / "ca").stat().st_mode & 0o777 == 0o700
    assert tls.der_of(ca.pem) == ca.der.read_bytes() == tls.der_of(ca.der)
    ctx = ssl.create_default_context(cafile=str(ca.pem))       # loads, and is a CA
    assert ctx.cert_store_stats()["x509_ca"] == 1


def _client(user: str, pw: str, ca: Path) -> tuple[mqtt.Client, list]:
    c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=user, protocol=mqtt.MQTTv311)
    c.username_pw_set(user, pw)
    c.tls_set(ca_certs=str(ca))
    codes: list = []
    c.on_connect = lambda cl, u, f, rc, p: codes.append(rc)
    return c, codes


def test_services_and_the_simulator_speak_tls_and_refuse_a_broker_of_another_ca(pki, tmp_path):
    data = tmp_path / "data"
    b = Broker(data, port=free_port(), tls=tls.server_files(pki / "ca"))
    analyst_pw = b.add_account("analyst")
    _, d7_pw = b.add_device(7)
    ca = tls.ca_files(pki / "ca").pem
    other = tls.ca_files(pki / "other").pem
    env = dict(os.environ, DPSENSE_BROKER_PASSWORD=analyst_pw)
    common = ["--data-dir", str(data), "--broker-host", "localhost", "--broker-port", str(b.port)]
    with b.running():
        assert "certfile %s" % (pki / "ca" / tls.SERVER_PEM) in b.conf_path.read_text()
        # A client that trusts another CA does not even send its CONNECT.
        ctx = ssl.create_default_context(cafile=str(other))
        with socket.create_connection(("localhost", b.port), 5) as raw:
            with pytest.raises(ssl.SSLCertVerificationError):
                ctx.wrap_socket(raw, server_hostname="localhost").close()
        # The ingest with the wrong CA: one line, exit 2, nothing sent.
        r = subprocess.run([sys.executable, "-m", "dpsense.cloud.cli", "ingest", "--role", "analyst",
                            "--tls-ca", str(other), *common], env=env, capture_output=True,
                           text=True, timeout=30)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert r.stderr.splitlines()[-1].startswith("dpsense ingest: cannot reach the broker at localhost:")
        assert "certificate verify failed" in r.stderr
        # A plain client on the TLS port gets no session.
        plain = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="d7", protocol=mqtt.MQTTv311)
        plain.username_pw_set("d7", d7_pw)
        plain_codes: list = []
        plain.on_connect = lambda cl, u, f, rc, p: plain_codes.append(rc)
        try:
            plain.connect("localhost", b.port)
            plain.loop_start()
            time.sleep(1.0)
            plain.loop_stop()
        except OSError:
            pass
        assert not [rc for rc in plain_codes if not rc.is_failure]
        # The ingest over TLS stores what a TLS device publishes.
        log = tmp_path / "ingest.log"
        with open(log, "wb") as f:
            ingest = subprocess.Popen([sys.executable, "-m", "dpsense.cloud.cli", "ingest", "--role",
                                       "analyst", "--tls-ca", str(ca), *common], env=env,
                                      stdout=subprocess.DEVNULL, stderr=f)
        try:
            deadline = time.monotonic() + 30
            while b"ingest: subscribed" not in log.read_bytes():
                assert ingest.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
            c, codes = _client("d7", d7_pw, ca)
            c.connect("localhost", b.port)
            c.loop_start()
            rec = wire.encode_reading(7, 1, 0, b"\x01" * 8, 0, [5, 6])
            c.publish(topics.READINGS % "d7", rec, qos=1).wait_for_publish(10)
            c.disconnect()
            c.loop_stop()
            assert not codes[0].is_failure
            # The simulator (new passwords for d1, d2, held in memory) over TLS as well.
            r = subprocess.run([sys.executable, "-m", "dpsense.cloud.cli", "simulate", "--devices", "2",
                                "--n", "300", "--wait", "broker", "--tls-ca", str(ca), *common], capture_output=True,
                               text=True, timeout=120)
            assert r.returncode == 0, r.stderr
            deadline = time.monotonic() + 30
            while True:
                with open_analyst_store("sqlite:///%s" % (data / "analyst.db")) as s:
                    n = s.count()
                if n >= 301 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert n == 301, log.read_text()
        finally:
            ingest.terminate()
            ingest.wait(15)


def test_tls_needs_its_certificate_and_a_remote_broker_needs_tls(pki, tmp_path):
    missing = tls.ServerFiles(tmp_path / "none.pem", tmp_path / "none.key")
    b = Broker(tmp_path, port=free_port(), tls=missing)
    with pytest.raises(ValueError, match="none.pem is missing"):
        b.start()
    # A client never sends a password in clear off loopback: refused before connecting.
    r = subprocess.run([sys.executable, "-m", "dpsense.cloud.cli", "ingest", "--role", "analyst",
                        "--data-dir", str(tmp_path), "--broker-host", "192.0.2.1"],
                       env=dict(os.environ, DPSENSE_BROKER_PASSWORD="x"), capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "not on loopback: give --tls-ca" in r.stderr


def test_a_plain_service_on_the_tls_port_is_told_to_give_tls_ca(pki, tmp_path):
    """Mosquitto's TLS listener drops a plain CONNECT without a word: the service says what to do
    (it said only "no answer")."""
    data = tmp_path / "data"
    b = Broker(data, port=free_port(), tls=tls.server_files(pki / "ca"))
    pw = b.add_account("analyst")
    with b.running():
        r = subprocess.run([sys.executable, "-m", "dpsense.cloud.cli", "ingest", "--role", "analyst",
                            "--data-dir", str(data), "--broker-port", str(b.port)],
                           env=dict(os.environ, DPSENSE_BROKER_PASSWORD=pw), capture_output=True, text=True,
                           timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    last = r.stderr.splitlines()[-1]
    assert last.startswith("dpsense ingest: the broker at 127.0.0.1:%d closed the connection" % b.port), last
    assert "give --tls-ca" in last
