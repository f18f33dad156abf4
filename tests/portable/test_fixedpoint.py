import struct

from shared_protocol.fixedpoint import Affine, parse_decimal
from tests.portable.util import raises


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def test_adc_to_millivolts_rounds_half_up():
    # q = floor((2*3300*raw + 65535) / (2*65535))
    col = Affine(3300, 65535, 0, 0, 65535)
    assert col.apply(0) == 0
    assert col.apply(65535) == 3300
    assert col.apply(32768) == 1650    # 1650.025 -> 1650
    assert col.apply(19859) == 1000    # 999.996 -> 1000
    assert col.apply(10) == 1          # 0.5035 -> 1


def test_exact_half_rounds_up_and_negative_floors_correctly():
    half = Affine(1, 2, 0, -100, 100)
    assert [half.apply(r) for r in (-3, -2, -1, 0, 1, 2, 3)] == [-1, -1, 0, 0, 1, 1, 2]


def test_offset_negative_slope_and_clamping():
    col = Affine(-10, 1, 500, 0, 40)
    assert col.apply(0) == 500
    assert col.apply(40) == 100
    assert col.apply(-7) == 500         # clamped to raw_min
    assert col.apply(99) == 100         # clamped to raw_max
    assert col.span_q() == 400


def test_integer_map_is_exact_where_a_float32_pipeline_is_not():
    # raw 16777225 * 0.1 = 1677722.5 exactly, which rounds half up to 1677723. A float32
    # board computing round(raw * 0.1) first rounds raw to 16777224, then gets 1677722.375.
    col = Affine(1, 10, 0, 0, 2 ** 31)
    assert col.apply(16777225) == 1677723
    assert int(f32(f32(16777225.0) * f32(0.1)) + 0.5) == 1677722


def test_rejects_bad_parameters():
    for args in ((0, 1, 0, 0, 1), (1, 0, 0, 0, 1), (1, -1, 0, 0, 1), (1, 1, 0, 5, 4),
                 (1.0, 1, 0, 0, 1), (1, 1, 0.5, 0, 1), (True, 1, 0, 0, 1)):
        raises(ValueError, Affine, *args)
    raises(ValueError, Affine(1, 1, 0, 0, 10).apply, 1.5)


def test_parse_decimal_exact():
    for text, want in (("0.1", (1, 10)), ("2", (2, 1)), ("0.25", (1, 4)), ("1.50", (3, 2)),
                       (".5", (1, 2)), ("10", (10, 1)), ("0.0001", (1, 10000))):
        assert parse_decimal(text) == want, text


def test_parse_decimal_rejects():
    for text in ("", "0", "0.0", "-1", "1e-3", "1.", ".", "a", " 1", "1_0", "+1", 0.1):
        raises(ValueError, parse_decimal, text)
