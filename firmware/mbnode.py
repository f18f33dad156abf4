"""Slim serial node for the BBC micro:bit v1: stimulus in, framed records out, on the UART.

    import mbutil, noise, mbnode      # in this order (heap fragmentation)
    mbnode.run(7, 1, [(1, 1, 0, -5000, 5000, 25)], (1, 2), [0], 600, (60, 1))
    # device 7, config 1, columns, epsilon 1/2, centre, window of 600 readings, cap 60

The full firmware (app.py) does not fit the micro:bit: ~9.8 KB heap after reset,
about six nested Python calls, and wire.py alone cannot even be compiled there. This
module needs only ``noise.py`` and ``mbutil.py`` next to it and writes, per reading,
exactly the two framed lines ``Node.release`` + ``serial_sender`` would write for the
same draws of ``rng``: perturb each column (``RecordMechanism.perturb``), d_diff with
rounded norms (``distance.distance_difference``), a token (``tokens.new_token``), the
reading and correction records (``wire``), each framed (``framing.frame``,
docs/protocol.md 2). tests/portable/test_mbnode.py checks it against those modules
byte for byte, and tests/integration/test_qemu_smoke.py on the micro:bit firmware itself
(whose struct packs negative long ints wrongly: see ``mbutil.put32``); keep them in step.

Readings come from the host over the same UART: the node writes the console line
``?`` and waits for one line ``raw0,raw1,...`` (or ``.``: no more readings). Nothing
received is echoed. The privacy ledger follows ledger.py's rule for windows of
``window_records`` readings but lives in RAM (the flat file system has no in-place
writes): a reset starts a fresh window. No ring buffer: serial boards get no
acknowledgement. Console lines: ``boot ok: ...`` (with ``gc.mem_free()``),
``ledger: window N cap ... reached ...`` followed by ``status: {...}`` (the gateway
publishes it to the status topic), ``stimulus done: ...``.
"""
import gc
import time

try:
    from shared_protocol.noise import DiscreteLaplace
except ImportError:  # flat file system (micro:bit)
    from noise import DiscreteLaplace
from mbutil import ask, frame, ft, norm, pack, say

try:
    _us = time.ticks_us
    _diff = time.ticks_diff
except AttributeError:  # CPython (host tests): no cost figure
    _us = lambda: 0
    _diff = lambda a, b: 0


def run(dev, cfg_id, cols, eps, centre, win, cap, rng=None, uart=None):
    """Release readings until the host sends ``.``; ``cols``: (num, den, offset,
    raw_min, raw_max, delta_q) per column, ``eps``: (num, den) per column; at most
    ``cap`` (num, den) of epsilon per window of ``win`` readings (ledger.Ledger's rule,
    kept in RAM: a reset starts a fresh budget)."""
    if rng is None:
        import random as rng
    if uart is None:
        from microbit import uart
    w = uart.write
    ri = uart.readinto
    one = bytearray(1)
    ln = bytearray(200)
    m = len(cols)
    lap = [DiscreteLaplace(c[5] * eps[1], eps[0], rng) for c in cols]
    boot = (rng.getrandbits(16) << 16) | rng.getrandbits(16)
    rb = bytearray(26 + 4 * m)
    cb = bytearray(16)
    tok = bytearray(8)
    gc.collect()
    free = gc.mem_free() if hasattr(gc, "mem_free") else -1
    a = eps[1]
    b = cap[1]
    while b:
        a, b = b, a % b
    un = eps[1] * cap[1] // a
    row = m * eps[0] * (un // eps[1])
    cp = cap[0] * (un // cap[1])
    er = ft(row, un)
    w(bytes("boot ok: board=microbit device=%d boot=%d entropy=getrandbits eps_record=%s "
            "mem_free=%d\n" % (dev, boot, er, free), "ascii"))
    seq = 0
    cost = 0
    reads = 0
    wi = 0
    spent = 0
    held = 0
    while True:
        n = ask(w, ri, one, ln)
        if n < 0:
            break
        k = reads // win
        reads += 1
        if k != wi:
            wi = k
            spent = 0
            held = 0
        if spent + row > cp:
            held += 1
            if held == 1:
                say(w, wi, cp, spent, un, dev, boot, er, seq)
            continue
        spent += row
        t0 = _us()
        raw = bytes(ln[:n]).split(b",")
        q = []
        y = []
        for j in range(m):
            c = cols[j]
            r = int(raw[j])
            r = c[3] if r < c[3] else c[4] if r > c[4] else r
            v = (2 * c[0] * r + c[1]) // (2 * c[1]) + c[2]
            q.append(v)
            y.append(v + lap[j].sample())
        pack(rng, rb, cb, tok, y, norm(y, centre) - norm(q, centre), dev, boot, seq, cfg_id)
        cost += _diff(_us(), t0)
        w(frame(rb))
        w(frame(cb))
        seq += 1
    w(bytes("stimulus done: %d readings, %d released; firmware cost %d us per reading\n"
            % (reads, seq, cost // (seq or 1)), "ascii"))
