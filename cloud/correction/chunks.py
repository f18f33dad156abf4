"""Round messages in chunks that fit under the broker's packet-size limit.

    for part in split(payload):                      # sender: each part one MQTT publish
        client.publish(topic, part, qos=1)

    joiner = Reassembler()                           # receiver: one per subscription
    whole = joiner.feed(part)                        # None until the last chunk of a message arrives

A correction round names every token of its window: about 1.1 MB for 100,000 readings, more
than the broker accepts in one packet (``MAX_PACKET``, cloud/deploy/broker.py). Each chunk is a
16-byte header and at most ``CHUNK_SIZE - 16`` bytes of the message:

    offset  size  field
    0       4     magic b"dpk1"
    4       8     message id (random, the sender's; little-endian u64)
    12      2     chunk index, 0-based (u16)
    14      2     chunk count, >= 1 (u16)
    16      ...   data

A message is complete when all ``count`` chunks of its id have arrived, in any order. A
repeated chunk (QoS 1 may deliver twice) is ignored when its bytes are the same and refuses
the whole message when they differ. The receiver bounds what it holds: a message may not
announce more than ``max_bytes`` (count times the data per chunk), at most ``max_pending``
messages are incomplete at once (the oldest is dropped past that), and an incomplete message
is dropped ``timeout`` seconds after its first chunk. Every refusal raises ``ChunkError``
(the message's chunks are discarded); every drop is counted in ``dropped``.
"""
from __future__ import annotations

import os
import struct
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from dpsense.cloud.errors import RoundError
from dpsense.cloud.transport.topics import MAX_PACKET

MAGIC = b"dpk1"
_HEADER = struct.Struct("<4sQHH")
HEADER_SIZE = _HEADER.size
#: Bytes per chunk, header included: half the broker's packet limit leaves room for the topic
#: and the MQTT headers whatever the topic length.
CHUNK_SIZE = 32 * 1024
#: The largest message a receiver reassembles by default: a 1,000,000-reading window's round.
MAX_MESSAGE = 16 * 1024 * 1024
_MAX_COUNT = 0xFFFF


class ChunkError(RoundError):
    """A chunk or a chunked message that the receiver refuses; the text says why."""


def split(payload: bytes, limit: int = CHUNK_SIZE, message_id: int | None = None) -> list[bytes]:
    """``payload`` as chunks of at most ``limit`` bytes each (header included)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit <= HEADER_SIZE:
        raise ValueError("limit must be an int > %d bytes, got %r" % (HEADER_SIZE, limit))
    per = limit - HEADER_SIZE
    count = max(1, -(-len(payload) // per))
    if count > _MAX_COUNT:
        raise ValueError("a message of %d bytes needs %d chunks of %d bytes; at most %d are allowed"
                         % (len(payload), count, limit, _MAX_COUNT))
    mid = int.from_bytes(os.urandom(8), "little") if message_id is None else message_id
    return [_HEADER.pack(MAGIC, mid, i, count) + payload[i * per:(i + 1) * per] for i in range(count)]


@dataclass
class _Partial:
    count: int
    first: float
    parts: dict[int, bytes] = field(default_factory=dict)
    size: int = 0


class Reassembler:
    """Joins the chunks of one subscription into whole messages (module docstring)."""

    def __init__(self, limit: int = CHUNK_SIZE, max_bytes: int = MAX_MESSAGE, max_pending: int = 16,
                 timeout: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit <= HEADER_SIZE:
            raise ValueError("limit must be an int > %d bytes, got %r" % (HEADER_SIZE, limit))
        if not isinstance(max_bytes, int) or max_bytes < 1:
            raise ValueError("max_bytes must be an int >= 1, got %r" % (max_bytes,))
        if not isinstance(max_pending, int) or max_pending < 1:
            raise ValueError("max_pending must be an int >= 1, got %r" % (max_pending,))
        if not timeout > 0:
            raise ValueError("timeout must be > 0 seconds, got %r" % (timeout,))
        self.limit = limit
        self.max_bytes = max_bytes
        self.max_pending = max_pending
        self.timeout = timeout
        self.clock = clock
        self._open: OrderedDict[int, _Partial] = OrderedDict()
        # Ids of recently completed messages: a late duplicate of their chunks is ignored.
        self._done: OrderedDict[int, None] = OrderedDict()
        self.dropped = 0          # incomplete messages given up (timeout, too many pending)
        self.refused = 0          # messages refused (bad header, oversized, conflicting chunk)

    @property
    def pending(self) -> int:
        return len(self._open)

    def _refuse(self, mid: int | None, why: str) -> ChunkError:
        if mid is not None:
            self._open.pop(mid, None)
        self.refused += 1
        return ChunkError(why)

    def feed(self, chunk: bytes) -> bytes | None:
        """The whole message once ``chunk`` completes it, else None; ``ChunkError`` if refused."""
        now = self.clock()
        self._expire(now)
        if len(chunk) < HEADER_SIZE or chunk[:4] != MAGIC:
            raise self._refuse(None, "not a chunk of a round message (%d bytes without the %r header)"
                               % (len(chunk), MAGIC))
        if len(chunk) > self.limit:
            raise self._refuse(None, "chunk of %d bytes exceeds the %d-byte chunk limit" % (len(chunk), self.limit))
        _, mid, index, count = _HEADER.unpack_from(chunk)
        data = chunk[HEADER_SIZE:]
        if count < 1 or index >= count:
            raise self._refuse(mid, "chunk %d of %d of message %016x is out of range" % (index, count, mid))
        if count * (self.limit - HEADER_SIZE) > self.max_bytes and count > 1:
            raise self._refuse(mid, "message %016x announces %d chunks, more than the %d-byte message limit allows"
                               % (mid, count, self.max_bytes))
        if index < count - 1 and len(data) != self.limit - HEADER_SIZE:
            raise self._refuse(mid, "chunk %d of %d of message %016x has %d data bytes; all but the last "
                               "must have %d" % (index, count, mid, len(data), self.limit - HEADER_SIZE))
        if mid in self._done:
            return None
        p = self._open.get(mid)
        if p is None:
            p = _Partial(count, now)
            self._open[mid] = p
            while len(self._open) > self.max_pending:
                self._open.popitem(last=False)
                self.dropped += 1
        elif p.count != count:
            raise self._refuse(mid, "message %016x: chunk counts %d and %d disagree" % (mid, p.count, count))
        old = p.parts.get(index)
        if old is not None:
            if old != data:
                raise self._refuse(mid, "message %016x: two different chunks %d" % (mid, index))
            return None
        if p.size + len(data) > self.max_bytes:
            raise self._refuse(mid, "message %016x exceeds %d bytes" % (mid, self.max_bytes))
        p.parts[index] = data
        p.size += len(data)
        if len(p.parts) < p.count:
            return None
        del self._open[mid]
        self._done[mid] = None
        if len(self._done) > 256:
            self._done.popitem(last=False)
        return b"".join(p.parts[i] for i in range(p.count))

    def _expire(self, now: float) -> None:
        for mid in [m for m, p in self._open.items() if now - p.first > self.timeout]:
            del self._open[mid]
            self.dropped += 1
