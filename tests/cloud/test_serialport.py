"""cloud/transport/serialport.py: the byte pipe the gateway and the raw REPL share, over a real pty."""
from __future__ import annotations

import os
import sys

import pytest

from dpsense.cloud.transport.serialport import PortError, PtyTransport, SerialTransport, open_transport


@pytest.fixture
def pty():
    master, slave = os.openpty()
    path = os.ttyname(slave)
    os.close(slave)
    yield master, path
    try:
        os.close(master)
    except OSError:
        pass


def test_bytes_cross_a_pty_both_ways_and_nothing_is_nothing(pty):
    master, path = pty
    port = open_transport(path)
    assert isinstance(port, PtyTransport)
    try:
        assert port.read_some(0.01) == b""
        os.write(master, b"~0102\n!\n")
        got = b""
        while len(got) < 8:
            got += port.read_some(1.0)
        assert got == b"~0102\n!\n"                  # raw mode: no echo, no \r added
        port.write(b"!0123456789abcdef\n")
        assert os.read(master, 100) == b"!0123456789abcdef\n"
    finally:
        port.close()
        port.close()                                  # twice is harmless


def test_a_closed_line_is_an_oserror_not_an_endless_empty_read(pty):
    master, path = pty
    port = PtyTransport(path)
    os.close(master)
    try:
        with pytest.raises(OSError):
            port.read_some(1.0)
    finally:
        port.close()


def test_without_pyserial_a_serial_port_is_one_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "serial", None)
    with pytest.raises(PortError, match="pyserial is needed for /dev/ttyACM9"):
        SerialTransport("/dev/ttyACM9")
