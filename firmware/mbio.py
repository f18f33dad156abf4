"""UART lines, acknowledgements, flash files and events of firmware/mbnode.py (see mbutil).

Files the node keeps (``d`` is a folder prefix, ``""`` on the micro:bit's flat file system):
one file per unacknowledged record, named by the first ``NAME`` (10) hex digits of its
token (so that name and a two-column record share one 128-byte flash chunk; 2**40 names
for at most KEEP files), holding the record's two framed lines exactly as sent; and the
ledger in two files ``la`` / ``lb`` written in turn, so that a reset while one is
rewritten (the file system deletes a file before writing it again) leaves the other, one
release older (written by ``mbutil.emit`` before each record). The ledger is read back by ``mbstate`` in a
boot of its own before the node starts, not here: the node's heap is full.

Events are console lines ``#<name> <fields>`` (docs/protocol.md 2.2) that the gateway
expands into the human-readable console text and the status messages: the words and
JSON live on the host, since every byte of text costs heap here.
"""
import gc
import os
import time

# On the micro:bit these come as code (tools/mbgen.py): the serial link's rhythm is the
# Pico's (docs/protocol.md 2.1), the version is the project's.
from seriallink import POLL_MS as POLL, QUIET
from shared_protocol import __version__
from shared_protocol.layout import TOKEN_SIZE
from mbutil import NAME

try:
    _ms = time.ticks_ms
    _df = time.ticks_diff
except AttributeError:  # CPython (host tests)
    _ms = lambda: int(time.time() * 1000)
    _df = lambda a, b: a - b

KEEP = 8       # records waiting for an acknowledgement (two 128-byte flash chunks each)
PAUSE = 250    # ms between two polls that acknowledged nothing (POLL: how long an answer may take)


def line(ri, one, ln, wait):
    """One line from the UART into ``ln``: its length, or -1 after ``wait`` ms without a
    complete line (``wait`` 0: no limit). One byte at a time into fixed buffers: on the
    micro:bit, ``uart.read()`` allocates 256 bytes a call, which soon fails on a
    fragmented heap."""
    n = 0
    t = _ms()
    while True:
        if ri(one):
            if one[0] == 10:
                return n
            if n < len(ln):
                ln[n] = one[0]
                n += 1
        elif wait and _df(_ms(), t) > wait:
            return -1


def resend(w, d, ln):
    """Write every kept record again, its stored bytes (same noise, same token), through
    the buffer ``ln`` (``f.read()`` would allocate 256 bytes); how many."""
    k = 0
    for n in (os.listdir(d) if d else os.listdir()):
        if len(n) == NAME and "." not in n:
            f = open(d + n, "rb")
            while True:
                r = f.readinto(ln)
                if not r:
                    break
                w(ln[:r])
            f.close()
            k += 1
    return k


def acked(d, ln, n):
    """Handle the gateway's line ``!<token hex>`` in ``ln[:n]``: 1 if a kept record was removed."""
    if n != 1 + 2 * TOKEN_SIZE:
        return 0
    try:
        os.remove(d + str(bytes(ln[1:1 + NAME]), "ascii"))
        return 1
    except OSError:   # acknowledged twice (a resend), or not a token
        return 0


def ask(w, ri, one, ln, d, s, most, rounds):
    """Poll the gateway for acknowledgements (``!``) while records are kept (``s[0]``),
    until at most ``most`` are; after every ``QUIET`` polls that acknowledged nothing,
    write the kept records again (counted in ``s[1]``). ``rounds`` > 0: give up after that
    many resends and return -1 (the drain at the end). ``rounds`` < 0: no limit, then ask
    the host for a reading (console line ``?``): the length of the reply in ``ln``, or -1
    for ``.`` (no more readings). The board asks for bytes only when it is reading them:
    its UART keeps 63 unread bytes, and a gateway writing unasked would overrun it."""
    q = 0
    while s[0]:
        w(b"!\n")
        k = 0
        n = line(ri, one, ln, POLL)
        while n > 1 and ln[0] == 33:
            k += acked(d, ln, n)
            n = line(ri, one, ln, POLL)
        s[0] -= k
        if s[0] <= most:
            break
        if k:
            q = 0
            continue
        q += 1
        if q % QUIET == 0:
            s[1] += resend(w, d, ln)
            rounds -= 1
            if not rounds:
                break
        line(ri, one, ln, PAUSE)
    if rounds >= 0:
        return -1
    w(b"?\n")
    n = line(ri, one, ln, 0)
    return -1 if n == 1 and ln[0] == 46 else n


def prep(w, d, ln, dev, boot, led, worst):
    """At boot: write the kept records again and send the ``#boot`` event, which ends with
    the project's version (``led``: the ledger and its units, from mbstate.ledger;
    ``worst``: the whole-domain epsilon of a record, worked out at provisioning, or 0/0;
    0 records dropped: a full store stops the readings instead). Returns [kept, resent]."""
    k = resend(w, d, ln)
    gc.collect()
    w(bytes("#boot microbit prng_no_dp %d %d %d %d %d %d %d %d 0 %d %s\n"
            % (dev, boot, led[4], led[3], led[5], worst[0], worst[1], k,
               gc.mem_free() if hasattr(gc, "mem_free") else -1, __version__), "ascii"))
    return [k, k]
