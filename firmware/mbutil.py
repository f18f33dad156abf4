"""Helpers of firmware/mbnode.py: scaling, noise, record encoding, framing and the ledger file.

The micro:bit compiles each module on the board, in a heap too small for one large
file, so the node is split: ``mbutil`` (this), ``mbio`` (UART lines, acknowledgements and
the files on flash), ``mbnode`` (the loop). Import them in the order ``mbutil``, ``mbio``,
``noise``, ``mbnode``: another order leaves the heap too fragmented to compile ``mbnode``.
"""
import struct

# On the micro:bit these come as code (tools/mbgen.py, at deploy): the board cannot import
# wire.py, framing.py or tokens.py next to the node.
from shared_protocol.framing import START, _HEX
from shared_protocol.tokens import new_token
from shared_protocol.layout import (CORRECTION, CORRECTION_SIZE, INT32_MAX, KIND_CORRECTION,
                                    KIND_READING, READING_HEAD, READING_HEAD_SIZE, TOKEN_SIZE,
                                    VERSION)

NAME = 10      # hex digits of the token that name a kept record's file (mbio)


def frame(p, o=None):
    """framing.frame's line for payload ``p`` (a bytearray): one pass for hex and CRC, into
    ``o`` (2 * len(p) + 6 bytes) when given: the node frames every record into the same two
    buffers, as a fresh 62-byte block per line fragments the micro:bit's heap."""
    c = 0xFFFF
    if o is None:
        o = bytearray(2 * len(p) + 6)
    o[0] = START
    i = 1
    for b in p:
        o[i] = _HEX[b >> 4]
        o[i + 1] = _HEX[b & 15]
        i += 2
        c ^= b << 8
        for _ in range(8):
            c = ((c << 1) ^ 0x1021) & 0xFFFF if c & 0x8000 else (c << 1) & 0xFFFF
    for s in (12, 8, 4, 0):
        o[i] = _HEX[(c >> s) & 15]
        i += 1
    o[i] = 10
    return o


def put32(buf, off, v):
    """``v`` clamped to +-INT32_MAX (node.py's rule: -2**31 is reserved) as a little-endian
    int32 at ``buf[off]``, byte by byte: the micro:bit's struct (1.9.2) packs a negative
    long int with "<i" without sign extension (-4986 as 86 ec 00 00), and values past
    2**30 or computed from long ints are long there."""
    if v > INT32_MAX:
        v = INT32_MAX
    elif v < -INT32_MAX:
        v = -INT32_MAX
    if v < 0:
        v += 4294967296
    for i in range(4):
        buf[off + i] = v & 255
        v >>= 8


def pack(rb, cb, tok, y, dd, dev, boot, seq, cfg_id):
    """Encode the reading record (values ``y``) into ``rb`` and the correction record
    (``dd``) into ``cb`` as wire.py does, with ``put32`` for the int32 fields."""
    struct.pack_into(READING_HEAD, rb, 0, VERSION, KIND_READING, len(y), 0, dev, boot, seq,
                     tok, cfg_id)
    for j in range(len(y)):
        put32(rb, READING_HEAD_SIZE + 4 * j, y[j])
    struct.pack_into(CORRECTION, cb, 0, VERSION, KIND_CORRECTION, 0, dev, boot, seq, tok, 0)
    put32(cb, CORRECTION_SIZE - 4, dd)


def emit(rng, cols, lap, centre, ln, n, rb, cb, dev, boot, seq, cfg_id, d, led, fa=None, fb=None):
    """Write the ledger ``led`` = (counter, readings seen, epsilon spent in their window,
    unit, window length) to flash first (file ``la`` or ``lb`` by turn, one framed line:
    its CRC-16 lets mbstate refuse a damaged file), before anything of the record exists;
    then release the reading ``raw0,raw1,...`` in ``ln[:n]`` (Node.release's draws): scale
    and clamp each column (fixedpoint.Affine.apply), add its noise, draw the token, encode
    both records, keep their framed lines in a file named by the token's first ``NAME``
    hex digits (before they are sent: ``d`` is the folder prefix), return them (in ``fa``
    and ``fb`` when given). The ledger writer lives here, not in a function of its own:
    one more global of a module costs the node's heap more than these lines (a module's
    table of names grows in steps)."""
    f = open(d + ("la" if led[0] & 1 else "lb"), "wb")
    f.write(frame(bytes("%d %d %d %d %d" % led, "ascii")))
    f.close()
    raw = bytes(ln[:n]).split(b",")
    q = []
    y = []
    for j in range(len(cols)):
        c = cols[j]
        r = int(raw[j])
        r = c[3] if r < c[3] else c[4] if r > c[4] else r
        v = (2 * c[0] * r + c[1]) // (2 * c[1]) + c[2]
        q.append(v)
        y.append(v + lap[j].sample())
    tok = new_token(rng)
    pack(rb, cb, tok, y, norm(y, centre) - norm(q, centre), dev, boot, seq, cfg_id)
    a = frame(rb, fa)
    b = frame(cb, fb)
    # the name: the token's first hex digits in the correction's line, after "~" and the
    # clear header before the token (the record ends with the token and the int32 d_diff)
    t = 1 + 2 * (CORRECTION_SIZE - 4 - TOKEN_SIZE)
    f = open(d + str(bytes(b[t:t + NAME]), "ascii"), "wb")
    f.write(a)          # two writes, not one joined copy: bytes the heap may not have
    f.write(b)
    f.close()
    return a, b


def norm(v, c):
    """Euclidean |v - c| rounded to the nearest int (distance.distance_q), no floats."""
    n = 0
    for j in range(len(v)):
        d = v[j] - c[j]
        n += d * d
    if n == 0:
        return 0
    x = n
    k = 0
    while x:
        x >>= 1
        k += 1
    x = 1 << ((k + 1) >> 1)
    while True:
        y = (x + n // x) >> 1
        if y >= x:
            break
        x = y
    return x + 1 if n - x * x > x else x

