"""firmware/mbnode.py (the slim micro:bit node) writes exactly what Node + serial_sender write."""
import sys

from shared_protocol.fixedpoint import Affine
from shared_protocol.framing import frame, unframe
from shared_protocol.mechanism import Column, RecordMechanism
from shared_protocol.rng import XorShift32

sys.path.insert(0, "firmware")
import mbnode  # noqa: E402
from node import Node, serial_sender  # noqa: E402
from ledger import OK, Ledger  # noqa: E402


class FakeUart:
    """The micro:bit ``uart``: answers each ``?`` line with the next row, then ``.``."""

    def __init__(self, rows):
        self.rows = [",".join([str(v) for v in r]) for r in rows]
        self.out = bytearray()
        self._next = None

    def write(self, data):
        self.out += data
        if bytes(data) == b"?\n":
            line = self.rows.pop(0) if self.rows else "."
            # delivered in two pieces, as a UART does
            self._next = [bytes(line[:1], "ascii"), bytes(line[1:] + "\n", "ascii")]

    def readinto(self, buf):
        if not self._next:
            return None
        piece = self._next[0]
        n = min(len(buf), len(piece))
        buf[:n] = piece[:n]
        if n == len(piece):
            self._next.pop(0)
        else:
            self._next[0] = piece[n:]
        return n


def _reference(seed, cols, eps, centre, rows, dev, cfg_id, win, cap):
    rng = XorShift32(seed)
    mech = RecordMechanism([Column(Affine(c[0], c[1], c[2], c[3], c[4]), c[5], eps) for c in cols],
                           centre, rng)
    boot = (rng.getrandbits(16) << 16) | rng.getrandbits(16)
    out = []
    node = Node(None, mech, rng, dev, boot, cfg_id, serial_sender(out.append))
    led = Ledger(mech.epsilon_row(), cap, window_records=win)
    for r in rows:
        if led.charge() == OK:
            node.release(list(r))
    return boot, b"".join(out)


def _frames(data):
    return b"".join([ln + b"\n" for ln in bytes(data).split(b"\n") if ln.startswith(b"~")])


def _check(seed, cols, eps, centre, rows, dev=7, cfg_id=3, win=10 ** 6, cap=(10 ** 6, 1)):
    uart = FakeUart(rows)
    mbnode.run(dev, cfg_id, cols, eps, centre, win, cap, XorShift32(seed), uart)
    boot, want = _reference(seed, cols, eps, centre, rows, dev, cfg_id, win, cap)
    assert _frames(uart.out) == want
    text = bytes(uart.out)
    assert text.startswith(bytes("boot ok: board=microbit device=%d boot=%d " % (dev, boot), "ascii"))
    assert bytes("stimulus done: %d readings, %d released" % (len(rows), want.count(b"\n") // 2),
                 "ascii") in text
    assert text.count(b"?\n") == len(rows) + 1
    return text


def test_frame_matches_framing():
    for p in (b"\x00", b"\xff" * 128, bytes(range(40))):
        assert bytes(mbnode.frame(p)) == frame(p)
        assert unframe(bytes(mbnode.frame(p))) == p


def test_norm_matches_rounded_distance():
    from shared_protocol.distance import distance_q
    for v in ([0, 0], [3, 4], [1, 1], [2, 3], [10 ** 9, -10 ** 9], [7]):
        c = [0] * len(v)
        assert mbnode.norm(v, c) == distance_q(v, c)
        assert mbnode.norm(v, [1] * len(v)) == distance_q(v, [1] * len(v))


def test_two_columns_match_node_byte_for_byte():
    cols = [(1, 1, 0, -5000, 5000, 25), (3300, 65535, 0, 0, 65535, 25)]
    rows = [[i * 37 - 6000, (i * 7919) % 70000] for i in range(40)]
    _check(5, cols, (1, 2), [0, 1650], rows)


def test_clamping_and_wide_scales_match_node():
    cols = [(1, 1, 0, -10 ** 9, 10 ** 9, 10 ** 6), (2, 3, -1000, -10 ** 9, 10 ** 9, 10 ** 6),
            (1, 1, 0, -2 ** 31, 2 ** 31, 1)]
    rows = [[10 ** 9 - i, -10 ** 9 + i, 2 ** 31 - 1 - i] for i in range(12)]
    _check(11, cols, (1, 2), [0, 0, 0], rows, dev=4000000000, cfg_id=65535)


def test_no_rows_sends_nothing():
    _check(2, [(1, 1, 0, 0, 10, 5)], (1, 1), [0], [])


def test_ledger_withholds_at_the_window_cap_like_ledger_py():
    # one column at epsilon 1/4, cap 1 per window of 10 readings: 4 released, 6 withheld
    text = _check(3, [(1, 1, 0, -100, 100, 20)], (1, 4), [0], [[i] for i in range(30)],
                  win=10, cap=(1, 1))
    assert b"eps_record=1/4 " in text
    for w in range(3):
        line = ("ledger: window %d cap 1 reached (spent 1); withholding readings until window %d\n"
                'status: {"event":"window_cap","device":7,' % (w, w + 1))
        assert bytes(line, "ascii") in text
        tail = '"eps_record":"1/4","window":%d,"spent":"1","cap":"1","withheld":1,"released":%d}' % (
            w, 4 * (w + 1))
        assert bytes(tail, "ascii") in text
    assert b"stimulus done: 30 readings, 12 released" in text


def test_ledger_with_fractional_cap_and_two_columns():
    cols = [(1, 1, 0, -100, 100, 20), (1, 1, 0, -100, 100, 30)]
    _check(8, cols, (3, 10), [0, 0], [[i, -i] for i in range(25)], win=7, cap=(17, 10))
