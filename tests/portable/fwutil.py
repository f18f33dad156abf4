"""Fakes for the firmware's portable tests: a socket, a clock, scratch file paths."""
import os
import sys

if "firmware" not in sys.path:
    sys.path.insert(0, "firmware")


def scratch(name):
    """A fresh file path in the temp folder (removed first if it exists)."""
    try:
        import tempfile
        d = tempfile.gettempdir()
    except ImportError:       # MicroPython
        d = "/tmp"
    p = "%s/dpsense-portable-%d-%s" % (d, os.getpid() if hasattr(os, "getpid") else 0, name)
    remove(p)
    return p


def remove(path):
    try:
        os.remove(path)
    except OSError:
        pass


class FakeClock:
    """``time``-module shaped clock that moves only when told."""

    def __init__(self, ms=0):
        self.ms = ms

    def ticks_ms(self):
        return self.ms

    def ticks_diff(self, a, b):
        return a - b

    def ticks_add(self, a, b):
        return a + b

    def time(self):
        return self.ms // 1000

    def ticks_us(self):
        return self.ms * 1000

    def sleep_ms(self, ms):
        self.ms += ms

    def sleep_us(self, us):
        # Millisecond resolution: a poll of ticks_ms that sleeps 0 us moves on to the next edge.
        self.ms += max(1, (us + 999) // 1000)


class FakeSock:
    """Bytes in ``rx`` are what the broker sent; everything written lands in ``tx``.

    ``read`` returns None when nothing is queued (a non-blocking socket), b"" after
    ``hang_up()``, like MicroPython's socket.
    """

    def __init__(self, rx=b""):
        self.rx = bytes(rx)
        self.tx = bytearray()
        self.eof = False
        self.closed = False

    def feed(self, data):
        self.rx += data

    def hang_up(self):
        self.eof = True

    def setblocking(self, flag):
        pass

    def settimeout(self, t):
        pass

    def read(self, n):
        if not self.rx:
            return b"" if self.eof else None
        out = self.rx[:n]
        self.rx = self.rx[n:]
        return out

    def write(self, data):
        if self.closed or self.eof:
            raise OSError(32)
        self.tx += bytes(data)
        return len(data)

    def close(self):
        self.closed = True


class RandomBits:
    """A fixed ``getrandbits`` for jitter: always zero."""

    def getrandbits(self, k):
        return 0


def seal_key(name):
    """A board's key file (shared_protocol/seal.py: enc || mac) with the vectors' keys, as
    provisioning writes it next to a fresh ledger; its path."""
    from tests import vectors
    p = scratch(name)
    f = open(p, "wb")
    f.write(vectors.SEAL_ENC_KEY + vectors.SEAL_MAC_KEY)
    f.close()
    return p
