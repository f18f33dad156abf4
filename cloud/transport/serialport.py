"""Byte pipes to a board's serial line: a pseudo-terminal or a USB/UART port.

    port = open_transport("/dev/ttyACM0")      # or a pty such as QEMU's /dev/pts/3
    port.write(b"!\\n")
    data = port.read_some(0.05)                 # what arrived within 50 ms, or b""
    port.close()

``dpsense gateway`` reads a board's records through one; tools/rawrepl.py talks to a
board's REPL through one. A pty is opened raw with ``os.open`` (no pyserial needed:
that is how QEMU's ``-serial pty`` and tools/ptyboard.py are reached); anything else,
or a pyserial URL such as ``socket://host:port``, goes through pyserial. A line that
closes raises ``PortError``, as does a missing pyserial.
"""
from __future__ import annotations

import os
import select
import tty
from typing import Protocol


class PortError(OSError):
    """The serial line cannot be opened or has closed; the text says which."""


class Transport(Protocol):
    """Byte pipe to a board: what the gateway and the raw REPL need from a port."""

    def write(self, data: bytes) -> None: ...

    def read_some(self, timeout: float) -> bytes:
        """Whatever arrives within ``timeout`` seconds (at least one byte), or b""."""
        ...

    def close(self) -> None: ...


class PtyTransport:
    """A pseudo-terminal such as QEMU's ``-serial pty``, opened raw, without pyserial.

    Opening it is what makes QEMU deliver output: while no process has the pty open,
    QEMU treats the line as disconnected and the board's output is lost.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_NOCTTY)
        try:
            tty.setraw(self._fd)
        except Exception:
            os.close(self._fd)
            raise

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]

    def read_some(self, timeout: float) -> bytes:
        ready, _, _ = select.select([self._fd], [], [], max(timeout, 0.0))
        if not ready:
            return b""
        data = os.read(self._fd, 4096)
        if not data:
            # Readable with nothing to read: the other side is gone, and stays gone.
            raise PortError("%s: the serial line closed" % self.path)
        return data

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class SerialTransport:
    """A USB/UART serial port (``/dev/ttyACM0``, ``/dev/ttyUSB0``, ``COM3``) via pyserial."""

    def __init__(self, port: str, baud: int = 115200) -> None:
        try:
            import serial
        except ImportError:
            raise PortError("pyserial is needed for %s: install it (`pip install pyserial`) "
                            "or run with .venv/bin/python" % port) from None
        self.path = port
        if "://" in port:
            self._ser = serial.serial_for_url(port, baudrate=baud, timeout=0)
        else:
            self._ser = serial.Serial(port, baudrate=baud, timeout=0)

    def write(self, data: bytes) -> None:
        self._ser.write(data)
        self._ser.flush()

    def read_some(self, timeout: float) -> bytes:
        self._ser.timeout = max(timeout, 0.0)
        first = self._ser.read(1)
        if not first:
            return b""
        waiting = self._ser.in_waiting
        return first + (self._ser.read(waiting) if waiting else b"")

    def close(self) -> None:
        self._ser.close()


def open_transport(port: str, baud: int = 115200) -> Transport:
    """A pty path gets ``PtyTransport``; anything else (or a pyserial URL) pyserial."""
    if os.path.realpath(port).startswith("/dev/pts/"):
        return PtyTransport(port)
    return SerialTransport(port, baud)
