"""Serial gateway: framed lines from a board's UART -> the broker, under the device's account.

    dpsense gateway --port /dev/ttyACM0 --device-id 7          # or a QEMU pty

Boards without a network (micro:bit, Pico over USB) write each record as one framed
line (docs/protocol.md 2). The gateway cuts the byte stream into lines
(``LineSplitter``), checks each frame (``unframe``: hex, CRC) and the record
(``wire.decode``), and publishes the payload unchanged with QoS 1: readings to
``dpsense/readings/d<N>``, corrections to ``dpsense/corrections``. It logs in to the
broker as the device itself (``d<N>``), so the broker's ACL and the ingest checks see
exactly what a networked board would send.

Lines that do not start with ``~`` are the board's console (the UART is also its
REPL): logged as ``console: ...``; a console line ``status: {...}`` (a JSON object, the
board's status message, which never carries a value) is also published to
``dpsense/status/d<N>``. A malformed line (bad CRC, odd hex, too long, not a
v1 record) is counted and logged, never fatal. Once the line has been quiet for
``idle_s`` and the broker acknowledged everything, the gateway logs
``idle: all N records acknowledged (...)``.
"""
from __future__ import annotations

import json
import os
import select
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Protocol

from cloud import topics
from shared_protocol import wire
from shared_protocol.framing import LineSplitter, unframe


class Source(Protocol):
    def read_some(self, timeout: float) -> bytes: ...

    def close(self) -> None: ...


class PtySource:
    """A pseudo-terminal (QEMU's ``-serial pty``), opened raw with ``os.open``."""

    def __init__(self, path: str) -> None:
        import tty
        self._fd = os.open(path, os.O_RDWR | os.O_NOCTTY)
        try:
            tty.setraw(self._fd)
        except Exception:
            os.close(self._fd)
            raise

    def read_some(self, timeout: float) -> bytes:
        ready, _, _ = select.select([self._fd], [], [], max(timeout, 0.0))
        if not ready:
            return b""
        data = os.read(self._fd, 4096)
        if not data:
            raise EOFError("the serial line closed")
        return data

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class SerialSource:
    """A USB/UART serial port through pyserial."""

    def __init__(self, port: str, baud: int) -> None:
        import serial
        self._ser = serial.serial_for_url(port, baudrate=baud, timeout=0) if "://" in port \
            else serial.Serial(port, baudrate=baud, timeout=0)

    def read_some(self, timeout: float) -> bytes:
        self._ser.timeout = max(timeout, 0.0)
        first = self._ser.read(1)
        if not first:
            return b""
        waiting = self._ser.in_waiting
        return first + (self._ser.read(waiting) if waiting else b"")

    def close(self) -> None:
        self._ser.close()


def open_source(port: str, baud: int = 115200) -> Source:
    if os.path.realpath(port).startswith("/dev/pts/"):
        return PtySource(port)
    return SerialSource(port, baud)


@dataclass
class GatewayStats:
    lines: int = 0
    console: int = 0
    readings: int = 0
    corrections: int = 0
    malformed: int = 0
    status: int = 0
    acked: int = 0

    @property
    def published(self) -> int:
        return self.readings + self.corrections + self.status


class Gateway:
    """Lines in, QoS 1 publishes out. ``publish(topic, payload)`` returns nothing; the
    caller reports acknowledgements with ``acked()``."""

    def __init__(self, device_id: int, publish: Callable[[str, bytes], None],
                 log: Callable[[str], None], idle_s: float = 0.5) -> None:
        self.device_user = topics.device_username(device_id)
        self.publish = publish
        self.log = log
        self.idle_s = idle_s
        self.stats = GatewayStats()
        self._splitter = LineSplitter()
        self._lock = threading.Lock()
        self._last_line = time.monotonic()
        self._idle_reported = -1

    def acked(self) -> None:
        with self._lock:
            self.stats.acked += 1

    def feed(self, data: bytes) -> None:
        for line in self._splitter.feed(data):
            self._last_line = time.monotonic()
            self.stats.lines += 1
            self.line(line)

    def line(self, line: bytes | None) -> None:
        if line is None:
            self._malformed("line longer than the 263-byte limit")
            return
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line.startswith(b"~"):
            self.stats.console += 1
            self.log("console: " + line.decode("utf-8", "replace"))
            if line.startswith(b"status: {") and line.endswith(b"}"):
                self._status(line[8:])
            return
        try:
            payload = unframe(line)
            kind, _ = wire.decode(payload)
        except wire.ProtocolError as e:
            self._malformed(str(e))
            return
        if kind == wire.KIND_READING:
            self.stats.readings += 1
            self.publish(topics.READINGS % self.device_user, payload)
        else:
            self.stats.corrections += 1
            self.publish(topics.CORRECTIONS, payload)

    def _status(self, text: bytes) -> None:
        try:
            doc = json.loads(text)
        except ValueError:
            return
        if isinstance(doc, dict):
            self.stats.status += 1
            self.publish(topics.STATUS % self.device_user, text)

    def _malformed(self, why: str) -> None:
        self.stats.malformed += 1
        self.log("gateway: malformed line %d (%s); %d malformed so far"
                 % (self.stats.lines, why, self.stats.malformed))

    def all_acked(self) -> bool:
        with self._lock:
            return self.stats.acked >= self.stats.published

    def tick(self) -> None:
        """Log ``idle: ...`` once per quiet spell in which everything was acknowledged."""
        s = self.stats
        if (s.published and s.published != self._idle_reported and self.all_acked()
                and time.monotonic() - self._last_line >= self.idle_s):
            self._idle_reported = s.published
            self.log("idle: all %d records acknowledged (%d messages published, %d malformed lines, "
                     "%d console lines)" % (s.readings, s.published, s.malformed, s.console))


def run(port: str, device_id: int, host: str, port_no: int, password: str,
        baud: int = 115200, stop: threading.Event | None = None,
        log: Callable[[str], None] | None = None, idle_exit: float | None = None) -> GatewayStats:
    """Relay until ``stop`` is set, the line closes, or ``idle_exit`` seconds without a line."""
    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion

    log = log or (lambda s: print(s, file=sys.stderr, flush=True))
    stop = stop or threading.Event()
    user = topics.device_username(device_id)
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="dpsense-gateway-" + user,
                         clean_session=True, protocol=mqtt.MQTTv311)
    client.username_pw_set(user, password)
    client.max_inflight_messages_set(100)
    client.reconnect_delay_set(0.2, 5)
    connected = threading.Event()

    def on_connect(c, userdata, flags, reason, props):
        if reason.is_failure:
            log("gateway: broker refused %s: %s" % (user, reason))
            return
        log("gateway: connected to %s:%d as %s" % (host, port_no, user))
        connected.set()

    gw = Gateway(device_id, lambda t, p: client.publish(t, p, qos=1), log)
    client.on_connect = on_connect
    client.on_publish = lambda c, userdata, mid, reason, props: gw.acked()
    client.connect(host, port_no)
    client.loop_start()
    src = None
    try:
        if not connected.wait(15):
            raise ConnectionError("no connection to the broker at %s:%d as %s" % (host, port_no, user))
        src = open_source(port, baud)
        log("gateway: reading %s for device %d" % (port, device_id))
        last = time.monotonic()
        while not stop.is_set():
            try:
                data = src.read_some(0.1)
            except (EOFError, OSError) as e:
                log("gateway: %s: %s; stopping" % (port, e))
                break
            if data:
                gw.feed(data)
                last = time.monotonic()
            gw.tick()
            if idle_exit is not None and time.monotonic() - last > idle_exit:
                break
        deadline = time.monotonic() + 10
        while not gw.all_acked() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        if src is not None:
            src.close()
        client.disconnect()
        client.loop_stop()
    s = gw.stats
    log("gateway: done: %d readings and %d corrections published, %d acknowledged, %d malformed lines, "
        "%d console lines" % (s.readings, s.corrections, s.acked, s.malformed, s.console))
    return s
