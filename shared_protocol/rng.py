"""Random sources behind one method, ``getrandbits(k)``.

    rng = XorShift32(1)          # deterministic, same stream on every interpreter
    rng.getrandbits(16)
    hw = UrandomRNG()            # os.urandom: hardware entropy where the port has it

Everything that needs randomness takes such an object as an argument, so tests can
inject a seeded source and boards the hardware RNG. Callers in this package never
ask for more than ``MAX_BITS`` bits at once (the micro:bit's ``random.getrandbits``
limit, and the largest value that is still a small int on 32-bit MicroPython).
"""

MAX_BITS = 30
_MASK32 = 0xFFFFFFFF


def bit_length(n):
    """Number of bits of a non-negative int (MicroPython 1.9 has no int.bit_length)."""
    k = 0
    while n >= 0x10000:
        n >>= 16
        k += 16
    while n:
        n >>= 1
        k += 1
    return k


def fmix32(h):
    """murmur3's 32-bit finaliser: an avalanche bijection on 0..2**32-1."""
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _MASK32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _MASK32
    h ^= h >> 16
    return h


class XorShift32:
    """Marsaglia's xorshift32 (13, 17, 5). Not cryptographic: for tests and vectors.

    The seed goes through murmur3's ``fmix32`` (a bijection with no fixed point but 0)
    first: a small seed such as 1 would otherwise start with many zero top bits and
    bias the first few dozen draws. ``getrandbits(k)`` returns the top ``k`` bits of
    the next 32-bit state.
    """

    def __init__(self, seed):
        if not isinstance(seed, int) or seed <= 0 or seed > _MASK32:
            raise ValueError("seed must be an int in 1..2**32-1")
        self._x = fmix32(seed)

    def next32(self):
        x = self._x
        x ^= (x << 13) & _MASK32
        x ^= x >> 17
        x ^= (x << 5) & _MASK32
        self._x = x
        return x

    def getrandbits(self, k):
        if k < 0 or k > 32:
            raise ValueError("bits must be in 0..32")
        if k == 0:
            return 0
        return self.next32() >> (32 - k)


class UrandomRNG:
    """``getrandbits`` over ``os.urandom`` (hardware RNG on ESP32, RP2040, Linux).

    Bytes are fetched in blocks of ``block`` and never reused. Raises
    ``AttributeError``/``ImportError`` at construction on ports without
    ``os.urandom`` (the micro:bit): firmware/app.py then releases nothing.
    """

    def __init__(self, urandom=None, block=32):
        if urandom is None:
            import os
            urandom = os.urandom
        if block < 4:
            raise ValueError("block must be >= 4")
        self._urandom = urandom
        self._block = block
        self._buf = b""
        self._pos = 0

    def _byte(self):
        if self._pos >= len(self._buf):
            self._buf = self._urandom(self._block)
            if len(self._buf) != self._block:
                raise OSError("entropy source returned %d bytes" % len(self._buf))
            self._pos = 0
        b = self._buf[self._pos]
        self._pos += 1
        return b

    def getrandbits(self, k):
        if k < 0 or k > 32:
            raise ValueError("bits must be in 0..32")
        n = (k + 7) >> 3
        r = 0
        for _ in range(n):
            r = (r << 8) | self._byte()
        return r >> (8 * n - k)


def uniform_below(rng, m):
    """Exactly uniform int in ``0..m-1`` by rejection; any ``m >= 1``."""
    if m < 1:
        raise ValueError("m must be >= 1")
    if m == 1:
        return 0
    k = bit_length(m - 1)
    if k <= MAX_BITS:
        while True:
            r = rng.getrandbits(k)
            if r < m:
                return r
    while True:
        r = 0
        left = k
        while left > 0:
            c = MAX_BITS if left > MAX_BITS else left
            r = (r << c) | rng.getrandbits(c)
            left -= c
        if r < m:
            return r
