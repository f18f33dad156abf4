"""MQTT over TLS: the device verifies the broker against its provisioned CA (DER file).

The relay terminates TLS in front of the real broker, so the device's TLS client
(MicroPython's ssl over mbedTLS) is what is tested; the certificates are made by the
openssl command for this test only.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from .helpers import column


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _pki(d: Path, host: str) -> None:
    """A CA, a server certificate for ``host`` signed by it, and an unrelated CA."""
    d.mkdir()
    for ca in ("ca", "other-ca"):
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca + ".key", "-out",
                 ca + ".pem", "-days", "2", "-subj", "/CN=hil-" + ca, cwd=d)
        _openssl("x509", "-in", ca + ".pem", "-outform", "DER", "-out", ca + ".der", cwd=d)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
             "-subj", "/CN=" + host, cwd=d)
    (d / "ext.cnf").write_text("subjectAltName=DNS:%s\nbasicConstraints=CA:FALSE\n" % host)
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf", cwd=d)


def test_tls_with_a_verified_broker_and_refusal_of_an_unknown_one(rig, tmp_path):
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make test certificates")
    host = getattr(rig, "tls_host", "localhost")       # the name the board connects to
    if host is None:
        pytest.skip("TLS on a board: --broker-host must be a host name the board resolves "
                    "(the test's certificate names it), not an IP address")
    pki = tmp_path / "pki"
    _pki(pki, host)
    relay = rig.cloud.tls_relay(pki / "server.pem", pki / "server.key")
    rig.put("ca.der", (pki / "ca.der").read_bytes())
    rig.put("other-ca.der", (pki / "other-ca.der").read_bytes())
    base = rig.config(7, columns=[column(20)], epsilon="1", centre=[0], window_records=1000,
                      window_cap="1000", period_ms=0, broker_host=host,
                      broker_port=relay.port, broker_tls=True)
    rig.start(dict(base, broker_ca="other-ca.der"), stimulus=[[i] for i in range(20)])
    rig.expect(r"mqtt: connect failed \(MQTTError TLS: ", 15)
    rig.expect(r"stimulus done: 20 readings", 15)
    rig.stop()
    assert rig.cloud.reading_count() == 0
    rig.start(dict(base, broker_ca="ca.der"), stimulus=[[i] for i in range(20)])
    rig.expect(r"boot ok: .* pending=20 ", 10)        # kept while the broker was not trusted
    rig.expect(r"mqtt: connected", 15)
    rig.cloud.wait_readings(40, 20)
    gaps = rig.cloud.gaps()
    assert sorted((g.first_seq, g.last_seq, g.missing) for g in gaps) == [(0, 19, 0), (0, 19, 0)]
