"""Random record tokens: 8 bytes that link a reading to its correction record.

    t = new_token(rng)        # bytes of length TOKEN_SIZE

A token names neither the device nor the reading; with 64 random bits, two of a
window's n tokens collide with probability below n*n/2**65 (3e-8 for a million).
"""

try:
    from .layout import TOKEN_SIZE
except ImportError:
    from layout import TOKEN_SIZE


def new_token(rng):
    """Draw ``TOKEN_SIZE`` random bytes, 16 bits at a time (small ints on every port)."""
    out = bytearray(TOKEN_SIZE)
    for i in range(0, TOKEN_SIZE, 2):
        r = rng.getrandbits(16)
        out[i] = r >> 8
        out[i + 1] = r & 0xFF
    return bytes(out)
