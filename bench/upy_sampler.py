"""Sampler throughput on the interpreter that runs this file; one JSON line per cell.

    micropython bench/upy_sampler.py [ROOT [BUDGET_MS]]
    python bench/upy_sampler.py [ROOT [BUDGET_MS]]

``bench/sampler.py`` runs it under CPython and under the MicroPython unix port and
formats the table. The code is the same on both, so the two rows differ by
interpreter only. Each cell runs for about ``BUDGET_MS`` milliseconds (default 500)
and reports samples per second:

* ``DiscreteLaplace`` at scales 1, 7.3, 1000 and 100000 quanta with three random
  sources: the interpreter's ``random`` (``random.Random`` where it exists; the
  module itself on MicroPython, which has no class), ``XorShift32`` and
  ``UrandomRNG`` over ``os.urandom``;
* the naive float Laplace ``-b * sign * log(1 - 2|u - 1/2|)`` with
  ``u = random.random()``, at the same scales: the fast sampler the exact one
  replaces, measured in the same process for a fair ratio.
"""

import json
import math
import random
import sys

try:
    from time import ticks_diff, ticks_us
except ImportError:  # CPython
    from time import perf_counter_ns

    def ticks_us():
        return perf_counter_ns() // 1000

    def ticks_diff(a, b):
        return a - b


SCALES = ((1, 1), (73, 10), (1000, 1), (100000, 1))
BATCH = 50


def rate(fn, budget_us):
    """Calls of ``fn`` per second, over at least ``budget_us`` microseconds."""
    n = 0
    t0 = ticks_us()
    while True:
        for _ in range(BATCH):
            fn()
        n += BATCH
        elapsed = ticks_diff(ticks_us(), t0)
        if elapsed >= budget_us:
            return n * 1000000.0 / elapsed


def naive_laplace(b):
    """The textbook float sampler (not DP on float hardware: Mironov 2012)."""
    rnd = random.random
    log = math.log

    def sample():
        u = rnd()
        while u == 0.0:
            u = rnd()
        d = u - 0.5
        s = 1.0 if d >= 0 else -1.0
        return -b * s * log(1.0 - 2.0 * abs(d))

    return sample


def sources():
    """(label, rng) pairs, built fresh for each cell."""
    if hasattr(random, "Random"):
        default = ("random.Random", lambda: random.Random(1))
    else:
        default = ("random (module)", lambda: random)
    return (
        default,
        ("XorShift32", lambda: XorShift32(1)),
        ("UrandomRNG", lambda: UrandomRNG()),
    )


def emit(**row):
    print(json.dumps(row))


def main(budget_ms):
    impl = sys.implementation
    interp = "%s %s" % (impl.name, ".".join(str(v) for v in impl.version[:3]))
    budget_us = budget_ms * 1000
    for num, den in SCALES:
        scale = num / den
        emit(interp=interp, kind="naive", rng="random.random", num=num, den=den,
             rate=rate(naive_laplace(scale), budget_us))
        for label, make in sources():
            emit(interp=interp, kind="exact", rng=label, num=num, den=den,
                 rate=rate(DiscreteLaplace(num, den, make()).sample, budget_us))


root = sys.argv[1] if len(sys.argv) > 1 else "."
sys.path.insert(0, root)

from shared_protocol.noise import DiscreteLaplace  # noqa: E402
from shared_protocol.rng import UrandomRNG, XorShift32  # noqa: E402

if __name__ == "__main__":
    main(int(sys.argv[2]) if len(sys.argv) > 2 else 500)
