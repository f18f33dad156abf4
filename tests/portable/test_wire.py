from shared_protocol import wire
from shared_protocol.wire import ProtocolError
from tests import vectors
from tests.portable.util import raises


def _le(v, n):
    # Independent oracle: little-endian two's complement without struct.
    v &= (1 << (8 * n)) - 1
    return bytes([(v >> (8 * i)) & 0xFF for i in range(n)])


def _oracle_reading(device_id, boot_id, seq, token, config_id, values):
    out = bytes([1, 1, len(values), 0]) + _le(device_id, 4) + _le(boot_id, 4) + _le(seq, 4)
    out += token + _le(config_id, 2)
    for v in values:
        out += _le(v, 4)
    return out


def test_reading_matches_golden_bytes():
    assert wire.encode_reading(*vectors.READING_V1_FIELDS) == vectors.READING_V1
    assert _oracle_reading(*vectors.READING_V1_FIELDS) == vectors.READING_V1


def test_reading_decodes_golden_bytes():
    assert wire.decode_reading(vectors.READING_V1) == vectors.READING_V1_FIELDS
    assert wire.decode(vectors.READING_V1) == (wire.KIND_READING, vectors.READING_V1_FIELDS)


def test_correction_golden_round_trip():
    assert wire.encode_correction(*vectors.CORRECTION_V1_FIELDS) == vectors.CORRECTION_V1
    assert wire.decode_correction(vectors.CORRECTION_V1) == vectors.CORRECTION_V1_FIELDS
    assert wire.decode(vectors.CORRECTION_V1) == (wire.KIND_CORRECTION, vectors.CORRECTION_V1_FIELDS)


def test_encode_into_reuses_a_buffer():
    buf = bytearray(wire.reading_size(wire.MAX_COLS))
    n = wire.encode_reading_into(buf, *vectors.READING_V1_FIELDS)
    assert bytes(buf[:n]) == vectors.READING_V1
    cbuf = bytearray(wire.CORRECTION_SIZE)
    assert wire.encode_correction_into(cbuf, *vectors.CORRECTION_V1_FIELDS) == 16
    assert bytes(cbuf) == vectors.CORRECTION_V1


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
    r = vectors.READING_V1
    c = vectors.CORRECTION_V1
    cases = (
        (b"", "short"),
        (b"\x01", "short"),
        (r[:25], "short reading"),
        (r[:-1], "must be 34 bytes"),
        (r + b"\x00", "must be 34 bytes"),
        (c[:-1], "must be 16 bytes"),
        (c + b"\x00", "must be 16 bytes"),
        (_replace(r, 0, 2), "unsupported version 2"),
        (_replace(r, 0, 0), "unsupported version 0"),
        (_replace(r, 1, 9), "unknown kind 9"),
        (_replace(r, 2, 0), "ncols 0"),
        (_replace(r, 2, 17), "ncols 17"),
        (_replace(r, 3, 1), "flags"),
        (r[:4] + b"\x00\x00\x00\x00" + r[8:], "device_id 0"),
        (r[:30] + b"\x00\x00\x00\x80", "reserved"),
        (_replace(c, 2, 1), "reserved"),
        (c[:12] + b"\x00\x00\x00\x80", "reserved"),
    )
    for buf, reason in cases:
        e = raises(ProtocolError, wire.decode, buf)
        assert reason in str(e), (reason, str(e))
    raises(ProtocolError, wire.decode, "not bytes")
    raises(ProtocolError, wire.decode_reading, c)
    raises(ProtocolError, wire.decode_correction, r)


def test_every_single_byte_change_is_valid_or_a_protocol_error():
    # Never a crash, never garbage: either the mutated message is a valid v1 message
    # (which then re-encodes to the same bytes) or decoding says why it is not.
    for golden in (vectors.READING_V1, vectors.CORRECTION_V1):
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
    raises(ValueError, wire.encode_correction, tok, wire.INT32_MIN)
    raises(ValueError, wire.encode_correction, b"short", 0)
    raises(ValueError, wire.encode_reading_into, bytearray(10), *vectors.READING_V1_FIELDS)
