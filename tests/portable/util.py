"""Helpers for portable tests (no pytest: these also run under MicroPython)."""


def raises(exc, fn, *args):
    """Call ``fn(*args)``; return the exception if it is an ``exc``, fail otherwise."""
    try:
        fn(*args)
    except exc as e:
        return e
    raise AssertionError("%s(%r) did not raise %s" % (getattr(fn, "__name__", fn), args, exc.__name__))


class FakeRandom:
    """``getrandbits`` that returns queued values, to drive code paths exactly."""

    def __init__(self, values):
        self.values = list(values)
        self.calls = []

    def getrandbits(self, k):
        self.calls.append(k)
        return self.values.pop(0)
