from shared_protocol import wire
from shared_protocol.wire import ProtocolError
from tests import vectors
from tests.portable.util import raises


def _le(v, n):
    # Independent oracle: little-endian two's complement without struct.
    v &= (1 << (8 * n)) - 1
    return bytes([(v >> (8 * i)) & 0xFF for i in range(n)])


def _oracle_reading(device_id, boot_id, seq, token, config_id, values):
    out = bytes([2, 1, len(values), 0]) + _le(device_id, 4) + _le(boot_id, 4) + _le(seq, 4)
    out += token + _le(config_id, 2)
    for v in values:
        out += _le(v, 4)
    return out


def test_reading_matches_golden_bytes():
    assert wire.encode_reading(*vectors.READING_V2_FIELDS) == vectors.READING_V2
    assert _oracle_reading(*vectors.READING_V2_FIELDS) == vectors.READING_V2


def test_reading_decodes_golden_bytes():
    assert wire.decode_reading(vectors.READING_V2) == vectors.READING_V2_FIELDS
    assert wire.decode(vectors.READING_V2) == (wire.KIND_READING, vectors.READING_V2_FIELDS)


def test_correction_golden_round_trip():
    assert wire.encode_correction(*vectors.CORRECTION_V2_FIELDS) == vectors.CORRECTION_V2
    assert wire.decode_correction(vectors.CORRECTION_V2) == vectors.CORRECTION_V2_FIELDS
    assert wire.decode(vectors.CORRECTION_V2) == (wire.KIND_CORRECTION, vectors.CORRECTION_V2_FIELDS)


def test_encode_into_reuses_a_buffer():
    buf = bytearray(wire.reading_size(wire.MAX_COLS))
    n = wire.encode_reading_into(buf, *vectors.READING_V2_FIELDS)
    assert bytes(buf[:n]) == vectors.READING_V2
    cbuf = bytearray(wire.CORRECTION_SIZE)
    assert wire.encode_correction_into(cbuf, *vectors.CORRECTION_V2_FIELDS) == 28
    assert bytes(cbuf) == vectors.CORRECTION_V2


def test_extreme_fields_round_trip():
    tok = b"\xff" * 8
    vals = [wire.INT32_MIN + 1, wire.INT32_MAX] + [0] * (wire.MAX_COLS - 2)
    msg = wire.encode_reading(2 ** 32 - 1, 2 ** 32 - 1, 2 ** 32 - 1, tok, 65535, vals)
    assert msg == _oracle_reading(2 ** 32 - 1, 2 ** 32 - 1, 2 ** 32 - 1, tok, 65535, vals)
    assert wire.decode_reading(msg) == (2 ** 32 - 1, 2 ** 32 - 1, 2 ** 32 - 1, tok, 65535, tuple(vals))


def _replace(b, i, v):
    out = bytearray(b)
    out[i] = v
    return bytes(out)


def test_malformed_messages_raise_protocol_error_with_reason():
    r = vectors.READING_V2
    c = vectors.CORRECTION_V2
    cases = (
        (b"", "short"),
        (b"\x01", "short"),
        (r[:25], "short reading"),
        (r[:-1], "must be 34 bytes"),
        (r + b"\x00", "must be 34 bytes"),
        (c[:-1], "must be 28 bytes"),
        (c + b"\x00", "must be 28 bytes"),
        (_replace(r, 0, 1), "unsupported version 1"),
        (_replace(c, 0, 1), "unsupported version 1"),
        (_replace(r, 0, 3), "unsupported version 3"),
        (_replace(r, 0, 0), "unsupported version 0"),
        (_replace(r, 1, 9), "unknown kind 9"),
        (_replace(r, 2, 0), "ncols 0"),
        (_replace(r, 2, 17), "ncols 17"),
        (_replace(r, 3, 1), "flags"),
        (r[:4] + b"\x00\x00\x00\x00" + r[8:], "device_id 0"),
        (r[:30] + b"\x00\x00\x00\x80", "reserved"),
        (_replace(c, 2, 1), "reserved"),
        (c[:24] + b"\x00\x00\x00\x80", "reserved"),
        (c[:4] + b"\x00\x00\x00\x00" + c[8:], "device_id 0"),
    )
    for buf, reason in cases:
        e = raises(ProtocolError, wire.decode, buf)
        assert reason in str(e), (reason, str(e))
    raises(ProtocolError, wire.decode, "not bytes")
    raises(ProtocolError, wire.decode_reading, c)
    raises(ProtocolError, wire.decode_correction, r)


def test_every_single_byte_change_is_valid_or_a_protocol_error():
    # Never a crash, never garbage: either the mutated message is a valid v2 message
    # (which then re-encodes to the same bytes) or decoding says why it is not.
    for golden in (vectors.READING_V2, vectors.CORRECTION_V2):
        for i in range(len(golden)):
            for v in (0x00, 0x01, 0x7F, 0x80, 0xFF, golden[i] ^ 0x10):
                buf = _replace(golden, i, v)
                try:
                    kind, f = wire.decode(buf)
                except ProtocolError:
                    continue
                if kind == wire.KIND_READING:
                    assert wire.encode_reading(*f) == buf
                else:
                    assert wire.encode_correction(*f) == buf


def test_encoder_validates_fields():
    tok = vectors.TOKEN
    bad = (
        (0, 1, 1, tok, 1, [1]),
        (2 ** 32, 1, 1, tok, 1, [1]),
        (1, -1, 1, tok, 1, [1]),
        (1, 1, 2 ** 32, tok, 1, [1]),
        (1, 1, 1, tok[:7], 1, [1]),
        (1, 1, 1, tok, 65536, [1]),
        (1, 1, 1, tok, 1, []),
        (1, 1, 1, tok, 1, [0] * 17),
        (1, 1, 1, tok, 1, [wire.INT32_MIN]),
        (1, 1, 1, tok, 1, [2 ** 31]),
        (1, 1, 1, tok, 1, [1.5]),
    )
    for args in bad:
        raises(ValueError, wire.encode_reading, *args)
    raises(ValueError, wire.encode_correction, 7, 1, 0, tok, wire.INT32_MIN)
    raises(ValueError, wire.encode_correction, 7, 1, 0, b"short", 0)
    raises(ValueError, wire.encode_correction, 0, 1, 0, tok, 0)
    raises(ValueError, wire.encode_reading_into, bytearray(10), *vectors.READING_V2_FIELDS)


def test_ack_golden_round_trip():
    assert wire.encode_acks(*vectors.ACK_V2_FIELDS) == [vectors.ACK_V2]
    assert wire.decode_ack(vectors.ACK_V2) == vectors.ACK_V2_FIELDS
    assert wire.encode_acks(*vectors.ACK_CORRECTIONS_V2_FIELDS) == [vectors.ACK_CORRECTIONS_V2]
    assert wire.decode_ack(vectors.ACK_CORRECTIONS_V2) == vectors.ACK_CORRECTIONS_V2_FIELDS


def test_seq_ranges_never_cover_a_missing_seq():
    assert wire.seq_ranges([42, 40, 41, 45, 41]) == [(40, 42), (45, 45)]
    assert wire.seq_ranges([]) == []
    assert wire.seq_ranges([0, 2 ** 32 - 1]) == [(0, 0), (2 ** 32 - 1, 2 ** 32 - 1)]


def test_acks_split_at_max_ranges():
    ranges = [(2 * i, 2 * i) for i in range(wire.ACK_MAX_RANGES + 1)]
    msgs = wire.encode_acks(wire.KIND_CORRECTION, 7, 1, ranges)
    assert [len(m) for m in msgs] == [12 + 8 * wire.ACK_MAX_RANGES, 20]
    assert wire.decode_ack(msgs[0])[3] + wire.decode_ack(msgs[1])[3] == ranges


def test_malformed_acks_raise_protocol_error_with_reason():
    a = vectors.ACK_V2
    cases = (
        (a[:11], "short acknowledgement"),
        (a[:-1], "must be 28 bytes"),
        (_replace(a, 1, 1), "not an acknowledgement"),
        (_replace(a, 2, 3), "unknown kind 3"),
        (_replace(a, 3, 0), "nranges 0"),
        (_replace(a, 3, 33), "nranges 33"),
        (a[:12] + _le(43, 4) + _le(42, 4) + a[20:], "range 43..42 is empty"),
    )
    for buf, reason in cases:
        e = raises(ProtocolError, wire.decode_ack, buf)
        assert reason in str(e), (reason, str(e))
    raises(ValueError, wire.encode_acks, 3, 7, 1, [(1, 1)])
    raises(ValueError, wire.encode_acks, 1, 0, 1, [(1, 1)])
    raises(ValueError, wire.encode_acks, 1, 7, 1, [(2, 1)])
