"""Round messages larger than one MQTT packet may be: cut into fragments, put back together.

    for part in split(payload):                  # each at most LIMIT bytes
        client.publish(topic, part, qos=1)
    whole = reassembler.feed(part)               # None until the last fragment of a message

A payload of at most ``LIMIT`` bytes is sent as it is (so peers that never fragment still
understand it). A longer one becomes fragments, each ``MAGIC``, a random 64-bit message
id, the fragment's index and the fragment count (``<4sQII``, 20 bytes), then its share of
the payload. JSON round messages start with ``{``, never with ``MAGIC``. QoS 1 on one
topic keeps the fragments of a message in order on the way through Mosquitto, but the
reassembler does not rely on it.
"""
from __future__ import annotations

import os
import struct
import time
from typing import Callable

MAGIC = b"DPSF"
_HEAD = struct.Struct("<4sQII")
#: Largest MQTT payload a round sends: 64 KiB, fragment header included.
LIMIT = 64 * 1024
#: Most fragments one message may have (about 1 GiB): a larger count is dropped rather
#: than given a slot list (mode secure's 100,000-row round needs about 3,200).
MAX_FRAGMENTS = 1 << 14


def split(payload: bytes, limit: int = LIMIT) -> list[bytes]:
    """``payload`` as one message, or as fragments of at most ``limit`` bytes each."""
    if len(payload) <= limit:
        return [payload]
    room = limit - _HEAD.size
    if room <= 0:
        raise ValueError("a fragment limit of %d bytes leaves no room for data" % limit)
    count = -(-len(payload) // room)
    if count > MAX_FRAGMENTS:
        raise ValueError("a message of %d bytes needs more than %d fragments" % (len(payload), MAX_FRAGMENTS))
    mid = int.from_bytes(os.urandom(8), "little")
    view = memoryview(payload)
    return [_HEAD.pack(MAGIC, mid, i, count) + view[i * room:(i + 1) * room] for i in range(count)]


def publish(publish_fn: Callable[..., object], topic: str, payload: bytes) -> None:
    """Publish ``payload`` on ``topic`` (QoS 1) as one message or its fragments."""
    for part in split(payload):
        publish_fn(topic, part, qos=1)


class Reassembler:
    """Collects fragments; a message unfinished after ``max_age`` seconds is dropped."""

    def __init__(self, max_age: float = 600.0, max_pending: int = 8) -> None:
        self.max_age = max_age
        self.max_pending = max_pending
        self._parts: dict[int, tuple[float, list[bytes | None], list[int]]] = {}

    def feed(self, payload: bytes) -> bytes | None:
        """The whole message once its last fragment arrived (a plain payload at once), else None."""
        if not payload.startswith(MAGIC) or len(payload) < _HEAD.size:
            return payload
        _, mid, index, count = _HEAD.unpack_from(payload)
        if count == 0 or count > MAX_FRAGMENTS or index >= count:
            return None
        entry = self._parts.get(mid)
        if entry is None:
            self._expire()
            entry = (time.monotonic(), [None] * count, [0])
            self._parts[mid] = entry
        _, parts, have = entry
        if len(parts) != count:
            return None
        if parts[index] is None:
            have[0] += 1
        parts[index] = payload[_HEAD.size:]
        if have[0] < count:
            return None
        del self._parts[mid]
        return b"".join(p for p in parts if p is not None)

    def _expire(self) -> None:
        now = time.monotonic()
        for mid in [k for k, v in self._parts.items() if now - v[0] > self.max_age]:
            del self._parts[mid]
        while len(self._parts) >= self.max_pending:
            del self._parts[min(self._parts, key=lambda k: self._parts[k][0])]
