"""firmware/mbnode.py (the slim micro:bit node) writes exactly what Node + serial_sender write."""
import os
import sys

from shared_protocol import __version__
from shared_protocol.fixedpoint import Affine
from shared_protocol.mechanism import Column, RecordMechanism
from shared_protocol.rng import XorShift32
from shared_protocol.ledgerfile import microbit_fresh
from shared_protocol.framing import frame

sys.path.insert(0, "firmware")
import mbnode  # noqa: E402
from node import Node, serial_sender  # noqa: E402
from ledger import OK, Ledger  # noqa: E402
from tests.portable.fwutil import scratch  # noqa: E402

import mbio  # noqa: E402
import mbrng  # noqa: E402
from tests.portable.util import raises  # noqa: E402
import mbstate  # noqa: E402

mbio.POLL = mbio.PAUSE = 5      # ms: keeps the waits for a silent gateway short here


class PowerCut(Exception):
    pass


class FakeUart:
    """The micro:bit ``uart`` with the host on the other side: answers each ``?`` line
    with the next row, then ``.``; as the gateway, answers each poll ``!`` with up to two
    ``!<token>`` lines of the records it has seen, then ``!`` (``ack``: always;
    ``ack_after``: only once that many records were resent, silent before; ``cut``: raise
    PowerCut when asked for row ``cut``)."""

    def __init__(self, rows, ack=True, ack_after=None, cut=None):
        self.rows = [",".join([str(v) for v in r]) for r in rows]
        self.out = bytearray()
        self._next = []
        self.ack = ack
        self.ack_after = ack_after
        self.cut = cut
        self.asked = 0
        self.records = []     # (reading frame, correction frame) as written, resends included
        self._line = bytearray()
        self._reading = None
        self._ready = []      # acknowledgements the gateway holds for the next poll
        self.polls = 0

    def write(self, data):
        self.out += data
        for b in bytes(data):
            if b != 10:
                self._line.append(b)
                continue
            ln = bytes(self._line)
            self._line = bytearray()
            if ln == b"?":
                if self.cut is not None and self.asked == self.cut:
                    raise PowerCut()
                self.asked += 1
                line = self.rows.pop(0) if self.rows else "."
                # delivered in two pieces, as a UART does
                self._next += [bytes(line[:1], "ascii"), bytes(line[1:] + "\n", "ascii")]
            elif ln == b"!":
                self.polls += 1
                if self.ack or (self.ack_after is not None and self.resent() >= self.ack_after):
                    self._next += self._ready[:2] + [b"!\n"]
                    del self._ready[:2]
            elif ln.startswith(b"~") and len(ln) == 61:        # a correction record: 28 bytes
                self.records.append((self._reading, ln))
                self._ready.append(b"!" + ln[33:49] + b"\n")
            elif ln.startswith(b"~"):
                self._reading = ln

    def resent(self):
        seen = {}
        for r in self.records:
            seen[r] = seen.get(r, 0) + 1
        return sum([k - 1 for k in seen.values()])

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


def _folder(name, provisioned=True):
    """A fresh folder for the node's files (its flash), the prefix ``d``: with a fresh
    ledger as provisioning writes it, unless ``provisioned`` is False (empty)."""
    d = scratch(name)
    try:
        os.mkdir(d)
    except OSError:
        for n in os.listdir(d):
            os.remove(d + "/" + n)
    if provisioned:
        for n in ("la", "lb"):
            f = open(d + "/" + n, "wb")
            f.write(microbit_fresh())
            f.close()
    return d + "/"


def _events(text, name):
    """The integer fields of each ``#name`` event line the node wrote."""
    out = []
    for ln in bytes(text).split(b"\n"):
        parts = ln.split()
        if parts and parts[0] == b"#" + name:
            out.append([int(x) for x in parts[1:] if x.isdigit() or x[:1] == b"-"])
    return out


def _boot_fields(text):
    """The fields of the node's ``#boot`` event line (the gateway's EVENTS["boot"], 13)."""
    line = bytes(text).split(b"\n")[0].split()
    assert line[0] == b"#boot" and len(line) == 14, line
    return line[1:]


def _kept(d):
    return sorted([n for n in os.listdir(d) if len(n) == 10])


def _run(d, rng, uart, cols, eps, win, cap, dev=7, cfg_id=0, centre=None):
    """Start the node as a board does: its state from mbstate (the check's boot), then run."""
    mbnode.run(dev, cfg_id, cols, eps, centre or [0] * len(cols), win, cap, (0, 0),
               mbstate.ledger(d, len(cols), eps, cap, win), rng, uart, d)


def _check(seed, cols, eps, centre, rows, dev=7, cfg_id=3, win=10 ** 6, cap=(10 ** 6, 1)):
    uart = FakeUart(rows)
    d = _folder("mb-check")
    mbnode.run(dev, cfg_id, cols, eps, centre, win, cap, (0, 0), mbstate.ledger(d, len(cols), eps, cap, win),
               XorShift32(seed), uart, d)
    assert _kept(d) == []
    boot, want = _reference(seed, cols, eps, centre, rows, dev, cfg_id, win, cap)
    assert _frames(uart.out) == want
    text = bytes(uart.out)
    released = want.count(b"\n") // 2
    assert text.startswith(bytes("#boot microbit prng_no_dp %d %d " % (dev, boot), "ascii"))
    assert _boot_fields(text)[-1] == bytes(__version__, "ascii")
    assert [e[:2] for e in _events(text, b"done")] == [[len(rows), released]]
    assert text.count(b"?\n") == len(rows) + 1
    assert _events(text, b"idle") == [[released, 0, 0]]            # all acknowledged, 0 resent
    return text


def test_boot_event_ends_with_the_project_version():
    # the version is shared_protocol's, with no space in it (the gateway splits on spaces)
    text = _check(6, [(1, 1, 0, -10, 10, 3)], (1, 1), [0], [[1]])
    assert _boot_fields(text)[-1] == bytes(__version__, "ascii")
    assert len(__version__.split()) == 1


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


def test_ledger_withholds_at_the_window_cap_and_says_so():
    # one column at epsilon 1/4, cap 1 per window of 10 readings: 4 released, 6 withheld
    text = _check(3, [(1, 1, 0, -100, 100, 20)], (1, 4), [0], [[i] for i in range(30)],
                  win=10, cap=(1, 1))
    # 1/4 per record, cap 1 = 4/4; none kept, none dropped
    boot = _events(text, b"boot")[0]
    assert boot[2:9] == [1, 4, 4, 0, 0, 0, 0]        # worst not given: 0/0
    # window, spent, cap, unit, epsilon per record, released so far (in quarters)
    assert _events(text, b"cap") == [[w, 4, 4, 4, 1, 4 * (w + 1)] for w in range(3)]
    assert _events(text, b"done")[0][:2] == [30, 12]


COLS = [(1, 1, 0, -5000, 5000, 25), (1, 1, 0, -5000, 5000, 25)]


def test_unacknowledged_records_wait_on_flash_and_are_resent_identical():
    # no acknowledgement until the node has resent: it stops asking at KEEP waiting records,
    # writes them again after WAIT ms of silence, then goes on; every record is kept until acked
    rows = [[i, -i] for i in range(30)]
    d = _folder("mb-resend")
    uart = FakeUart(rows, ack=False, ack_after=1)
    _run(d, XorShift32(4), uart, COLS, (1, 2), 10 ** 6, (10 ** 6, 1))
    _, want = _reference(4, COLS, (1, 2), [0, 0], rows, 7, 0, 10 ** 6, (10 ** 6, 1))
    firsts = []
    for r in uart.records:
        if r not in firsts:
            firsts.append(r)
    assert b"".join([a + b"\n" + b + b"\n" for a, b in firsts]) == want      # same order, same bytes
    assert uart.resent() >= mbio.KEEP
    assert uart.polls > 0
    assert uart.asked == len(rows) + 1
    assert _kept(d) == []
    assert _events(uart.out, b"idle") == [[30, uart.resent(), 0]]


def test_a_reset_keeps_unacknowledged_records_and_the_ledger():
    # window of 1000 readings, cap 4 at 1 per record: the first boot releases 3 (not
    # acknowledged) and is cut; the second resends those 3 byte for byte before anything
    # new, releases 1 more (the window's spend survived the reset), then withholds
    rows = [[i, -i] for i in range(10)]
    d = _folder("mb-reset")
    one = [(1, 1, 0, -5000, 5000, 25)]
    first = FakeUart(rows, ack=False, cut=3)
    try:
        _run(d, XorShift32(8), first, one, (1, 1), 1000, (4, 1))
        raise AssertionError("no power cut")
    except PowerCut:
        pass
    assert len(_kept(d)) == 3 and len(first.records) == 3
    assert mbstate.ledger(d, 1, (1, 1), (4, 1), 1000) == (3, 3, 3, 1, 1, 4)
    second = FakeUart(rows)
    _run(d, XorShift32(9), second, one, (1, 1), 1000, (4, 1))
    assert _events(second.out, b"boot")[0][7] == 3                 # 3 kept from the first boot
    assert sorted(second.records[:3]) == sorted(first.records)      # resent before anything new
    assert len(second.records) == 4
    assert _events(second.out, b"cap") == [[0, 4, 4, 1, 1, 1]]     # window 0 full at 4
    assert _events(second.out, b"done")[0][:2] == [10, 1]
    assert _events(second.out, b"idle") == [[1, 3, 0]]
    assert _kept(d) == []
    # another window length than the ledger was kept under (config.txt changed without
    # provisioning): nothing is released until the board is provisioned again
    assert mbstate.ledger(d, 1, (1, 1), (4, 1), 500) == (0, 0, 0, 1, 1, -1)


def _ledger(d, c, st):
    """A ledger file as mbutil.emit writes it before a record (test_a_reset_keeps_... checks
    that mbstate reads the node's own files back)."""
    f = open(d + ("la" if c & 1 else "lb"), "wb")
    f.write(frame(bytes("%d %d %d %d %d" % ((c,) + st), "ascii")))
    f.close()


def test_the_ledger_survives_a_torn_write():
    d = _folder("mb-ledger")
    _ledger(d, 1, (5, 3, 10, 600))
    _ledger(d, 2, (6, 4, 10, 600))
    # 2 columns at 1/10, cap 6/10 -> unit 10, a record 2, the cap 6
    assert mbstate.ledger(d, 2, (1, 10), (6, 10), 600) == (2, 6, 4, 10, 2, 6)
    f = open(d + "lb", "w")       # counter 2 lives in lb; a reset cut its rewrite short
    f.write("~3320")
    f.close()
    # la (counter 1: 5 readings, 3 spent) plus the lost record: 6 readings, 5 spent; the
    # counter stays 1, so the next write replaces lb, the lost file
    assert mbstate.ledger(d, 2, (1, 10), (6, 10), 600) == (1, 6, 5, 10, 2, 6)
    os.remove(d + "lb")           # a reset between the delete and the write
    assert mbstate.ledger(d, 2, (1, 10), (6, 10), 600) == (1, 6, 5, 10, 2, 6)
    os.remove(d + "la")           # neither: nothing is released
    assert mbstate.ledger(d, 2, (1, 10), (6, 10), 600) == (0, 0, 0, 10, 2, -1)


def _flip(path, i):
    f = open(path, "rb")
    data = bytearray(f.read())
    f.close()
    data[i] ^= 1
    f = open(path, "wb")
    f.write(data)
    f.close()


def test_one_damaged_byte_anywhere_never_gives_budget_back():
    # Window of 1000 readings, cap 4, a record 1: 2 released (counter 2 in lb, 1 in la).
    # Each byte of each file flipped in turn: the other file plus the lost record, so at
    # least the 2 spent (3 when the older file was the damaged one), never less.
    d = _folder("mb-flip")
    _ledger(d, 1, (1, 1, 1, 1000))
    _ledger(d, 2, (2, 2, 1, 1000))
    good = {}
    for n in ("la", "lb"):
        f = open(d + n, "rb")
        good[n] = f.read()
        f.close()
    for n in ("la", "lb"):
        for i in range(len(good[n])):
            _flip(d + n, i)
            c, reads, spent, un, row, cp = mbstate.ledger(d, 1, (1, 1), (4, 1), 1000)
            assert (un, row, cp) == (1, 1, 4) and spent >= 2 and reads >= 2, (n, i, spent)
            f = open(d + n, "wb")
            f.write(good[n])
            f.close()


def test_a_lost_file_after_a_full_window_stops_releases():
    # Windows of 8 readings, cap 2, a record 1. la: counter 1, 3 readings seen, 2 spent
    # (window 0 full); lb (counter 2) lost: it was window 1's first reading, which the node
    # reaches only after the rest of window 0: nothing is released (ledger.py keeps a debt).
    d = _folder("mb-next")
    _ledger(d, 1, (3, 2, 1, 8))
    os.remove(d + "lb")
    assert mbstate.ledger(d, 1, (1, 1), (2, 1), 8) == (0, 0, 0, 1, 1, -1)
    # at the window's last reading the lost record was the next window's first: charged there
    _ledger(d, 1, (8, 2, 1, 8))
    assert mbstate.ledger(d, 1, (1, 1), (2, 1), 8) == (1, 9, 1, 1, 1, 2)


def test_a_missing_or_damaged_ledger_releases_nothing():
    rows = [[i] for i in range(20)]
    col = [(1, 1, 0, -100, 100, 20)]
    for case in ("missing", "both damaged", "another config"):
        d = _folder("mb-closed", provisioned=case != "missing")
        if case == "both damaged":
            _flip(d + "la", 5)
            _flip(d + "lb", 9)
        elif case == "another config":
            _ledger(d, 1, (1, 1, 2, 10))      # kept under unit 2
        led = mbstate.ledger(d, 1, (1, 1), (4, 1), 10)
        assert led[5] == -1, case
        uart = FakeUart(rows)
        mbnode.run(7, 0, col, (1, 1), [0], 10, (4, 1), (0, 0), led, XorShift32(5), uart, d)
        assert uart.records == [] and _kept(d) == [], case
        # the boot event carries the cap -1; one #cap event per window, nothing released
        assert _events(uart.out, b"boot")[0][4] == -1
        assert [e[2] for e in _events(uart.out, b"cap")] == [-1, -1], case
        assert _events(uart.out, b"done")[0][:2] == [20, 0]


def test_acknowledgements_that_match_nothing_are_ignored():
    d = _folder("mb-acks")
    f = open(d + "0123456789", "wb")
    f.write(b"x")
    f.close()
    ln = bytearray(b"!0123456789abcdef")
    assert mbio.acked(d, ln, 17) == 1
    assert mbio.acked(d, ln, 17) == 0            # twice: a resend was acknowledged again
    assert mbio.acked(d, bytearray(b"!zz"), 3) == 0
    assert _kept(d) == []


# -- entropy: mbrng, the nRF51's RNG read through a fake peripheral ----------------------------------------------------

class _Mem:
    """machine.mem8 / mem32 over a fake RNG peripheral: VALUE gives ``source()``'s bytes."""

    def __init__(self, source):
        self.source = source
        self.regs = {}

    def __getitem__(self, addr):
        if addr == 0x4000D100:          # EVENTS_VALRDY
            return 1
        if addr == 0x4000D508:          # VALUE
            return self.source()
        return self.regs.get(addr, 0)

    def __setitem__(self, addr, v):
        self.regs[addr] = v


def _with_rng(source):
    mem = _Mem(source)
    mbrng.HW[0] = mem
    mbrng.HW[1] = mem
    mbrng.HW[2] = -1
    mbrng.HW[3] = 0
    return mem


def test_hardware_getrandbits_takes_whole_bytes_top_bits_first():
    seq = [0xA5, 0x3C, 0xFF, 0x01, 0x80]
    it = [0]

    def src():
        it[0] += 1
        return seq[(it[0] - 1) % len(seq)]
    _with_rng(src)
    assert mbrng.getrandbits(8) == 0xA5
    assert mbrng.getrandbits(4) == 0x3C >> 4
    assert mbrng.getrandbits(16) == 0xFF01
    assert mbrng.getrandbits(1) == 1                 # 0x80's top bit
    it[0] = 0
    assert mbrng.getrandbits(30) == (0xA53CFF << 6) | (0x01 >> 2)


def test_a_stuck_rng_fails_the_repetition_count_test():
    x = XorShift32(9)
    _with_rng(lambda: x.getrandbits(8))
    for _ in range(4096):
        mbrng.getrandbits(8)                         # a good source passes
    _with_rng(lambda: 0x5A)
    raises(OSError, lambda: [mbrng.getrandbits(8) for _ in range(6)])


class _Silent(_Mem):
    def __getitem__(self, addr):
        return 0                                      # VALRDY never set


def test_a_silent_rng_is_an_error_not_a_hang():
    _with_rng(lambda: 7)
    mbrng.HW[1] = _Silent(None)
    raises(OSError, mbrng.getrandbits, 8)
