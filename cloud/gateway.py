"""Serial gateway: framed lines from a board's UART -> the broker, under the device's account.

    dpsense gateway --port /dev/ttyACM0 --device-id 7          # or a QEMU pty

Boards without a network (micro:bit, Pico over USB) write each record as one framed
line (docs/protocol.md 2). The gateway cuts the byte stream into lines
(``LineSplitter``), checks each frame (``unframe``: hex, CRC) and the record
(``wire.decode``), and publishes the payload unchanged with QoS 1: readings to
``dpsense/readings/d<N>``, corrections to ``dpsense/corrections``. It logs in to the
broker as the device itself (``d<N>``), so the broker's ACL and the ingest checks see
exactly what a networked board would send.

Once the broker has acknowledged both messages of a record (reading and correction,
matched by their token), the acknowledgement ``!<token hex>`` is ready for the board,
which polls with the line ``!``: the gateway answers with at most ``ACKS_PER_POLL`` of
them (``N`` for a poll ``!N``), then ``!`` (docs/protocol.md 2.1). The board paces what it is sent because its
UART holds only 63 unread bytes. A board that keeps its records until acknowledged (the
micro:bit node) loses none to a reset or to a gateway that was not running, and resends
the identical bytes; storage is idempotent, so a record published twice is stored once.

Lines that do not start with ``~`` are the board's console (the UART is also its
REPL): logged as ``console: ...``; a console line ``status: {...}`` (a JSON object, the
board's status message, which never carries a value) is also published to
``dpsense/status/d<N>``. Event lines ``#<name> <fields>`` (docs/protocol.md 2.2) from
boards too small to hold their own messages are expanded here into the same console
text and status messages (``expand_event``). A malformed line (bad CRC, odd hex, too
long, not a v1 record) is counted and logged, never fatal. Once the line has been quiet
for ``idle_s`` and the broker acknowledged everything, the gateway logs
``idle: all N records acknowledged (...)``.
"""
from __future__ import annotations

import json
import os
import select
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, Protocol

from dpsense.cloud import topics
from dpsense.protocol import wire
from dpsense.protocol.framing import LineSplitter, unframe


class Source(Protocol):
    def read_some(self, timeout: float) -> bytes: ...

    def write(self, data: bytes) -> None: ...

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

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]

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

    def write(self, data: bytes) -> None:
        self._ser.write(data)

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
    events: int = 0
    replies: int = 0

    @property
    def published(self) -> int:
        return self.readings + self.corrections + self.status


def _frac(n: int, unit: int) -> str:
    """ledger.frac_text of n/unit: ``"3/10"``, or ``"2"`` for a whole number."""
    f = Fraction(n, unit)
    return str(f.numerator) if f.denominator == 1 else "%d/%d" % (f.numerator, f.denominator)


# name -> field names of an event line (docs/protocol.md 2.2); every field is an integer
# but ``boot``'s board, entropy source and version (TEXT_FIELDS).
EVENTS = {
    "boot": ("board", "entropy", "device", "boot", "row", "unit", "cap", "worst_num", "worst_den",
             "pending", "dropped", "mem_free", "version"),
    "cap": ("window", "spent", "cap", "unit", "row", "released"),
    "done": ("readings", "released", "cost_us"),
    "idle": ("released", "resent", "pending"),
}
TEXT_FIELDS = ("board", "entropy", "version")


def parse_event(line: bytes) -> dict[str, Any]:
    """The fields of an event line ``#<name> <fields>``; ValueError names what is wrong."""
    parts = line[1:].decode("ascii").split()
    if not parts or parts[0] not in EVENTS:
        raise ValueError("unknown event %r" % (parts[0] if parts else ""))
    names = EVENTS[parts[0]]
    if len(parts) - 1 != len(names):
        raise ValueError("event %s has %d fields, not %d" % (parts[0], len(parts) - 1, len(names)))
    ev: dict[str, Any] = {"event": parts[0]}
    for k, v in zip(names, parts[1:]):
        ev[k] = v if k in TEXT_FIELDS else int(v)
    if "unit" in ev and ev["unit"] <= 0:
        raise ValueError("event %s: unit must be > 0" % parts[0])
    if ev.get("worst_den", 0) < 0 or (ev.get("worst_den") == 0 and ev["worst_num"]):
        raise ValueError("event %s: worst_num/worst_den is not a fraction" % parts[0])
    return ev


def expand_event(ev: dict[str, Any], boot: dict[str, Any] | None) -> tuple[list[str], dict | None]:
    """Console lines and status message (or None) of a parsed event, in the words of the
    full firmware (app.py). ``boot``: the board's last ``boot`` event (device, boot id,
    board, entropy), which the later events of that boot do not repeat."""
    name = ev["event"]
    if name == "boot":
        er = _frac(ev["row"], ev["unit"])
        text = ("boot ok: board=%s device=%d boot=%d entropy=%s eps_record=%s pending=%d mem_free=%d"
                " version=%s" % (ev["board"], ev["device"], ev["boot"], ev["entropy"], er,
                                 ev["pending"], ev["mem_free"], ev["version"]))
        status = {"event": "boot", "device": ev["device"], "boot": ev["boot"], "board": ev["board"],
                  "entropy": ev["entropy"], "eps_record": er,
                  "cap": _frac(ev["cap"], ev["unit"]), "pending": ev["pending"],
                  "dropped": ev["dropped"], "mem_free": ev["mem_free"], "version": ev["version"]}
        if ev["worst_den"]:                       # 0/0: the board was not told
            status["eps_record_worst"] = _frac(ev["worst_num"], ev["worst_den"])
        return [text], status
    if name == "cap":
        w, unit = ev["window"], ev["unit"]
        cap, spent = _frac(ev["cap"], unit), _frac(ev["spent"], unit)
        text = ("ledger: window %d cap %s reached (spent %s); withholding readings until window %d"
                % (w, cap, spent, w + 1))
        b = boot or {}
        status = {"event": "window_cap", "device": b.get("device"), "boot": b.get("boot"),
                  "board": b.get("board"), "entropy": b.get("entropy"),
                  "eps_record": _frac(ev["row"], unit), "window": w, "spent": spent, "cap": cap,
                  "withheld": 1, "released": ev["released"]}
        return [text], status
    if name == "done":
        return ["stimulus done: %d readings, %d released; firmware cost %d us per reading"
                % (ev["readings"], ev["released"], ev["cost_us"])], None
    if ev["pending"]:
        return ["idle: %d records not acknowledged, kept for the next boot (%d resent)"
                % (ev["pending"], ev["resent"])], None
    return ["idle: all %d records acknowledged (%d resent)" % (ev["released"], ev["resent"])], None


_STATUS = object()    # message id of a status message: acknowledged, nothing to tell the board
ACKS_PER_POLL = 2     # 2 x 18 bytes + "!\n" + a stimulus row stay within the micro:bit's 63
MAX_ACKS_PER_POLL = 99    # a poll "!N" asks for up to N (a board with room for them)


class Gateway:
    """Lines in, QoS 1 publishes out, acknowledgements back to the board.

    ``publish(topic, payload)`` returns the message id (or None when the caller does not
    track them); the caller reports each broker acknowledgement with ``acked(mid)``, from
    any thread. The answers to the board's polls wait in ``take_replies`` until the
    caller writes them to the line."""

    def __init__(self, device_id: int, publish: Callable[[str, bytes], Any],
                 log: Callable[[str], None], idle_s: float = 0.5) -> None:
        self.device_user = topics.device_username(device_id)
        self.publish = publish
        self.log = log
        self.idle_s = idle_s
        self.stats = GatewayStats()
        self.boot: dict[str, Any] | None = None
        self._splitter = LineSplitter()
        self._lock = threading.Lock()
        self._last_line = time.monotonic()
        self._idle_reported = -1
        self._waiting: dict[int, Any] = {}          # message id -> (token, kind) or _STATUS
        self._early: set[int] = set()               # acknowledged before publish() returned
        self._halves: dict[bytes, set[int]] = {}    # token -> kinds acknowledged so far
        self._ready: deque[bytes] = deque()         # tokens to acknowledge at the board's next polls
        self._queued: set[bytes] = set()            # the tokens in _ready
        self._replies: deque[bytes] = deque()       # lines to write to the board now

    def acked(self, mid: int | None = None) -> None:
        with self._lock:
            self.stats.acked += 1
            if mid is None:
                return
            what = self._waiting.pop(mid, None)
            if what is None:
                self._early.add(mid)
            elif what is not _STATUS:
                self._half(*what)

    def _track(self, mid: Any, what: Any) -> None:
        if not isinstance(mid, int):
            return
        with self._lock:
            if mid in self._early:
                self._early.discard(mid)
                if what is not _STATUS:
                    self._half(*what)
            else:
                self._waiting[mid] = what

    def _half(self, token: bytes, kind: int) -> None:
        kinds = self._halves.setdefault(token, set())
        kinds.add(kind)
        if len(kinds) == 2:
            del self._halves[token]
            # A record the board resent while its acknowledgement waited is acknowledged
            # once: duplicates would crowd the few lines a poll carries.
            if token not in self._queued:
                self._queued.add(token)
                self._ready.append(token)

    def _poll(self, n: int) -> None:
        with self._lock:
            for _ in range(min(n, len(self._ready))):
                token = self._ready.popleft()
                self._queued.discard(token)
                self._replies.append(b"!" + token.hex().encode("ascii") + b"\n")
                self.stats.replies += 1
            self._replies.append(b"!\n")

    def take_replies(self) -> bytes:
        """The lines to write to the board now (answers to its polls), oldest first."""
        with self._lock:
            out = b"".join(self._replies)
            self._replies.clear()
        return out

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
        if line[:1] == b"!" and (len(line) == 1 or (len(line) <= 3 and line[1:].isdigit())):
            n = int(line[1:]) if len(line) > 1 else ACKS_PER_POLL
            self._poll(min(n, MAX_ACKS_PER_POLL))
            return
        if line.startswith(b"#"):
            self._event(line)
            return
        if not line.startswith(b"~"):
            self.stats.console += 1
            self.log("console: " + line.decode("utf-8", "replace"))
            if line.startswith(b"status: {") and line.endswith(b"}"):
                self._status(line[8:])
            return
        try:
            payload = unframe(line)
            kind, fields = wire.decode(payload)
        except wire.ProtocolError as e:
            self._malformed(str(e))
            return
        if kind == wire.KIND_READING:
            self.stats.readings += 1
            mid = self.publish(topics.READINGS % self.device_user, payload)
            self._track(mid, (fields[3], kind))
        else:
            self.stats.corrections += 1
            mid = self.publish(topics.CORRECTIONS, payload)
            self._track(mid, (fields[0], kind))

    def _event(self, line: bytes) -> None:
        try:
            ev = parse_event(line)
        except (ValueError, UnicodeDecodeError) as e:
            self._malformed("event: %s" % e)
            return
        self.stats.events += 1
        if ev["event"] == "boot":
            self.boot = ev
        texts, status = expand_event(ev, self.boot)
        for t in texts:
            self.stats.console += 1
            self.log("console: " + t)
        if status is not None:
            self._publish_status(json.dumps(status, separators=(",", ":")).encode())

    def _status(self, text: bytes) -> None:
        try:
            doc = json.loads(text)
        except ValueError:
            return
        if isinstance(doc, dict):
            self._publish_status(text)

    def _publish_status(self, text: bytes) -> None:
        self.stats.status += 1
        self._track(self.publish(topics.STATUS % self.device_user, text), _STATUS)

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
        log: Callable[[str], None] | None = None, idle_exit: float | None = None,
        keepalive: int = 60) -> GatewayStats:
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

    gw = Gateway(device_id, lambda t, p: client.publish(t, p, qos=1).mid, log)
    client.on_connect = on_connect
    client.on_publish = lambda c, userdata, mid, reason, props: gw.acked(mid)
    client.connect(host, port_no, keepalive=keepalive)
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
                data = src.read_some(0.05)
                if data:
                    gw.feed(data)
                    last = time.monotonic()
                reply = gw.take_replies()
                if reply:
                    src.write(reply)
            except (EOFError, OSError) as e:
                log("gateway: %s: %s; stopping" % (port, e))
                break
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
    log("gateway: done: %d readings and %d corrections published, %d acknowledged, %d records "
        "acknowledged to the board, %d malformed lines, %d console lines"
        % (s.readings, s.corrections, s.acked, s.replies, s.malformed, s.console))
    return s
