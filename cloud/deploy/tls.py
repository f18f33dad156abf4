"""A lab certificate authority and server certificates for the broker's TLS listener.

    ca = make_ca(Path("dpsense-data/broker/tls"))                 # ca.pem, ca.der, ca.key
    make_cert(ca, Path("dpsense-data/broker/tls"), ["broker.lan", "192.168.1.20"])

Everything is made with the ``cryptography`` package (X.509 builder, RSA 2048, SHA-256).
RSA rather than an elliptic curve because every board's mbedTLS build verifies RSA
signatures. The CA certificate is written twice: PEM for Mosquitto and paho, DER for
the boards (MicroPython's mbedTLS loads ``cafile`` only as DER, firmware/README.md).
Private keys are written 0600 (cloud/deploy/files.py) and never leave this machine: a board
gets ``ca.der`` only.

Guarantee: a client that loads ``ca.pem``/``ca.der`` and checks the host name accepts
exactly the certificates this CA signed for that name; anyone holding ``ca.key`` can
sign more, so ``ca.key`` is a secret of the operator (keep it offline once the server
certificate is made).
"""
from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from dpsense.cloud.errors import UsageError
from dpsense.cloud.deploy.files import private_dir, write_private

CA_PEM, CA_DER, CA_KEY = "ca.pem", "ca.der", "ca.key"
SERVER_PEM, SERVER_KEY = "server.pem", "server.key"
_KEY_BITS = 2048


@dataclass(frozen=True)
class CaFiles:
    pem: Path
    der: Path
    key: Path


@dataclass(frozen=True)
class ServerFiles:
    cert: Path
    key: Path


def ca_files(folder: Path) -> CaFiles:
    return CaFiles(folder / CA_PEM, folder / CA_DER, folder / CA_KEY)


def server_files(folder: Path) -> ServerFiles:
    return ServerFiles(folder / SERVER_PEM, folder / SERVER_KEY)


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=_KEY_BITS)


def _key_bytes(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def make_ca(folder: Path, name: str = "dpsense lab CA", days: int = 3650) -> CaFiles:
    """A self-signed CA (may sign server certificates only: path length 0)."""
    if days < 1:
        raise UsageError("--days must be >= 1")
    private_dir(folder)
    key = _key()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = _now()
    cert = (x509.CertificateBuilder()
            .subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, key_cert_sign=True, crl_sign=True,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    files = ca_files(folder)
    write_private(files.key, _key_bytes(key))
    write_private(files.pem, cert.public_bytes(serialization.Encoding.PEM))
    write_private(files.der, cert.public_bytes(serialization.Encoding.DER))
    return files


def _san(names: list[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for n in names:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            if not n or any(c in n for c in " /:*"):
                raise UsageError("--host %r is neither an IP address nor a host name" % n) from None
            entries.append(x509.DNSName(n))
    return x509.SubjectAlternativeName(entries)


def load_ca(folder: Path) -> tuple[x509.Certificate, rsa.RSAPrivateKey]:
    files = ca_files(folder)
    if not files.pem.is_file() or not files.key.is_file():
        raise UsageError("no lab CA in %s: make one with `dpsense broker make-ca`" % folder)
    cert = x509.load_pem_x509_certificate(files.pem.read_bytes())
    key = serialization.load_pem_private_key(files.key.read_bytes(), password=None)
    if not isinstance(key, rsa.RSAPrivateKey):
        raise UsageError("%s is not an RSA key" % files.key)
    return cert, key


def make_cert(ca_folder: Path, folder: Path, hosts: list[str], days: int = 825) -> ServerFiles:
    """A server certificate for ``hosts`` (names or IP addresses, the first is its CN)."""
    if not hosts:
        raise UsageError("give at least one --host (the name or address clients connect to)")
    if days < 1:
        raise UsageError("--days must be >= 1")
    san = _san(hosts)
    ca_cert, ca_key = load_ca(ca_folder)
    private_dir(folder)
    key = _key()
    now = _now()
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(min(now + datetime.timedelta(days=days), ca_cert.not_valid_after_utc))
            .add_extension(san, critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    files = server_files(folder)
    write_private(files.key, _key_bytes(key))
    write_private(files.cert, cert.public_bytes(serialization.Encoding.PEM))
    return files


def der_of(path: Path) -> bytes:
    """A CA certificate (PEM or DER file) as DER, what a board loads."""
    data = path.read_bytes()
    try:
        cert = (x509.load_pem_x509_certificate(data) if data.lstrip().startswith(b"-----BEGIN")
                else x509.load_der_x509_certificate(data))
    except ValueError as e:
        raise UsageError("%s: not a certificate (%s)" % (path, e)) from None
    return cert.public_bytes(serialization.Encoding.DER)
