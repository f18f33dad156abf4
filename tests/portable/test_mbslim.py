"""The micro:bit node's own slim code against the code it stands in for, class by class.

What the node cannot take from the shared source (its heap or its six nested calls do not
allow it: firmware/README.md lists which and why) is checked here on every class of input,
on both interpreters: framing (every payload length, every byte, every CRC digit), the
int32 fields (every byte and small-int boundary, the reserved -2**31, beyond int32), the
rounded norm (every rounding boundary up to 2**66, 1..16 columns), the affine map (both
clamps, rounding ties, negative scales, long ints), the noise scale, the ledger's units and
its window rule. tests/integration/test_qemu_smoke.py runs the int32 and norm tables again
on the micro:bit's own interpreter.
"""
import os
import struct
import sys

from shared_protocol import wire
from shared_protocol.distance import distance_q
from shared_protocol.fixedpoint import Affine
from shared_protocol.framing import MAX_PAYLOAD, frame
from shared_protocol.noise import DiscreteLaplace, scale_for
from shared_protocol.rng import XorShift32
from shared_protocol.ledgerfile import microbit_fresh

sys.path.insert(0, "firmware")
from ledger import Ledger  # noqa: E402
from node import _clamp_i32  # noqa: E402
from tests.portable.fwutil import scratch  # noqa: E402
from tests.portable.test_mbnode import FakeUart, _check  # noqa: E402

import mbnode  # noqa: E402
import mbstate  # noqa: E402
import mbutil  # noqa: E402


def _folder(name):
    """A fresh folder for the node's files, with a fresh ledger as provisioning writes it."""
    d = scratch(name)
    try:
        os.mkdir(d)
    except OSError:
        for n in os.listdir(d):
            os.remove(d + "/" + n)
    for n in ("la", "lb"):
        f = open(d + "/" + n, "wb")
        f.write(microbit_fresh())
        f.close()
    return d + "/"


def test_frame_is_framing_frame_for_every_length_byte_and_crc_digit():
    payloads = [bytes([(7 * i + n) & 255 for i in range(n)]) for n in range(1, MAX_PAYLOAD + 1)]
    payloads += [bytes([b]) for b in range(256)]
    digits = [[], [], [], []]
    for p in payloads:
        got = bytes(mbutil.frame(p))
        assert got == frame(p), p
        for k in range(4):
            if got[-5 + k] not in digits[k]:
                digits[k].append(got[-5 + k])
    assert [len(s) for s in digits] == [16, 16, 16, 16]     # every digit of the CRC, 0..f


# every byte boundary, the board's small-int boundary (2**30), INT32_MAX and the reserved
# -2**31, and values beyond int32 that the record clamps; each with its neighbours and sign
INT32_BITS = (0, 1, 7, 8, 15, 16, 23, 24, 29, 30, 31, 32, 40, 64)
INT32_CLASSES = []
for _b in INT32_BITS:
    for _v in (2 ** _b - 1, 2 ** _b, 2 ** _b + 1):
        INT32_CLASSES += [_v, -_v]


def test_put32_is_node_py_clamp_then_the_wire_int32():
    buf = bytearray(6)
    for v in INT32_CLASSES:
        mbutil.put32(buf, 1, v)
        assert bytes(buf[1:5]) == struct.pack("<i", _clamp_i32(v)), v
        assert buf[0] == 0 and buf[5] == 0


# j for the cases below: across the board's small-int boundary and 64 bits
NORM_ROOTS = (2, 3, 10, 1000, 2 ** 15, 2 ** 15 + 1, 2 ** 16, 2 ** 20, 2 ** 31 - 1, 2 ** 33)


def _norm_cases():
    """(offsets from the centre, rounded norm) at each rounding boundary: with r = isqrt(n),
    n = r*r is exact, r*r + r is the largest n that rounds down and r*r + r + 1 the
    smallest that rounds up (integer n has no ties). r*r + j*j with r = j*j is the first,
    with r = j*j - 1 the second."""
    out = [([0], 0), ([1], 1), ([1, 1], 1), ([1, 1, 1], 2), ([2, 1], 2)]
    for j in NORM_ROOTS:
        r = j * j
        out += [([r], r), ([r, j], r), ([r - 1, j], r)]
    return out


def test_norm_is_distance_q_at_every_rounding_boundary_and_column_count():
    centre = [(-1) ** i * (i * 1000003) for i in range(16)]
    for off, want in _norm_cases():
        for m in range(len(off), 17):
            # the offsets spread over m columns, signs alternating, around a non-zero centre
            d = [0] * m
            for i in range(len(off)):
                d[(0, m - 1, m // 2)[i]] = off[i] * (-1) ** (i + m)
            v = [centre[i] + d[i] for i in range(m)]
            got = mbutil.norm(v, centre[:m])
            assert got == distance_q(v, centre[:m]) == want, (off, m, got)


class _Zero:
    """No noise: the released values are the scaled reading itself."""

    def sample(self):
        return 0


# (num, den, offset, raw_min, raw_max) and what each adds
AFFINES = (
    (1, 1, 0, -5000, 5000),                  # identity, clamped at both ends
    (1, 2, 0, -1000, 1000),                  # halves: every odd raw is a tie, rounded half up
    (-1, 2, 7, -1000, 1000),                 # a negative scale with ties, and an offset
    (3300, 65535, 0, 0, 65535),              # an ADC code to millivolts
    (-7, 3, 100, -1000, 1000),
    (1000003, 7, -40000, -2 ** 20, 2 ** 20),  # products beyond the board's small ints
    (5, 2 ** 31 - 1, -3, -2 ** 40, 2 ** 40),
    (1, 1, 0, -2 ** 40, 2 ** 40),            # values beyond int32: clamped in the record
)
RAWS = (-2 ** 41, -2 ** 20 - 1, -65536, -5001, -1000, -3, -1, 0, 1, 2, 3, 7, 999, 1000,
        1001, 4999, 5000, 5001, 32767, 32768, 65534, 65535, 65536, 2 ** 20, 2 ** 20 + 1,
        2 ** 31, 2 ** 41)


def test_scaling_in_emit_is_affine_apply_on_every_class():
    m = len(AFFINES)
    cols = [a + (1,) for a in AFFINES]
    maps = [Affine(*a) for a in AFFINES]
    rb = bytearray(wire.reading_size(m))
    cb = bytearray(wire.CORRECTION_SIZE)
    d = _folder("mb-affine")
    ties = 0
    for r in RAWS:
        ln = bytearray(bytes(",".join([str(r)] * m), "ascii"))
        mbutil.emit(XorShift32(1), cols, [_Zero()] * m, [0] * m, ln, len(ln), rb, cb,
                    7, 1, 0, 0, d, (1, 1, 1, 1, 600))
        for n in os.listdir(d):
            os.remove(d + n)
        assert list(wire.decode_reading(bytes(rb))[5]) == [_clamp_i32(f.apply(r)) for f in maps], r
        assert wire.decode_correction(bytes(cb))[4] == 0
        ties += (r % 2 == 1 and -1000 <= r <= 1000)
    assert ties >= 4


def test_noise_scale_is_scale_for():
    made = []

    class Recorded(DiscreteLaplace):
        def __init__(self, num, den, rng):
            DiscreteLaplace.__init__(self, num, den, rng)
            made.append((self.num, self.den))

    dqs = (1, 2, 25, 1000, 2 ** 40)
    # epsilons whole, fractional, reducible against delta_q and against each other
    for eps in ((1, 1), (1, 2), (2, 1), (3, 10), (10, 3), (25, 4), (7, 7)):
        del made[:]
        cols = [(1, 1, 0, 0, 10, dq) for dq in dqs]
        mbnode.DiscreteLaplace = Recorded
        try:
            mbnode.run(7, 0, cols, eps, [0] * len(dqs), 10, (10 ** 6, 1), (0, 0),
                       (0, 0, 0, 1, 1, 10 ** 6), XorShift32(1), FakeUart([]), _folder("mb-scale"))
        finally:
            mbnode.DiscreteLaplace = DiscreteLaplace
        assert made == [scale_for(dq, eps[0], eps[1]) for dq in dqs], (eps, made)


def _reduced(n, d):
    a, b = n, d
    while b:
        a, b = b, a % b
    return n // a, d // a


def test_ledger_units_are_ledger_py_units():
    d = _folder("mb-units")
    for m in (1, 2, 3):
        for eps in ((1, 1), (1, 2), (1, 10), (3, 10), (2, 3), (7, 4)):
            row = _reduced(m * eps[0], eps[1])
            # the cap: one record, a multiple, a fraction sharing or not sharing its denominator
            for cap in (row, (2 * row[0], row[1]), (3 * row[0] + 1, 3 * row[1]), (5, 2), (100, 3)):
                if cap[0] * row[1] < row[0] * cap[1]:
                    continue
                led = mbstate.ledger(d, m, eps, cap, 600)
                ref = Ledger(row, cap, window_records=600)
                assert led[:3] == (0, 0, 0)
                un, r, c = led[3:]
                assert r * ref.unit_den == ref.row * un and c * ref.unit_den == ref.cap * un, \
                    (m, eps, cap, led)


# (columns, epsilon, cap, window_records, readings): the node releases exactly the records
# that ledger.Ledger lets through (tests/portable/test_mbnode.py _check: byte for byte)
WINDOWS = (
    (1, (1, 4), (1, 1), 10, 30),     # a cap that is a multiple of the record: 4 per window
    (2, (3, 10), (17, 10), 7, 25),   # a fractional cap that is not: 2 per window
    (1, (1, 1), (1, 1), 1, 5),       # windows of one reading, the cap one record: all released
    (3, (1, 2), (3, 2), 2, 9),       # the cap one record of three columns, windows of two
    (1, (2, 3), (5, 2), 3, 10),      # coprime denominators
    (2, (1, 3), (7, 6), 4, 17),      # readings ending inside a window
)


def test_window_rule_is_ledger_py_rule():
    for m, eps, cap, win, n in WINDOWS:
        cols = [(1, 1, 0, -100, 100, 10 + j) for j in range(m)]
        rows = [[(i * 7 + j) % 201 - 100 for j in range(m)] for i in range(n)]
        _check(win + n, cols, eps, [0] * m, rows, win=win, cap=cap)
