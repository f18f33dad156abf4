"""Property tests of shared_protocol on CPython, against independent oracles."""
import binascii
import math
from fractions import Fraction

from hypothesis import given, settings, strategies as st

from dpsense.protocol import framing, wire
from dpsense.protocol.distance import isqrt, norm_round
from dpsense.protocol.fixedpoint import Affine, parse_decimal
from dpsense.protocol.wire import ProtocolError

u32 = st.integers(0, 2**32 - 1)
i32 = st.integers(wire.INT32_MIN + 1, wire.INT32_MAX)
tokens = st.binary(min_size=8, max_size=8)


@given(st.integers(0, 2**200))
def test_isqrt_matches_math_isqrt(n):
    assert isqrt(n) == math.isqrt(n)


@given(st.integers(0, 2**80))
def test_norm_round_is_nearest(n):
    r = norm_round(n)
    assert abs(Fraction(r) ** 2 - n) <= min(abs(Fraction(r + d) ** 2 - n) for d in (-1, 1) if r + d >= 0)


@given(st.integers(-10**6, 10**6).filter(bool), st.integers(1, 10**6), st.integers(-10**6, 10**6),
       st.integers(-10**7, 10**7), st.integers(0, 10**7), st.integers(-10**8, 10**8))
def test_affine_is_round_half_up_of_exact_rational(num, den, offset, lo, width, raw):
    col = Affine(num, den, offset, lo, lo + width)
    clamped = min(max(raw, lo), lo + width)
    exact = Fraction(num * clamped, den)
    assert col.apply(raw) == math.floor(exact + Fraction(1, 2)) + offset


@given(st.integers(1, 10**9), st.integers(0, 9))
def test_parse_decimal_matches_fraction(mantissa, places):
    text = str(mantissa).rjust(places + 1, "0")
    text = text[:-places] + "." + text[-places:] if places else text
    num, den = parse_decimal(text)
    assert Fraction(num, den) == Fraction(text)
    assert math.gcd(num, den) == 1


@given(u32.filter(bool), u32, u32, tokens, st.integers(0, 65535), st.lists(i32, min_size=1, max_size=wire.MAX_COLS))
def test_reading_round_trip(device, boot, seq, tok, cfg, values):
    msg = wire.encode_reading(device, boot, seq, tok, cfg, values)
    assert wire.decode(msg) == (wire.KIND_READING, (device, boot, seq, tok, cfg, tuple(values)))
    assert framing.unframe(framing.frame(msg)) == msg


@given(u32.filter(bool), u32, u32, tokens, i32)
def test_correction_round_trip(device, boot, seq, tok, d):
    msg = wire.encode_correction(device, boot, seq, tok, d)
    assert wire.decode(msg) == (wire.KIND_CORRECTION, (device, boot, seq, tok, d))


@given(u32.filter(bool), u32, st.lists(u32, min_size=1, max_size=200))
def test_ack_round_trip_acknowledges_exactly_the_given_seqs(device, boot, seqs):
    of = wire.KIND_READING
    got = set()
    for msg in wire.encode_acks(of, device, boot, wire.seq_ranges(seqs)):
        o, d, b, ranges = wire.decode_ack(msg)
        assert (o, d, b) == (of, device, boot)
        for first, last in ranges:
            got.update(range(first, last + 1))
    assert got == set(seqs)


@settings(max_examples=500)
@given(st.binary(max_size=120))
def test_decode_of_arbitrary_bytes_is_valid_or_protocol_error(data):
    try:
        kind, fields = wire.decode(data)
    except ProtocolError:
        return
    again = wire.encode_reading(*fields) if kind == wire.KIND_READING else wire.encode_correction(*fields)
    assert again == data


@settings(max_examples=500)
@given(st.binary(max_size=300))
def test_unframe_of_arbitrary_bytes_never_crashes(data):
    try:
        payload = framing.unframe(data)
    except ProtocolError:
        return
    assert framing.frame(payload).rstrip(b"\n") == data.rstrip(b"\r\n").lower()


@given(st.binary(max_size=200))
def test_crc16_matches_binascii(data):
    assert framing.crc16(data) == binascii.crc_hqx(data, 0xFFFF)
