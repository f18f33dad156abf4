"""What the dashboard shows, behind one small interface, and its implementation over the results API.

    source = StoreSource(lambda: open_analyst_store(url))
    source.summary().stored, source.windows(20), source.devices(), source.candidates(3)

Every page element and every metric is read through ``DashboardSource``; nothing in the
server or the metrics knows where the numbers come from. A value the source does not know is
``None`` (shown as such on the page, exported as a metric without a sample), never a guess.

``StoreSource`` reads the analyst's store through ``dpsense.cloud.ops.results`` only: counters the
store keeps in the transaction of what they count, windows and devices by aggregate queries,
so a refresh costs about the same with 1,000 readings or 1,000,000. The plot of a window also
needs the readings' released values, which the results API deliberately leaves out; those are
read once per done window with ``AnalystStore.window_members`` (the read the analyst's detector
makes) and cached, since a done window never changes.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Callable, Protocol, TypeVar, cast

from dpsense.cloud.ops import results
from dpsense.cloud.ops.results import DeviceRow, Event, WindowRecord
from dpsense.cloud.storage.repository import AnalystStore

__all__ = ["AGGREGATE_SPAN_S", "AGGREGATE_WINDOW_S", "MAX_POINTS", "RATE_WINDOW_S", "SHOWN_STATES", "Aggregates", "Aggregator", "Band", "DashboardSource", "Histogram", "Histogrammer",
           "DeviceRow", "Event", "Point",
           "StoreSource", "Summary", "WindowCandidates", "WindowRecord"]

RATE_WINDOW_S = 60
"""The ingest rate is the growth of the stored-readings counter since the latest refresh at least this
many seconds ago (or since the first refresh), per second."""

AGGREGATE_WINDOW_S = 600
"""The page's and the metrics' aggregate window: a mean per 10 minutes (the page shows the last
``AGGREGATE_SPAN_S``)."""

AGGREGATE_SPAN_S = 24 * 3600

MAX_POINTS = 5000
"""At most this many candidates, removed false positives and context readings per window."""

SHOWN_STATES = ("closed", "held", "done")
"""Windows the page lists: done, or awaiting their round. Carried windows are told as events."""

T = TypeVar("T")


@dataclass(frozen=True)
class Summary:
    """Fleet-wide counters (``results.Metrics``) and the ingest rate."""

    ingested: int                   # messages the ingest committed: readings, duplicates, dead letters
    stored: int                     # readings stored (unique device, boot, seq)
    duplicates: int                 # readings received again (QoS 1 redelivery, resends)
    dead_letters: int               # messages kept as dead letters instead of data
    gaps: int                       # sequence numbers missing, over every device boot
    windows_closed: int
    windows_held: int               # closed windows whose round has not completed (yet)
    rounds_completed: int
    rounds_failed: int              # round attempts that ended with the window held
    round_seconds_total: float      # summed duration of the completed rounds
    last_round_s: float | None      # the round of the most recent done window
    readings_carried: int           # readings of windows below the minimum, each time carried
    candidates: int                 # candidates over every done window
    rate: float | None              # readings stored per second; None until two refreshes apart
    clock_steps: int = 0            # wall-clock steps the analyst saw and rode through


@dataclass(frozen=True)
class Band:
    """One time window's mean of a column in physical units, with its interval: an estimate
    from the released readings (``dpsense aggregate``), which spends no privacy budget."""

    start: float
    end: float
    n: int
    value: float
    lo: float
    hi: float


@dataclass(frozen=True)
class Aggregates:
    """Per group, the windows' ``Band`` of one column, oldest first; ``note`` says why there is
    nothing (no profile yet) or what the numbers are (the no-budget statement)."""

    column: int
    columns: int
    window_s: float
    level: float
    groups: dict[str, list[Band]]
    note: str


@dataclass(frozen=True)
class Histogram:
    """A group's latest window with readings, one column: per bin (``labels``, physical units)
    the released values' count, noise and all, and the deconvolved estimate of the readings'
    count with its interval (``dpsense aggregate --stat histogram``; no privacy budget spent)."""

    group: str
    column: int
    start: float
    end: float
    n: int
    labels: list[str]
    released: list[int]
    value: list[float]
    lo: list[float]
    hi: list[float]
    note: str


# (store, column, window_s, since, until) -> Aggregates, or None when there is no profile: the
# caller (the dashboard command) wires the estimators and the profile in.
Aggregator = Callable[[AnalystStore, int, float, float, float], "Aggregates | None"]
# (store, group, column, window_s, since, until) -> the latest window's Histogram, or None.
Histogrammer = Callable[[AnalystStore, str, int, float, float, float], "Histogram | None"]


@dataclass(frozen=True)
class Point:
    """A reading of a window, perturbed values only."""

    index: int                      # position in the window, in arrival order
    device: int
    boot: int
    seq: int
    values: tuple[int, ...]         # quanta of each column, as released by the board


@dataclass(frozen=True)
class WindowCandidates:
    """A done window's candidates for the plot, with the removed false positives and a sample of the rest."""

    window: int
    group: str
    group_window: int               # the window's number within its group
    readings: int
    columns: int
    presumed: tuple[Point, ...]     # presumed outliers the round kept
    added: tuple[Point, ...]        # false negatives the round added
    removed: tuple[Point, ...]      # presumed outliers the round removed as false positives
    others: tuple[Point, ...]       # an evenly spaced sample of the window's other readings
    candidates: int                 # all candidates; presumed + added may hold fewer (MAX_POINTS)


class DashboardSource(Protocol):
    """Everything the dashboard and ``/metrics`` read. Methods may raise ``StorageError``."""

    def summary(self) -> Summary:
        """Fleet-wide counters."""

    def windows(self, limit: int) -> list[WindowRecord]:
        """Up to ``limit`` windows in ``SHOWN_STATES``, the most recent first."""

    def devices(self) -> list[DeviceRow]:
        """Every device with a group, a reading or a status message, by device id."""

    def backlog(self) -> list[results.Backlog]:
        """Per group: readings not in a window yet, windows awaiting their verdict."""

    def aggregates(self, column: int, window_s: float, span_s: float) -> Aggregates | None:
        """Each group's mean of ``column`` per window of ``window_s`` over the last ``span_s``
        seconds, with intervals; None when the source has no aggregator or no profile."""

    def histogram(self, group: str, column: int, window_s: float, span_s: float) -> Histogram | None:
        """``group``'s latest window of ``window_s`` with readings in the last ``span_s`` seconds:
        released counts and deconvolved estimates per bin; None without readings or a profile."""

    def dead_letter_reasons(self) -> dict[str, int]:
        """Dead-lettered messages per kind of reason (``results.dead_letter_reasons``)."""

    def events(self, limit: int) -> list[Event]:
        """The analyst's latest status entries (carried windows, held rounds), newest first."""

    def candidates(self, window: int, group: str | None = None) -> WindowCandidates | None:
        """The candidates of one done window (of ``group`` when given), or None if there is none."""


class StoreSource:
    """``DashboardSource`` over an ``AnalystStore``; safe to call from several threads.

    ``open_store`` is called for every read and the store closed after it, so the source holds
    no connection between requests (an SQLite store may only be used by the thread that opened
    it). Reads of the same kind closer together than ``min_interval`` share one answer, so
    several open pages and a Prometheus scrape cost one read; and a read is not repeated sooner
    than ``1 / cost_share`` times its own duration after it (None: no such limit), because the per-device and gap
    aggregates grow with the store (about 0.1 s per poll at 100,000 readings, bench/dashboard.py):
    on a large store the page refreshes less often instead of taking a core.
    """

    _DETAIL_CACHE = 8

    def __init__(self, open_store: Callable[[], AnalystStore], *, min_interval: float = 0.5,
                 cost_share: float | None = 0.1, clock: Callable[[], float] = time.time,
                 aggregator: Aggregator | None = None, histogrammer: Histogrammer | None = None) -> None:
        if cost_share is not None and not 0 < cost_share <= 1:
            raise ValueError("cost_share must be in (0, 1] or None, got %r" % (cost_share,))
        self._open = open_store
        self._aggregator = aggregator
        self._histogrammer = histogrammer
        self._min_interval = min_interval
        self._cost_share = cost_share
        self._clock = clock
        self._lock = threading.Lock()
        self._memo: dict[str, tuple[float, float, object]] = {}        # key -> (done at, took, value)
        self._stored: deque[tuple[float, int]] = deque()        # (clock, readings stored) per refresh
        self._details: OrderedDict[int, WindowCandidates] = OrderedDict()

    # -- DashboardSource -------------------------------------------------------------
    def summary(self) -> Summary:
        with self._lock:
            return self._cached("summary", self._read_summary)

    def windows(self, limit: int) -> list[WindowRecord]:
        if limit < 0:
            raise ValueError("limit must be >= 0")
        with self._lock:
            return self._cached("windows:%d" % limit, lambda: self._read(
                lambda s: list(reversed(results.windows(s, limit=limit, states=SHOWN_STATES))) if limit else []))

    def devices(self) -> list[DeviceRow]:
        with self._lock:
            return self._cached("devices", lambda: self._read(results.devices))

    def aggregates(self, column: int, window_s: float, span_s: float) -> Aggregates | None:
        if not (window_s >= 1 and span_s >= window_s):
            raise ValueError("need window >= 1 s and span >= window")
        agg = self._aggregator
        if agg is None:
            return None
        now = self._clock()
        with self._lock:
            return self._cached("aggregates:%d:%g:%g" % (column, window_s, span_s), lambda: self._read(
                lambda s: agg(s, column, window_s, now - span_s, now + 1)))

    def histogram(self, group: str, column: int, window_s: float, span_s: float) -> Histogram | None:
        if not (window_s >= 1 and span_s >= window_s):
            raise ValueError("need window >= 1 s and span >= window")
        h = self._histogrammer
        if h is None:
            return None
        now = self._clock()
        with self._lock:
            return self._cached("histogram:%s:%d:%g:%g" % (group, column, window_s, span_s), lambda: self._read(
                lambda s: h(s, group, column, window_s, now - span_s, now + 1)))

    def backlog(self) -> list[results.Backlog]:
        with self._lock:
            return self._cached("backlog", lambda: self._read(results.backlog))

    def dead_letter_reasons(self) -> dict[str, int]:
        with self._lock:
            return self._cached("dead letters", lambda: self._read(results.dead_letter_reasons))

    def events(self, limit: int) -> list[Event]:
        if limit < 0:
            raise ValueError("limit must be >= 0")
        with self._lock:
            return self._cached("events:%d" % limit, lambda: self._read(lambda s: results.events(s, limit)))

    def candidates(self, window: int, group: str | None = None) -> WindowCandidates | None:
        with self._lock:
            detail = self._details.get(window)
            if detail is None:
                detail = self._read(lambda s: _window_candidates(s, window))
                if detail is None:
                    return None
                self._details[window] = detail
                while len(self._details) > self._DETAIL_CACHE:
                    self._details.popitem(last=False)
            self._details.move_to_end(window)
            return detail if group is None or detail.group == group else None

    # -- reads ---------------------------------------------------------------------------
    def _read(self, f: Callable[[AnalystStore], T]) -> T:
        with self._open() as store:
            return f(store)

    def _cached(self, key: str, f: Callable[[], T]) -> T:
        hit = self._memo.get(key)
        if hit is not None:
            done, took, value = hit
            wait = self._min_interval if self._cost_share is None else max(self._min_interval,
                                                                            took / self._cost_share)
            if time.monotonic() - done < wait:
                return cast(T, value)       # each key is only ever stored by one method
        t0 = time.monotonic()
        fresh = f()
        done = time.monotonic()
        self._memo[key] = (done, done - t0, fresh)
        return fresh

    def _read_summary(self) -> Summary:
        m = self._read(results.metrics)
        now = self._clock()
        samples = self._stored
        samples.append((now, m.stored))
        while len(samples) > 2 and samples[1][0] <= now - RATE_WINDOW_S:
            samples.popleft()
        t0, n0 = samples[0]
        rate = (m.stored - n0) / (now - t0) if now - t0 >= 1.0 and m.stored >= n0 else None
        return Summary(ingested=m.ingested, stored=m.stored, duplicates=m.duplicates, dead_letters=m.dead_letters,
                       gaps=m.gaps, windows_closed=m.windows_closed, windows_held=m.windows_held,
                       rounds_completed=m.rounds_completed, rounds_failed=m.rounds_failed,
                       round_seconds_total=m.round_seconds_total, last_round_s=m.last_round_seconds,
                       readings_carried=m.readings_carried, candidates=m.candidates, rate=rate,
                       clock_steps=m.clock_steps)


def _window_candidates(store: AnalystStore, window: int) -> WindowCandidates | None:
    """A done window's readings split by verdict (one read of its members and of its verdicts)."""
    w = results.window(store, window)
    if w is None or w.state != "done":
        return None
    verdicts = {v.row_id: v for v in results.candidates(store, window=window, all_verdicts=True)}
    m = store.window_members(window)
    n = len(m.row_ids)
    others_total = n - len(verdicts)
    step = max(1, -(-others_total // MAX_POINTS))
    kept: list[Point] = []
    added: list[Point] = []
    removed: list[Point] = []
    others: list[Point] = []
    seen_other = 0
    for index in range(n):
        v = verdicts.get(int(m.row_ids[index]))
        if v is None:
            seen_other += 1
            if (seen_other - 1) % step:
                continue
            target = others
        else:
            target = added if v.added_fn else kept if v.candidate else removed
        if len(target) < MAX_POINTS:
            target.append(Point(index, int(m.device_ids[index]), int(m.boot_ids[index]), int(m.seqs[index]),
                                tuple(int(x) for x in m.values[index])))
    return WindowCandidates(window=w.id, group=w.group, group_window=w.seq, readings=n,
                            columns=int(m.values.shape[1]) if m.values.ndim == 2 else 0, presumed=tuple(kept),
                            added=tuple(added), removed=tuple(removed), others=tuple(others),
                            candidates=sum(1 for v in verdicts.values() if v.candidate))
