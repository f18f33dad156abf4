"""The gateway's line handling: a board's serial stream in, QoS 1 publishes out.

    gw = Gateway(7, publish, log)      # publish(topic, payload) -> message id (or None)
    gw.feed(data)                      # bytes as the UART delivers them
    gw.acked(mid)                      # the broker's PUBACK, from any thread
    port.write(gw.take_replies())      # answers to the board's polls

The stream is cut into lines (``LineSplitter``). A framed line (``~...``, docs/protocol.md
2) is checked (``unframe``: hex, CRC) and decoded (``wire.decode``), and its payload is
published unchanged: readings to ``topics.READINGS % d<N>``, corrections to
``topics.CORRECTIONS``. A poll (``!`` or ``!N``) is answered with the records the broker
has (acks.py). An event line (``#<name> ...``) is expanded into the full firmware's
console text and status message (events.py). Any other line is the board's console
(the UART is also its REPL): logged as ``console: ...``; a console line ``status: {...}``
(a JSON object, the board's status message, which never carries a value) is also
published to ``topics.STATUS % d<N>``. A line a board stops on (``config error: ...``,
``entropy error``, ``seal error``, ``stimulus error``) is logged as ``gateway: d<N> stopped:
...`` and published as the device's status ``{"event":"stopped","error":...}``. A board writes
such lines, and its status lines, again until it is heard (docs/protocol.md 2.3): the gateway
answers each one with ``!=`` and the line's CRC-16 (``heard``) and publishes a repeat only once.
A malformed line (bad CRC, odd hex, too long, not
a v1 record, a bad event) is counted and logged, never fatal. Once the line has been
quiet for ``idle_s`` and the broker acknowledged everything, ``tick`` logs
``idle: all N records acknowledged (...)``.
"""
from __future__ import annotations

import json
import struct
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from dpsense.cloud.transport import topics
from dpsense.cloud.transport.gateway.acks import Acknowledgements, poll_count
from dpsense.cloud.transport.gateway.events import expand_event, parse_event
from dpsense.protocol import seal, wire
from dpsense.protocol.framing import MAX_TEXT, LineSplitter, crc16, unframe

# The lines a board writes when it stops (firmware/app.py ``stop``); the gateway answers them.
STOP_LINES = (b"config error: ", b"entropy error: ", b"seal error: ", b"stimulus error: ")


def heard(line: bytes) -> bytes:
    """The answer to a status or stop line (no newline): ``!=`` and its CRC-16 (docs/protocol.md 2.3)."""
    return b"!=%04x\n" % crc16(line)


@dataclass
class GatewayStats:
    """Counts of one gateway run; ``acked`` and ``replies`` are the acknowledgements'."""

    acks: Acknowledgements = field(repr=False)
    lines: int = 0
    console: int = 0
    readings: int = 0
    corrections: int = 0
    malformed: int = 0
    status: int = 0
    events: int = 0
    conflicts: int = 0      # records relayed under a (boot, seq) another token already had

    @property
    def acked(self) -> int:
        """Messages the broker acknowledged."""
        return self.acks.acked

    @property
    def replies(self) -> int:
        """Records acknowledged to the board."""
        return self.acks.replies

    @property
    def published(self) -> int:
        return self.readings + self.corrections + self.status


_TOKENS_KEPT = 4096         # (boot, seq) -> token of the last readings relayed


class Gateway:
    """Lines in, QoS 1 publishes out, acknowledgements back to the board.

    ``publish(topic, payload)`` returns the message id (or None when the caller does not
    track them); the caller reports each broker acknowledgement with ``acked(mid)``, from
    any thread. The answers to the board's polls wait in ``take_replies`` until the
    caller writes them to the line."""

    def __init__(self, device_id: int, publish: Callable[[str, bytes], Any],
                 log: Callable[[str], None], idle_s: float = 0.5) -> None:
        self.device_id = device_id
        self.device_user = topics.device_username(device_id)
        self.stopped: str | None = None     # the line the board stopped on, if it did
        self._heard = bytearray()           # answers to status and stop lines
        # The last status and stop lines published: a board repeats up to two until heard.
        self._said: deque[bytes] = deque(maxlen=8)
        self.publish = publish
        self.log = log
        self.idle_s = idle_s
        self.acks = Acknowledgements()
        self.stats = GatewayStats(self.acks)
        self.boot: dict[str, Any] | None = None
        # Frames are checked against their own bound by unframe; console and status lines
        # (a board's JSON status is longer than any frame) get MAX_TEXT.
        self._splitter = LineSplitter(MAX_TEXT)
        self._last_line = time.monotonic()
        self._idle_reported = -1
        # A sealed correction record hides its token from the gateway; its clear (boot, seq)
        # names the reading relayed just before it, whose token the board's acknowledgement
        # carries. Bounded: the board keeps at most its ring's records unacknowledged.
        self._tokens: dict[tuple[int, int], bytes] = {}

    def acked(self, mid: int | None = None) -> None:
        self.acks.broker_acked(mid)

    def committed(self, payload: bytes) -> None:
        """An acknowledgement from the cloud on the device's topic (docs/protocol.md 3.1)."""
        try:
            of, device_id, boot_id, ranges = wire.decode_ack(payload)
        except wire.ProtocolError as e:
            self.log("gateway: acknowledgement ignored: %s" % e)
            return
        if topics.device_username(device_id) == self.device_user:
            self.acks.committed(of, boot_id, ranges)

    def take_replies(self) -> bytes:
        """The lines to write to the board now (answers to its polls and to its status and stop
        lines), oldest first."""
        out = self.acks.take_replies()
        if self._heard:
            out, self._heard = out + bytes(self._heard), bytearray()
        return out

    def feed(self, data: bytes) -> None:
        for line in self._splitter.feed(data):
            self._last_line = time.monotonic()
            self.stats.lines += 1
            self.line(line)

    def line(self, line: bytes | None) -> None:
        if line is None:
            self._malformed("line longer than the %d-byte limit" % MAX_TEXT)
            return
        if line.endswith(b"\r"):
            line = line[:-1]
        n = poll_count(line)
        if n is not None:
            self.acks.poll(n)
            return
        if line.startswith(b"#"):
            self._event(line)
            return
        if not line.startswith(b"~"):
            self.stats.console += 1
            self.log("console: " + line.decode("utf-8", "replace"))
            if line.startswith(b"status: {") and line.endswith(b"}"):
                self._status(line)
            elif line.startswith(STOP_LINES):
                self._stopped(line)
            return
        try:
            payload = unframe(line)
            if len(payload) == seal.SEALED_SIZE and payload[:2] == bytes((wire.VERSION, seal.KIND_SEALED)):
                self._sealed(payload)
                return
            kind, fields = wire.decode(payload)
        except wire.ProtocolError as e:
            self._malformed(str(e))
            return
        # Both records carry the reading's boot and seq, by which the cloud acknowledges them.
        if not self.acks.track_key(fields[1], fields[2], fields[3]):
            self.stats.conflicts += 1
            self.log("conflict: boot %d seq %d relayed again with another token (%s): the cloud keeps the "
                     "first record of that key and dead-letters this one; it is never acknowledged to the board"
                     % (fields[1], fields[2], bytes(fields[3]).hex()))
        if kind == wire.KIND_READING:
            self.stats.readings += 1
            mid = self.publish(topics.READINGS % self.device_user, payload)
            self.acks.track_record(mid, fields[3], kind)
            if len(self._tokens) >= _TOKENS_KEPT:
                del self._tokens[next(iter(self._tokens))]
            self._tokens[(fields[1], fields[2])] = fields[3]
        else:
            self.stats.corrections += 1
            mid = self.publish(topics.CORRECTIONS, payload)
            self.acks.track_record(mid, fields[3], kind)

    def _sealed(self, payload: bytes) -> None:
        """Relay a sealed correction record unchanged (the gateway cannot open it); its
        acknowledgement to the board goes with the token of its reading, when known."""
        _, _, _, device_id, boot_id, seq, _ = struct.unpack_from(seal.HEAD, payload, 0)
        if topics.device_username(device_id) != self.device_user:
            self._malformed("sealed record of device %d on the line of %s" % (device_id, self.device_user))
            return
        self.stats.corrections += 1
        mid = self.publish(topics.CORRECTIONS, payload)
        token = self._tokens.get((boot_id, seq))
        if token is not None:
            # Unknown (the gateway restarted between the two): the board resends both.
            self.acks.track_record(mid, token, wire.KIND_CORRECTION)

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

    def _status(self, line: bytes) -> None:
        text = line[8:]
        try:
            doc = json.loads(text)
        except ValueError:
            return
        if isinstance(doc, dict):
            self._heard += heard(line)
            if line not in self._said:      # else a repeat the board wrote before it heard the answer
                self._said.append(line)
                self._publish_status(text)

    def _stopped(self, line: bytes) -> None:
        """The board stopped (a config error, say): logged and published once, answered each time."""
        self._heard += heard(line)
        if line in self._said:
            return
        self._said.append(line)
        self.stopped = line.decode("utf-8", "replace")
        self.log("gateway: %s stopped: %s" % (self.device_user, self.stopped))
        self._publish_status(json.dumps({"event": "stopped", "device": self.device_id, "error": self.stopped},
                                        separators=(",", ":")).encode())

    def _publish_status(self, text: bytes) -> None:
        self.stats.status += 1
        self.acks.track_status(self.publish(topics.STATUS % self.device_user, text))

    def _malformed(self, why: str) -> None:
        self.stats.malformed += 1
        self.log("gateway: malformed line %d (%s); %d malformed so far"
                 % (self.stats.lines, why, self.stats.malformed))

    def all_acked(self) -> bool:
        return self.acks.all_acked(self.stats.published)

    def tick(self) -> None:
        """Log ``idle: ...`` once per quiet spell in which everything was acknowledged."""
        s = self.stats
        if (s.published and s.published != self._idle_reported and self.all_acked()
                and time.monotonic() - self._last_line >= self.idle_s):
            self._idle_reported = s.published
            self.log("idle: all %d records acknowledged (%d messages published, %d malformed lines, "
                     "%d console lines)" % (s.readings, s.published, s.malformed, s.console))
