"""Arrival time that a wall-clock step cannot move: the ingest's stamps and the analyst's windows.

    clock = ArrivalClock(log=print)     # wall=time.time, mono=time.monotonic by default
    t = clock()                         # Unix seconds, never stepping
    clock.steps, clock.skew             # steps seen, wall clock minus this clock (seconds)

A reading's arrival time decides its time window, and the analyst closes a window once its
clock passes the window's end (cloud/analyst/windows.py). Read from the wall clock, a step
(an NTP correction of +-1 h, a hand-set clock) would stamp the readings after it an hour
apart from the ones before: stepped forward, the open window closes at once, early;
stepped back, the readings after it sort before those already stored and every window
waits for as long as the step. So this clock is the wall clock at start, then advances with
the monotonic clock, which never steps. When the wall clock moves against the monotonic clock
by more than ``tolerance`` seconds between two calls, that is a step: counted in ``steps``
and said once in the log (with its size); ``on_step(jump)`` is called so the owner can record
it. The clock then drifts
back towards the wall clock at most ``slew`` seconds per second (5%: a 1 h step is absorbed
in 20 h, windows meanwhile 5% longer or shorter), so a wall clock that was wrong and got
corrected is followed in the end, never by a jump.
"""
from __future__ import annotations

import time
from typing import Callable

TOLERANCE_S = 2.0      # wall clock and monotonic clock may part by this much without a step
SLEW = 0.05            # seconds of convergence towards the wall clock per second


class ArrivalClock:
    """Callable returning Unix seconds that advance with the monotonic clock (see the module)."""

    def __init__(self, wall: Callable[[], float] = time.time, mono: Callable[[], float] = time.monotonic,
                 log: Callable[[str], None] | None = None, on_step: Callable[[float], None] | None = None,
                 tolerance: float = TOLERANCE_S, slew: float = SLEW, who: str = "clock") -> None:
        if not (tolerance > 0 and 0 <= slew < 1):
            raise ValueError("tolerance must be > 0 and slew in [0, 1)")
        self._wall = wall
        self._mono = mono
        self.log = log
        self.on_step = on_step
        self.tolerance = tolerance
        self.slew = slew
        self.who = who
        m = mono()
        w = wall()
        self._offset = w - m            # this clock = monotonic + offset
        self._apart = w - m             # wall minus monotonic at the last call
        self._last_m = m
        self._last_t = w
        self.steps = 0
        self.skew = 0.0

    def __call__(self) -> float:
        m = self._mono()
        w = self._wall()
        jump = (w - m) - self._apart
        self._apart = w - m
        if abs(jump) > self.tolerance:
            self.steps += 1
            if self.log is not None:
                self.log("%s: the wall clock stepped by %+.1f s; arrival times keep to the monotonic clock "
                         "and converge on the wall clock at %g%% of its rate (windows neither close early nor "
                         "wait for the step)" % (self.who, jump, 100 * self.slew))
            if self.on_step is not None:
                self.on_step(jump)
        dm = max(0.0, m - self._last_m)
        t = m + self._offset
        skew = w - t
        if abs(skew) > self.tolerance / 2:
            # Converge at a bounded rate, never past the wall clock.
            move = min(abs(skew), self.slew * dm)
            self._offset += move if skew > 0 else -move
            t = m + self._offset
        self.skew = w - t
        t = max(t, self._last_t)        # never backwards, whatever the clocks do
        self._last_m, self._last_t = m, t
        return t
