"""Detection windows: how the analyst cuts the stream of readings, and how small a window may be.

    spec = parse_window("30s")          # tumbling windows of 30 s of arrival time
    spec = parse_window("100000")       # windows of 100,000 readings in arrival order
    floor = min_window_size("dbscan", 60)    # 120: smaller windows are carried, never scored

Time windows are aligned to multiples of their length since the Unix epoch (``15m`` windows
close at :00, :15, :30 and :45 UTC), the same boundaries for every device group, so windows of
different groups cover the same intervals. A reading belongs to the window whose interval holds
its arrival time (stored by the ingest when the broker delivered it; nothing on the wire).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_TIME = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([smhd])")
MIN_SECONDS = 1.0


@dataclass(frozen=True)
class WindowSpec:
    """Either ``count`` readings per window, or ``seconds`` of arrival time per window."""

    count: int | None = None
    seconds: float | None = None

    def __post_init__(self) -> None:
        if (self.count is None) == (self.seconds is None):
            raise ValueError("a window is a number of readings or a duration, not both or neither")
        if self.count is not None and self.count < 2:
            raise ValueError("a count window holds at least 2 readings")
        if self.seconds is not None and not (math.isfinite(self.seconds) and self.seconds >= MIN_SECONDS):
            raise ValueError("a time window lasts at least %g s" % MIN_SECONDS)

    @property
    def kind(self) -> str:
        return "count" if self.count is not None else "time"

    def describe(self) -> str:
        if self.count is not None:
            return "%d readings" % self.count
        return format_duration(self.seconds or 0.0)

    def interval_end(self, t: float) -> float:
        """End of the time window whose interval holds ``t``."""
        assert self.seconds is not None
        return (math.floor(t / self.seconds) + 1) * self.seconds

    def interval_start(self, t: float) -> float:
        assert self.seconds is not None
        return math.floor(t / self.seconds) * self.seconds


def parse_window(text: str) -> WindowSpec:
    """``"30s"``, ``"15m"``, ``"1h"``, ``"1d"`` (time) or ``"100000"`` (count)."""
    t = text.strip().lower()
    if t.isdigit():
        return WindowSpec(count=int(t))
    m = _TIME.fullmatch(t)
    if m is None:
        raise ValueError("--window is a number of readings (100000) or a duration (30s, 15m, 1h), got %r" % text)
    return WindowSpec(seconds=float(m.group(1)) * _UNITS[m.group(2)])


def format_duration(seconds: float) -> str:
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if seconds >= size and seconds % size == 0:
            return "%d%s" % (seconds // size, unit)
    return "%gs" % seconds


def support(detector: str, min_samples: int) -> int:
    """Readings a reading needs within the radius, itself included, to be an inlier.

    DBSCAN: ``min_samples`` (a core point counts itself); (k, r) outliers: k others, so
    ``k + 1``; (beta, r) anomalies: more than ``beta``, so ``beta + 1``.
    """
    if detector == "dbscan":
        return min_samples
    if detector in ("kr", "beta_r"):
        return min_samples + 1
    raise ValueError("unknown detector %r" % detector)


def min_window_size(detector: str, min_samples: int) -> int:
    """The smallest window the analyst scores: twice the detector's support.

    Below the support no reading can be an inlier, so the detector would flag the whole
    window by construction. The detectors assume one population in which outliers are
    rare; a window must hold a full neighbourhood of inliers and as many readings again
    before "most of these are normal" can hold, hence twice the support. Smaller windows
    are carried into the next window of their group.
    """
    return 2 * support(detector, min_samples)
