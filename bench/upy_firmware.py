"""Per-reading cost of the board pipeline; runs under the MicroPython unix port (and CPython).

Prints one JSON line per row: name and microseconds per reading.
"""
import json
import math
import os
import random
import struct
import sys

sys.path.insert(0, ".")
sys.path.insert(0, "firmware")

from shared_protocol.fixedpoint import Affine  # noqa: E402
from shared_protocol.mechanism import Column, RecordMechanism  # noqa: E402
from shared_protocol.rng import UrandomRNG  # noqa: E402
from node import Node  # noqa: E402
from ring import Ring  # noqa: E402
from ledger import Ledger  # noqa: E402
from seriallink import SerialLink, token_hex  # noqa: E402

try:
    from time import ticks_us, ticks_diff
except ImportError:
    from time import perf_counter_ns

    def ticks_us():
        return perf_counter_ns() // 1000

    def ticks_diff(a, b):
        return a - b

N = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
TMP = sys.argv[2] if len(sys.argv) > 2 else "/tmp"


def timed(name, fn):
    t0 = ticks_us()
    for i in range(N):
        fn(i)
    us = ticks_diff(ticks_us(), t0) / N
    print(json.dumps({"row": name, "us": us}))


def main():
    ident = Affine(1, 1, 0, -100000, 100000)
    cols = [Column(ident, 1250, (1, 2)), Column(ident, 1250, (1, 2))]
    rng = UrandomRNG()
    mech = RecordMechanism(cols, [0, 0], rng)
    raw = [[(i * 37) % 2000 - 1000, (i * 91) % 2000 - 1000] for i in range(64)]
    sent = []

    def keep(reading, correction):
        sent.append(len(reading))
        if len(sent) > 100:
            del sent[:]

    b = 2500.0
    buf = bytearray(8)

    def naive(i):
        # What a naive float firmware does: float inverse-CDF Laplace, pack two floats.
        for j in range(2):
            u = random.random() - 0.5
            y = raw[i & 63][j] - b * (1 if u >= 0 else -1) * math.log(1 - 2 * abs(u) + 1e-300)
            struct.pack_into("<f", buf, 4 * j, y)

    timed("baseline: naive float Laplace + pack (not DP-safe)", naive)

    node = Node(None, mech, rng, 7, 1, 1, keep)
    timed("perturb + d_diff + token + encode (exact, os.urandom)", lambda i: node.release(raw[i & 63]))

    path = TMP + "/bench_ring.bin"
    lpath = TMP + "/bench_ledger.bin"
    for p in (path, lpath):
        try:
            os.remove(p)
        except OSError:
            pass
    ring = Ring(path, 34, 256, 64 * 1024)
    ledger = Ledger((1, 1), (10 ** 9, 1), window_records=10 ** 9, path=lpath)
    node2 = Node(None, mech, rng, 7, 1, 1, lambda r, c: ring.put(r, c))

    def full(i):
        ledger.charge()
        o = node2.release(raw[i & 63])
        ring.ack(o, 0)
        ring.ack(o, 1)

    timed("+ ledger charge + ring buffer put/ack (files)", full)
    ring.close()

    # A Pico's path: the record on flash, two framed lines out, then the gateway's
    # acknowledgement line read back and matched by token.
    spath = TMP + "/bench_serial_ring.bin"
    try:
        os.remove(spath)
    except OSError:
        pass
    ring = Ring(spath, 34, 256, 64 * 1024)
    inbox = [b""]
    last = [None]

    def read():
        data, inbox[0] = inbox[0], b""
        return data

    link = SerialLink(ring, lambda b: None, read, _Clock())

    def send(reading, correction):
        last[0] = reading
        link.send(reading, correction)

    node3 = Node(None, mech, rng, 7, 1, 1, send)

    def serial(i):
        ledger.charge()
        node3.release(raw[i & 63])
        inbox[0] = b"!" + token_hex(last[0]) + b"\n!\n"
        link.service()

    timed("+ ledger + ring + framed lines, acknowledged by token (Pico)", serial)
    ring.close()
    ledger.close()


class _Clock:
    """Milliseconds that never pass: the link polls once per answer, as a gateway keeps up."""

    def ticks_ms(self):
        return 0

    def ticks_diff(self, a, b):
        return a - b

    def ticks_add(self, a, b):
        return a + b


main()
