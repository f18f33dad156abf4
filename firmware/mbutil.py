"""Helpers of firmware/mbnode.py: scaling, noise, record encoding and framing.

The micro:bit compiles each module on the board, in a heap too small for one large
file, so the node is split: ``mbutil`` (this), ``mbio`` (UART lines, acknowledgements and
the files on flash), ``mbnode`` (the loop). Import them in the order ``mbutil``, ``mbio``,
``noise``, ``mbnode``: another order leaves the heap too fragmented to compile ``mbnode``.
"""
import struct

_MAX = 2147483647
_H = b"0123456789abcdef"


def frame(p):
    """The framed line (bytearray, ending in ``\\n``) of payload ``p``: framing.frame's bytes."""
    c = 0xFFFF
    o = bytearray(2 * len(p) + 6)
    o[0] = 126
    i = 1
    for b in p:
        o[i] = _H[b >> 4]
        o[i + 1] = _H[b & 15]
        i += 2
        c ^= b << 8
        for _ in range(8):
            c = ((c << 1) ^ 0x1021) & 0xFFFF if c & 0x8000 else (c << 1) & 0xFFFF
    for s in (12, 8, 4, 0):
        o[i] = _H[(c >> s) & 15]
        i += 1
    o[i] = 10
    return o


def put32(buf, off, v):
    """``v`` (|v| < 2**31) as a little-endian int32 at ``buf[off]``, byte by byte: the
    micro:bit's struct (1.9.2) packs a negative long int with "<i" without sign extension
    (-4986 as 86 ec 00 00), and values past 2**30 or computed from long ints are long there."""
    if v < 0:
        v += 4294967296
    for i in range(4):
        buf[off + i] = v & 255
        v >>= 8


def pack(rng, rb, cb, tok, y, dd, dev, boot, seq, cfg_id):
    """Draw the token (tokens.new_token), then encode the reading record (values ``y``) into
    ``rb`` and the correction record (``dd``) into ``cb`` as wire.py does, clamping to int32."""
    for i in (0, 2, 4, 6):
        r = rng.getrandbits(16)
        tok[i] = r >> 8
        tok[i + 1] = r & 255
    struct.pack_into("<BBBBIII8sH", rb, 0, 1, 1, len(y), 0, dev, boot, seq, tok, cfg_id)
    for j in range(len(y)):
        v = y[j]
        put32(rb, 26 + 4 * j, _MAX if v > _MAX else -_MAX if v < -_MAX else v)
    struct.pack_into("<BBH8s", cb, 0, 1, 2, 0, tok)
    put32(cb, 12, _MAX if dd > _MAX else -_MAX if dd < -_MAX else dd)


def emit(rng, cols, lap, centre, ln, n, rb, cb, tok, dev, boot, seq, cfg_id, d):
    """Release the reading ``raw0,raw1,...`` in ``ln[:n]`` (Node.release's draws): scale and
    clamp each column, add its noise, encode both records, keep their framed lines in a
    file named by the token's first 10 hex digits (before they are sent: ``d`` is the
    folder prefix), return them."""
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
    pack(rng, rb, cb, tok, y, norm(y, centre) - norm(q, centre), dev, boot, seq, cfg_id)
    a = frame(rb)
    b = frame(cb)
    f = open(d + str(bytes(b[9:19]), "ascii"), "wb")
    f.write(a)          # two writes, not one joined copy: 120 bytes the heap may not have
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
