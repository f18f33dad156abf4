"""Wire format v2: the reading record, the correction record and the cloud's acknowledgement
(docs/protocol.md).

    buf = bytearray(reading_size(2))
    n = encode_reading_into(buf, 7, 1, 42, b"\\x00" * 8, 3, [1200, -5])
    decode(bytes(buf[:n]))    # (KIND_READING, (7, 1, 42, token, 3, (1200, -5)))

All fields are little-endian integers. Reading (kind 1), 26 + 4*ncols bytes:
version u8, kind u8, ncols u8, flags u8, device_id u32, boot_id u32, seq u32,
token 8 bytes, config_id u16, ncols x value i32. Correction (kind 2), 28 bytes:
version u8, kind u8, reserved u16, device_id u32, boot_id u32, seq u32 (its reading's),
token 8 bytes, d_diff i32. Acknowledgement (kind 8, cloud to board), 12 + 8*nranges bytes:
version u8, kind u8, of u8 (1 readings, 2 corrections), nranges u8, device_id u32,
boot_id u32, then nranges x (first seq u32, last seq u32), inclusive.

Decoding checks every field and the exact length; anything malformed raises
``ProtocolError`` with the reason, never returns partial data.
"""

import struct

# The numbers live in layout.py (small enough for every board); wire re-exports them.
try:
    from .layout import (ACK_HEAD, ACK_HEAD_SIZE, ACK_MAX_RANGES, ACK_RANGE, ACK_RANGE_SIZE,
                         CORRECTION, CORRECTION_SIZE, INT32_MAX,
                         INT32_MIN, KIND_ACK, KIND_CORRECTION, KIND_READING, MAX_COLS,
                         READING_HEAD, READING_HEAD_SIZE, TOKEN_SIZE, VERSION, reading_size)
except ImportError:
    from layout import (ACK_HEAD, ACK_HEAD_SIZE, ACK_MAX_RANGES, ACK_RANGE, ACK_RANGE_SIZE,
                        CORRECTION, CORRECTION_SIZE, INT32_MAX,
                        INT32_MIN, KIND_ACK, KIND_CORRECTION, KIND_READING, MAX_COLS,
                        READING_HEAD, READING_HEAD_SIZE, TOKEN_SIZE, VERSION, reading_size)


class ProtocolError(ValueError):
    """A message or frame that is not valid v2; the text says why."""


def _check_u(name, v, bits):
    if not isinstance(v, int) or v < 0 or v >> bits:
        raise ValueError("%s must be an int in 0..2**%d-1, got %r" % (name, bits, v))


def _check_i32(name, v):
    if not isinstance(v, int) or v <= INT32_MIN or v > INT32_MAX:
        raise ValueError("%s out of int32 range (excluding -2**31): %r" % (name, v))


def _check_token(token):
    if not isinstance(token, (bytes, bytearray)) or len(token) != TOKEN_SIZE:
        raise ValueError("token must be %d bytes" % TOKEN_SIZE)


def encode_reading_into(buf, device_id, boot_id, seq, token, config_id, values):
    """Write a reading record at the start of ``buf``; return its length."""
    n = len(values)
    if n < 1 or n > MAX_COLS:
        raise ValueError("ncols must be 1..%d" % MAX_COLS)
    if device_id == 0:
        raise ValueError("device_id 0 is reserved")
    _check_u("device_id", device_id, 32)
    _check_u("boot_id", boot_id, 32)
    _check_u("seq", seq, 32)
    _check_u("config_id", config_id, 16)
    _check_token(token)
    for v in values:
        _check_i32("value", v)
    if len(buf) < reading_size(n):
        raise ValueError("buffer too small")
    struct.pack_into(READING_HEAD, buf, 0, VERSION, KIND_READING, n, 0,
                     device_id, boot_id, seq, bytes(token), config_id)
    off = READING_HEAD_SIZE
    for v in values:
        struct.pack_into("<i", buf, off, v)
        off += 4
    return off


def encode_reading(device_id, boot_id, seq, token, config_id, values):
    buf = bytearray(reading_size(len(values)))
    encode_reading_into(buf, device_id, boot_id, seq, token, config_id, values)
    return bytes(buf)


def encode_correction_into(buf, device_id, boot_id, seq, token, d_diff):
    """Write a correction record (the device, boot and seq of its reading) at the start of
    ``buf``; return its length."""
    if device_id == 0:
        raise ValueError("device_id 0 is reserved")
    _check_u("device_id", device_id, 32)
    _check_u("boot_id", boot_id, 32)
    _check_u("seq", seq, 32)
    _check_token(token)
    _check_i32("d_diff", d_diff)
    if len(buf) < CORRECTION_SIZE:
        raise ValueError("buffer too small")
    struct.pack_into(CORRECTION, buf, 0, VERSION, KIND_CORRECTION, 0, device_id, boot_id, seq,
                     bytes(token), d_diff)
    return CORRECTION_SIZE


def encode_correction(device_id, boot_id, seq, token, d_diff):
    buf = bytearray(CORRECTION_SIZE)
    encode_correction_into(buf, device_id, boot_id, seq, token, d_diff)
    return bytes(buf)


def _head(buf):
    if not isinstance(buf, (bytes, bytearray, memoryview)):
        raise ProtocolError("payload must be bytes")
    if len(buf) < 2:
        raise ProtocolError("short message: %d bytes" % len(buf))
    if buf[0] != VERSION:
        raise ProtocolError("unsupported version %d" % buf[0])
    return buf[1]


def decode_reading(buf):
    """``(device_id, boot_id, seq, token, config_id, values)`` from a reading record."""
    kind = _head(buf)
    if kind != KIND_READING:
        raise ProtocolError("not a reading record (kind %d)" % kind)
    if len(buf) < READING_HEAD_SIZE:
        raise ProtocolError("short reading: %d bytes" % len(buf))
    _, _, n, flags, device_id, boot_id, seq, token, config_id = struct.unpack_from(
        READING_HEAD, buf, 0)
    if n < 1 or n > MAX_COLS:
        raise ProtocolError("ncols %d out of range 1..%d" % (n, MAX_COLS))
    if len(buf) != reading_size(n):
        raise ProtocolError("reading with %d columns must be %d bytes, got %d"
                            % (n, reading_size(n), len(buf)))
    if flags != 0:
        raise ProtocolError("unknown flags 0x%02x" % flags)
    if device_id == 0:
        raise ProtocolError("device_id 0 is reserved")
    values = struct.unpack_from("<%di" % n, buf, READING_HEAD_SIZE)     # a tuple
    if INT32_MIN in values:
        raise ProtocolError("value -2**31 is reserved")
    return device_id, boot_id, seq, bytes(token), config_id, values


def decode_correction(buf):
    """``(device_id, boot_id, seq, token, d_diff)`` from a correction record."""
    kind = _head(buf)
    if kind != KIND_CORRECTION:
        raise ProtocolError("not a correction record (kind %d)" % kind)
    if len(buf) != CORRECTION_SIZE:
        raise ProtocolError("correction record must be %d bytes, got %d"
                            % (CORRECTION_SIZE, len(buf)))
    _, _, reserved, device_id, boot_id, seq, token, d_diff = struct.unpack_from(CORRECTION, buf, 0)
    if reserved != 0:
        raise ProtocolError("reserved field must be 0, got %d" % reserved)
    if device_id == 0:
        raise ProtocolError("device_id 0 is reserved")
    if d_diff == INT32_MIN:
        raise ProtocolError("d_diff -2**31 is reserved")
    return device_id, boot_id, seq, bytes(token), d_diff


def seq_ranges(seqs):
    """Sorted inclusive ``(first, last)`` runs of the distinct ints in ``seqs``."""
    out = []  # type: list[tuple[int, int]]
    for s in sorted(set(seqs)):
        if out and out[-1][1] + 1 == s:
            out[-1] = (out[-1][0], s)
        else:
            out.append((s, s))
    return out


def encode_acks(of, device_id, boot_id, ranges):
    """Acknowledgement messages for ``ranges`` (inclusive ``(first, last)`` seq runs of one
    boot), ``ACK_MAX_RANGES`` runs per message; ``of`` is KIND_READING or KIND_CORRECTION."""
    if of != KIND_READING and of != KIND_CORRECTION:
        raise ValueError("of must be KIND_READING or KIND_CORRECTION")
    if device_id == 0:
        raise ValueError("device_id 0 is reserved")
    _check_u("device_id", device_id, 32)
    _check_u("boot_id", boot_id, 32)
    out = []  # type: list[bytes]
    for i in range(0, len(ranges), ACK_MAX_RANGES):
        part = ranges[i:i + ACK_MAX_RANGES]
        buf = bytearray(ACK_HEAD_SIZE + ACK_RANGE_SIZE * len(part))
        struct.pack_into(ACK_HEAD, buf, 0, VERSION, KIND_ACK, of, len(part), device_id, boot_id)
        off = ACK_HEAD_SIZE
        for first, last in part:
            _check_u("seq", first, 32)
            _check_u("seq", last, 32)
            if last < first:
                raise ValueError("range %d..%d is empty" % (first, last))
            struct.pack_into(ACK_RANGE, buf, off, first, last)
            off += ACK_RANGE_SIZE
        out.append(bytes(buf))
    return out


_ACK_SUFFIX = (None, b"/r", b"/c")       # by KIND_READING, KIND_CORRECTION: topics.ACK_READINGS, ...


def decode_ack(buf, topic=None):
    """``(of, device_id, boot_id, ranges)`` from an acknowledgement message; with the ``topic``
    it arrived on (bytes or str), one of another kind than the topic's is refused: only the
    analyst's ingest may publish on a reading acknowledgement topic (cloud/deploy/broker.py)."""
    kind = _head(buf)
    if kind != KIND_ACK:
        raise ProtocolError("not an acknowledgement (kind %d)" % kind)
    if len(buf) < ACK_HEAD_SIZE:
        raise ProtocolError("short acknowledgement: %d bytes" % len(buf))
    _, _, of, n, device_id, boot_id = struct.unpack_from(ACK_HEAD, buf, 0)
    if of != KIND_READING and of != KIND_CORRECTION:
        raise ProtocolError("acknowledgement of unknown kind %d" % of)
    if topic is not None:
        if isinstance(topic, str):
            topic = topic.encode()
        if not topic.endswith(_ACK_SUFFIX[of]):
            raise ProtocolError("acknowledgement of kind %d on another kind's topic" % of)
    if n < 1 or n > ACK_MAX_RANGES:
        raise ProtocolError("nranges %d out of range 1..%d" % (n, ACK_MAX_RANGES))
    if len(buf) != ACK_HEAD_SIZE + ACK_RANGE_SIZE * n:
        raise ProtocolError("acknowledgement with %d ranges must be %d bytes, got %d"
                            % (n, ACK_HEAD_SIZE + ACK_RANGE_SIZE * n, len(buf)))
    ranges = []  # type: list[tuple[int, int]]
    for i in range(n):
        first, last = struct.unpack_from(ACK_RANGE, buf, ACK_HEAD_SIZE + ACK_RANGE_SIZE * i)
        if last < first:
            raise ProtocolError("range %d..%d is empty" % (first, last))
        ranges.append((first, last))
    return of, device_id, boot_id, ranges


def decode(buf):
    """``(kind, fields)`` for a reading or correction record."""
    kind = _head(buf)
    if kind == KIND_READING:
        return kind, decode_reading(buf)
    if kind == KIND_CORRECTION:
        return kind, decode_correction(buf)
    raise ProtocolError("unknown kind %d" % kind)
