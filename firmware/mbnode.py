"""Slim serial node for the BBC micro:bit v1: stimulus in, framed records out, on the UART.

    import mbutil, mbio, noise, mbnode      # in this order (heap fragmentation)
    mbnode.run(7, 1, [(1, 1, 0, -5000, 5000, 25)], (1, 2), [0], 600, (60, 1), (200, 1))
    # device 7, config 1, columns, epsilon 1/2, centre, window of 600 readings, cap 60,
    # whole-domain epsilon 200 (mbcfg.load returns these, from config.txt)

The full firmware (app.py) does not fit the micro:bit: ~9.8 KB heap after reset,
about six nested Python calls, and wire.py alone cannot even be compiled there. This
module needs only ``noise.py``, ``mbutil.py`` and ``mbio.py`` next to it and writes, per reading,
exactly the two framed lines ``Node.release`` + ``serial_sender`` would write for the
same draws of ``rng``: perturb each column (``RecordMechanism.perturb``), d_diff with
rounded norms (``distance.distance_difference``), a token (``tokens.new_token``), the
reading and correction records (``wire``), each framed (``framing.frame``,
docs/protocol.md 2). tests/portable/test_mbnode.py checks it against those modules
byte for byte, and tests/integration/test_qemu_smoke.py on the micro:bit firmware itself
(whose struct packs negative long ints wrongly: see ``mbutil.put32``); keep them in step.

Readings come from the host over the same UART: the node writes the console line
``?`` and waits for one line ``raw0,raw1,...`` (or ``.``: no more readings). Nothing
received is echoed.

Acknowledgements (docs/protocol.md 2.1): before its lines are written, each record is
kept in a file named by its token (10 hex digits). While records are kept, the node polls the gateway
(line ``!``) before each reading; the gateway answers with up to two lines
``!<token hex>`` of records the broker has acknowledged (both messages), then ``!``, and
the node deletes those files. At boot, and after ``QUIET`` polls that acknowledged nothing,
every kept record is written again, byte for byte. At most ``KEEP`` records wait: a full
store stops the node asking for readings until acknowledgements arrive (nothing is
dropped). When the host sends ``.`` the node waits through up to ``DRAIN`` resends for
the last acknowledgements; what is left stays kept for the next boot.

The privacy ledger follows ledger.py's rule for windows of ``window_records`` readings
but lives in RAM: the ~9 KB heap cannot also hold the code that would keep it on flash,
so a reset starts a fresh window. Console lines: ``boot ok: ...`` (with the records
kept from earlier boots and ``gc.mem_free()``), ``ledger: window N cap ... reached ...``
followed by ``status: {...}`` (the gateway publishes it to the status topic),
``stimulus done: ...``, then ``idle: all N records acknowledged (K resent)``: as event
lines (``#boot``, ``#cap``, ``#done``, ``#idle``, docs/protocol.md 2.2) that the gateway
expands into those words.
"""
import time

try:
    from shared_protocol.noise import DiscreteLaplace
except ImportError:  # flat file system (micro:bit)
    from noise import DiscreteLaplace
from mbutil import emit
from mbio import DRAIN, KEEP, ask, prep

try:
    _us = time.ticks_us
    _diff = time.ticks_diff
except AttributeError:  # CPython (host tests): no cost figure
    _us = lambda: 0
    _diff = lambda a, b: 0


def run(dev, cfg_id, cols, eps, centre, win, cap, worst=(0, 0), rng=None, uart=None, d=""):
    """Release readings until the host sends ``.``; ``cols``: (num, den, offset,
    raw_min, raw_max, delta_q) per column, ``eps``: (num, den) per column; at most
    ``cap`` (num, den) of epsilon per window of ``win`` readings (ledger.Ledger's rule,
    kept in RAM: a reset starts a fresh window); ``worst``: the whole-domain epsilon of
    a record (mbcfg), reported at boot. ``d``: folder prefix of the node's files."""
    if rng is None:
        import random as rng
    if uart is None:
        from microbit import uart
    w = uart.write
    ri = uart.readinto
    one = bytearray(1)
    ln = bytearray(120)
    m = len(cols)
    lap = [DiscreteLaplace(c[5] * eps[1], eps[0], rng) for c in cols]
    boot = (rng.getrandbits(16) << 16) | rng.getrandbits(16)
    rb = bytearray(26 + 4 * m)
    cb = bytearray(16)
    tok = bytearray(8)
    s = prep(w, d, ln, dev, boot, m, eps, cap, worst)
    un = s[2]
    row = s[3]
    cp = s[4]
    reads = 0
    spent = 0
    wi = 0
    seq = 0
    cost = 0
    got = 0
    held = 0
    while True:
        n = ask(w, ri, one, ln, d, s, KEEP - 1, -1)
        if n < 0:
            break
        k = reads // win
        reads += 1
        got += 1
        if k != wi:
            wi = k
            spent = 0
            held = 0
        if spent + row > cp:
            held += 1
            if held == 1:
                w(bytes("#cap %d %d %d %d %d %d\n" % (wi, spent, cp, un, row, seq), "ascii"))
            continue
        spent += row
        t0 = _us()
        a = emit(rng, cols, lap, centre, ln, n, rb, cb, tok, dev, boot, seq, cfg_id, d)
        cost += _diff(_us(), t0)
        s[0] += 1
        w(a)
        seq += 1
    w(bytes("#done %d %d %d\n" % (got, seq, cost // (seq or 1)), "ascii"))
    ask(w, ri, one, ln, d, s, 0, DRAIN)
    w(bytes("#idle %d %d %d\n" % (seq, s[1], s[0]), "ascii"))
