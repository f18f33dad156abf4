"""MQTT over TLS: the device verifies the broker against its provisioned CA (DER file).

The relay terminates TLS in front of the real broker, so the device's TLS client
(MicroPython's ssl over mbedTLS) is what is tested; the certificates are the lab CA and
server certificate of `dpsense broker make-ca` / `make-cert` (cloud/deploy/tls.py), the CA in
the DER form `tools/flash.py provision --broker-ca` puts on a board. A second, unrelated
lab CA stands for a broker the device must not trust.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from dpsense.cloud.deploy import tls

from .helpers import column


def _pki(d: Path, host: str) -> None:
    """A CA, a server certificate for ``host`` signed by it, and an unrelated CA."""
    tls.make_ca(d)
    tls.make_cert(d, d, [host])
    other = tls.make_ca(d / "other", name="not the broker's CA")
    (d / "other-ca.der").write_bytes(other.der.read_bytes())


def test_tls_with_a_verified_broker_and_refusal_of_an_unknown_one(rig, tmp_path):
    host = getattr(rig, "tls_host", "localhost")       # the name the board connects to
    if host is None:
        pytest.skip("TLS on a board: --broker-host must be a host name the board resolves "
                    "(the test's certificate names it), not an IP address")
    pki = tmp_path / "pki"
    _pki(pki, host)
    relay = rig.cloud.tls_relay(pki / tls.SERVER_PEM, pki / tls.SERVER_KEY)
    rig.put("ca.der", (pki / "ca.der").read_bytes())
    rig.put("other-ca.der", (pki / "other-ca.der").read_bytes())
    base = rig.config(7, columns=[column(20)], epsilon="1", centre=[0], window_records=1000,
                      window_cap="1000", period_ms=0, broker_host=host,
                      broker_port=relay.port, broker_tls=True)
    rig.start(dict(base, broker_ca="other-ca.der"), stimulus=[[i] for i in range(20)])
    # Refused, and the console says why (mbedTLS's reason after "TLS: ").
    rig.expect(r"mqtt: connect failed \(MQTTError TLS: \S", 15)
    rig.expect(r"stimulus done: 20 readings", 15)
    rig.stop()
    assert rig.cloud.reading_count() == 0
    rig.start(dict(base, broker_ca="ca.der"), stimulus=[[i] for i in range(20)])
    rig.expect(r"boot ok: .* pending=20 dropped=0 tls=verified ", 10)   # kept while not trusted
    rig.expect(r"mqtt: connected", 15)
    rig.cloud.wait_readings(40, 20)
    gaps = rig.cloud.gaps()
    assert sorted((g.first_seq, g.last_seq, g.missing) for g in gaps) == [(0, 19, 0), (0, 19, 0)]


def test_tls_without_a_ca_is_refused_unless_the_insecure_switch_is_named(rig, tmp_path):
    """broker_tls without broker_ca stops the board at its config check; the test-only
    switch broker_tls_insecure lets it connect, and the boot line and status say so."""
    host = getattr(rig, "tls_host", "localhost")
    if host is None:
        pytest.skip("TLS on a board: --broker-host must be a host name the board resolves")
    pki = tmp_path / "pki"
    _pki(pki, host)
    relay = rig.cloud.tls_relay(pki / tls.SERVER_PEM, pki / tls.SERVER_KEY)
    base = rig.config(8, columns=[column(20)], epsilon="1", centre=[0], window_records=1000,
                      window_cap="1000", period_ms=0, broker_host=host,
                      broker_port=relay.port, broker_tls=True)
    rig.start(base, stimulus=[[i] for i in range(5)])
    rig.expect(r"config error: broker_ca: required with broker_tls", 10)
    rig.stop()
    rig.start(dict(base, broker_tls_insecure=True), stimulus=[[i] for i in range(5)])
    rig.expect(r"boot ok: .* tls=insecure ", 10)
    rig.expect(r"mqtt: connected", 15)
    rig.cloud.wait_readings(5, 20)
    rig.cloud.wait(lambda: any(d.get("tls") == "insecure" for d in rig.cloud.status_events("boot")),
                   10, "a boot status with tls=insecure")
