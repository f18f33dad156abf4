"""Slim serial node for the BBC micro:bit v1: stimulus in, framed records out, on the UART.

    import mbutil, mbio, noise, mbnode      # in this order (heap fragmentation)
    mbnode.run(7, 1, [(1, 1, 0, -5000, 5000, 25)], (1, 2), [0], 600, (60, 1), (200, 1),
               (0, 0, 0, 2, 1, 120))
    # device 7, config 1, columns, epsilon 1/2, centre, window of 600 readings, cap 60
    # (mbcfg.load, from config.txt); whole-domain epsilon 200 (added at provisioning,
    # tools/microbit.py) and the ledger (fresh; unit 1/2: a record costs 1, the cap is
    # 120) from mbstate

The full firmware (app.py) does not fit the micro:bit: ~9.8 KB heap after reset,
about six nested Python calls, and wire.py alone cannot even be compiled there. This
module needs only ``noise.py``, ``mbutil.py`` and ``mbio.py`` next to it and writes, per
reading, exactly the two framed lines ``Node.release`` + ``serial_sender`` would write
for the same draws of ``rng``: perturb each column (``RecordMechanism.perturb``), d_diff
with rounded norms (``distance.distance_difference``), a token (``tokens.new_token``),
the reading and correction records (``wire``), each framed (``framing.frame``,
docs/protocol.md 2). What these modules import from shared_protocol and firmware/ comes
to the board as code, generated at deploy (tools/mbgen.py); what the board keeps as its
own slim code is listed in firmware/README.md with the test that compares it, class by
class, with the shared code (tests/portable/test_mbslim.py). tests/portable/test_mbnode.py
checks the node against those modules byte for byte, and
tests/integration/test_qemu_smoke.py on the micro:bit firmware itself (whose struct
packs negative long ints wrongly: see ``mbutil.put32``).

Readings come from the host over the same UART: the node writes the console line
``?`` and waits for one line ``raw0,raw1,...`` (or ``.``: no more readings). Nothing
received is echoed.

Acknowledgements (docs/protocol.md 2.1): before its lines are written, each record is
kept in a file named by its token (``mbutil.NAME`` hex digits). While records are kept,
the node polls the gateway (line ``!``) before each reading; the gateway answers with up
to two lines ``!<token hex>`` of records the broker has acknowledged (both messages),
then ``!``, and the node deletes those files. At boot, and after ``QUIET`` polls that
acknowledged nothing, every kept record is written again, byte for byte. At most ``KEEP``
records wait: a full store stops the node asking for readings until acknowledgements
arrive (nothing is dropped). When the host sends ``.`` the node waits through up to
``DRAIN`` resends for the last acknowledgements; what is left stays kept for the next boot.

The privacy ledger follows ledger.py's rule for windows of ``window_records`` readings
and is written to flash before each record exists (by ``mbutil.emit``, first); a boot of its own
before each start reads it back (``mbstate.ledger``) into the node's arguments, so a
reset continues the window with what it had spent. Console lines: ``boot ok: ...`` (with
the records kept from earlier boots, ``gc.mem_free()`` and the project's version),
``ledger: window N cap ... reached ...``
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
# code on the micro:bit (tools/mbgen.py); the drain at the end is the Pico's (seriallink)
from shared_protocol.layout import CORRECTION_SIZE, READING_HEAD_SIZE
from seriallink import DRAIN
from mbutil import emit
from mbio import KEEP, ask, prep

try:
    _us = time.ticks_us
    _diff = time.ticks_diff
except AttributeError:  # CPython (host tests): no cost figure
    _us = lambda: 0
    _diff = lambda a, b: 0


def run(dev, cfg_id, cols, eps, centre, win, cap, worst, led, rng=None, uart=None, d=""):
    """Release readings until the host sends ``.``; ``cols``: (num, den, offset,
    raw_min, raw_max, delta_q) per column, ``eps``: (num, den) per column; at most
    ``cap`` (num, den) of epsilon per window of ``win`` readings (ledger.Ledger's rule,
    on flash: a reset continues the window); ``worst``: the whole-domain epsilon of
    a record, reported at boot (0/0: unknown); ``led``: mbstate.ledger's tuple, the
    ledger as the last release left it and its units. ``d``: folder prefix of the
    node's files."""
    if rng is None:
        # NOT PRIVATE: the port's PRNG, whose 32-bit state a boot id and a token give away.
        # The hardware RNG (mbrng.py) does not fit the node's heap yet; the #boot event
        # names this source "prng_no_dp" and the docs say the micro:bit gives no
        # privacy (docs/privacy.md).
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
    rb = bytearray(READING_HEAD_SIZE + 4 * m)
    cb = bytearray(CORRECTION_SIZE)
    fa = bytearray(2 * len(rb) + 6)     # the two framed lines, reused for every record
    fb = bytearray(2 * CORRECTION_SIZE + 6)
    s = prep(w, d, ln, dev, boot, led, worst)
    un = led[3]
    row = led[4]
    cp = led[5]
    lc = led[0]
    reads = led[1]
    spent = led[2]
    wi = (reads - 1) // win if reads else 0    # the window of the last reading seen
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
        lc += 1
        t0 = _us()
        a, b = emit(rng, cols, lap, centre, ln, n, rb, cb, dev, boot, seq, cfg_id, d,
                    (lc, reads, spent, un, win), fa, fb)
        cost += _diff(_us(), t0)
        s[0] += 1
        w(a)
        w(b)
        seq += 1
    w(bytes("#done %d %d %d\n" % (got, seq, cost // (seq or 1)), "ascii"))
    ask(w, ri, one, ln, d, s, 0, DRAIN)
    w(bytes("#idle %d %d %d\n" % (seq, s[1], s[0]), "ascii"))
