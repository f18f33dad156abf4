"""The micro:bit node's ledger as its last release left it, read back in a boot of its own
before every start of the node (tools/microbit.py): the node's own heap has no room for
this code.

    led = ledger("", 2, (1, 2), (60, 1), 600)   # -> mbnode.run(..., led)

The ledger is two files, ``la`` and ``lb``, written in turn by mbutil.emit, each one
framed line (``~``, hex, CRC-16/CCITT-FALSE: docs/protocol.md 2) of ``counter reads spent
unit window``. Provisioning writes both as ``0 0 0 0 0`` (a fresh ledger: a new budget,
``tools/provision.py``). The micro:bit's MicroPython (1.9.2) has no hashlib, so the CRC is
what tells a damaged file: it detects every error of up to 16 bits in a row (one damaged
byte, a cut write) and misses random damage with probability 2^-16. It protects against
damage, not against someone who can write the board's flash: they can write a valid file.

Failing closed: neither file readable (missing, damaged), or a ledger kept under another
unit or window length than the config's (config.txt changed without provisioning), gives
the cap -1, so the node releases nothing and its ``#boot`` and ``#cap`` events say so
(the gateway writes ``ledger: releases stopped: ...``) until the board is provisioned
again. One file unreadable (a reset during its rewrite, or damage) and the other good:
the lost file held the one release after the good one (or before it: then charging one
more is only cautious), and every reading in between was withheld, so it is charged where
it can have been, as firmware/ledger.py does: in the next reading's window if the good
file's window had room for it; if it had none, the record was the first of the window
after, which ledger.py carries as a debt and the node has no room for, so that stops
releases too.
"""
from ledger import _gcd      # code on the micro:bit (tools/mbgen.py): ledger.py's own
from shared_protocol.framing import crc16


def _read(n):
    """The five integers of a ledger file, or None when it is missing or damaged."""
    try:
        f = open(n)
        t = f.read()
        f.close()
        k = len(t) - 6               # hex digits of the payload
        if k < 2 or k & 1 or t[0] != "~" or t[-1] != "\n":
            return None
        p = bytearray(k // 2)
        for i in range(k // 2):
            p[i] = int(t[1 + 2 * i:3 + 2 * i], 16)
        if crc16(p) != int(t[k + 1:k + 5], 16):
            return None
        v = [int(x) for x in str(bytes(p), "ascii").split()]
    except (OSError, ValueError):
        return None
    return v if len(v) == 5 and min(v) >= 0 else None


def ledger(d, m, eps, cap, win):
    """The node's ledger as its last release left it, and its units: (counter, readings
    seen, epsilon spent in their window, unit, epsilon of a record, window cap), epsilons
    in 1/unit; the cap is -1 when the ledger is missing or damaged (nothing is released).
    ``m`` columns at ``eps`` (num, den) each, ``cap`` (num, den) per window of ``win``
    readings; ``d``: the folder prefix of the files."""
    un = eps[1] * cap[1] // _gcd(eps[1], cap[1])
    row = m * eps[0] * (un // eps[1])
    cp = cap[0] * (un // cap[1])
    best = None
    lost = 0
    for n in ("la", "lb"):
        v = _read(d + n)
        if v is None:
            lost = 1
        elif best is None or v[0] > best[0]:
            best = v
    if best is None or (best != [0, 0, 0, 0, 0] and best[3:] != [un, win]):
        return 0, 0, 0, un, row, -1
    c, reads, spent = best[0], best[1], best[2]
    if lost:
        # The counter stays: the node's next write replaces the lost file, not the good one.
        w = (reads - 1) // win if reads else 0
        if spent + row > cp and reads // win == w:
            # The lost record was the next window's first, reached only after the rest of
            # this one: ledger.py carries it as a debt, which the node has no room for.
            return 0, 0, 0, un, row, -1
        reads += 1
        spent = (spent if (reads - 1) // win == w else 0) + row
    return c, reads, spent, un, row, cp
