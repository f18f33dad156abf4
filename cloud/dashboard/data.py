"""What the dashboard shows, behind one small interface, and its implementation over the analyst's store.

    source = StoreSource(lambda: open_analyst_store(url))
    source.summary().stored, source.windows(20), source.devices(), source.candidates(3)

Every page element and every metric is read through ``DashboardSource``; nothing in the
server or the metrics knows where the numbers come from. A value the source does not know is
``None`` (shown as "not recorded", exported as a metric without a sample), never a guess.

``StoreSource`` reads today's ``AnalystStore`` only through its public methods. It walks the
readings once, remembering the last row id it saw, so each refresh reads only what arrived
since; each closed window's rows are read once, to tie its candidates to devices.
"""
from __future__ import annotations

import threading
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from dpsense.cloud.storage.repository import AnalystStore, StorageError

RATE_WINDOW_S = 60
"""The ingest rate is the readings stored in this many seconds up to now, divided by it."""

LATENCY_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""Upper bounds of the round-latency histogram, in seconds."""

MAX_POINTS = 5000
"""At most this many candidates, removed false positives and context readings per window."""


@dataclass(frozen=True)
class Latency:
    """Durations of the correction rounds that completed: a histogram over ``LATENCY_BUCKETS_S``."""

    count: int
    total_s: float
    buckets: tuple[int, ...]        # cumulative: rounds that took at most LATENCY_BUCKETS_S[i]
    last_s: float | None            # the most recent window's round


@dataclass(frozen=True)
class Summary:
    """Fleet-wide counters. ``None`` means the source does not record that number."""

    stored: int                     # readings stored (unique device, boot, seq)
    dead_letters: int               # messages kept as dead letters instead of data
    missing: int                    # sequence numbers missing, over every device boot
    boots_with_gaps: int            # device boots with at least one missing sequence number
    rate: float                     # readings stored per second over the last RATE_WINDOW_S
    ingested: int | None            # messages the ingest took in: stored + duplicates + dead letters
    duplicates: int | None          # re-deliveries and retransmissions the store ignored
    windows_closed: int | None
    rounds_failed: int | None
    latency: Latency | None         # correction rounds


@dataclass(frozen=True)
class WindowRow:
    """One detection window's outcome."""

    window: int
    group: str | None               # device group; None while every device is in one group
    readings: int
    presumed: int                   # flagged by the detector on the perturbed readings
    false_positives: int            # presumed outliers the correction round removed
    false_negatives: int            # readings the correction round added
    candidates: int                 # presumed - false positives + false negatives
    missing_corrections: int | None     # readings the correction server had no record for
    split_accepted: bool | None
    round_s: float | None
    closed_at: float | None         # arrival time (Unix seconds) of the window's last reading


@dataclass(frozen=True)
class DeviceRow:
    """One device's readings as stored."""

    device: int
    readings: int
    boots: int
    missing: int                    # sequence numbers missing over its boots
    last_seen: float | None         # arrival time (Unix seconds) of its latest stored reading
    candidates: int | None          # its readings among the candidates of closed windows


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
    """A window's candidates for the plot, with the removed false positives and a sample of the rest."""

    window: int
    group: str | None
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

    def windows(self, limit: int) -> list[WindowRow]:
        """Up to ``limit`` closed windows, the most recent first."""

    def devices(self) -> list[DeviceRow]:
        """Every device with a stored reading, by device id."""

    def candidates(self, window: int, group: str | None = None) -> WindowCandidates | None:
        """The candidates of one closed window, or None if there is no such window."""


@dataclass
class _Boot:
    first_seq: int
    last_seq: int
    received: int
    last_seen: float


@dataclass(frozen=True)
class _Walked:
    """What a window's rows told once: when it closed and how many candidates each device had."""

    closed_at: float | None
    per_device: dict[int, int]


class StoreSource:
    """``DashboardSource`` over an ``AnalystStore``; safe to call from several threads.

    ``open_store`` is called for every refresh and the store closed after it, so the source
    holds no connection between requests (an SQLite store may only be used by the thread
    that opened it). Refreshes closer together than ``min_interval`` reuse the last one.
    """

    _WALK_BATCH = 10_000
    _DETAIL_CACHE = 8

    def __init__(self, open_store: Callable[[], AnalystStore], *, min_interval: float = 0.5,
                 clock: Callable[[], float] = time.time) -> None:
        self._open = open_store
        self._min_interval = min_interval
        self._clock = clock
        self._lock = threading.Lock()
        self._refreshed = float("-inf")
        self._after = 0                                     # last row id walked
        self._boots: dict[tuple[int, int], _Boot] = {}
        self._arrivals: Counter[int] = Counter()            # readings per whole second of arrival
        self._dead = 0
        self._results: list[tuple[int, dict[str, Any]]] = []
        self._walked: dict[int, _Walked] = {}
        self._details: OrderedDict[int, WindowCandidates] = OrderedDict()

    # -- DashboardSource -------------------------------------------------------------
    def summary(self) -> Summary:
        with self._lock:
            self._refresh()
            now = self._clock()
            recent = sum(n for second, n in self._arrivals.items() if second > now - RATE_WINDOW_S)
            missing = [b.last_seq - b.first_seq + 1 - b.received for b in self._boots.values()]
            rounds = [float(p["round_s"]) for _, p in self._results if p.get("round_s") is not None]
            latency = None
            if rounds:
                latency = Latency(len(rounds), sum(rounds),
                                  tuple(sum(1 for r in rounds if r <= b) for b in LATENCY_BUCKETS_S), rounds[-1])
            return Summary(
                stored=sum(b.received for b in self._boots.values()), dead_letters=self._dead,
                missing=sum(missing), boots_with_gaps=sum(1 for m in missing if m > 0),
                rate=recent / RATE_WINDOW_S,
                # Today's store drops exact re-deliveries without a trace and keeps no count of
                # failed rounds, so these are unknown rather than zero.
                ingested=None, duplicates=None, rounds_failed=None,
                windows_closed=len(self._results), latency=latency)

    def windows(self, limit: int) -> list[WindowRow]:
        if limit < 0:
            raise ValueError("limit must be >= 0")
        with self._lock:
            self._refresh()
            rows = []
            for window, p in reversed(self._results[-limit:] if limit else []):
                walked = self._walked.get(window)
                rows.append(WindowRow(
                    window=window, group=None, readings=int(p["n"]), presumed=int(p["presumed"]),
                    false_positives=int(p["fp"]), false_negatives=int(p["fn"]), candidates=int(p["candidates"]),
                    missing_corrections=_int_or_none(p.get("missing_corrections")),
                    split_accepted=None if p.get("split_accepted") is None else bool(p["split_accepted"]),
                    round_s=None if p.get("round_s") is None else float(p["round_s"]),
                    closed_at=walked.closed_at if walked else None))
            return rows

    def devices(self) -> list[DeviceRow]:
        with self._lock:
            self._refresh()
            per_device: dict[int, list[_Boot]] = {}
            for (device, _), boot in self._boots.items():
                per_device.setdefault(device, []).append(boot)
            candidates: Counter[int] = Counter()
            for walked in self._walked.values():
                candidates.update(walked.per_device)
            return [DeviceRow(device=d, readings=sum(b.received for b in boots), boots=len(boots),
                              missing=sum(b.last_seq - b.first_seq + 1 - b.received for b in boots),
                              last_seen=max(b.last_seen for b in boots), candidates=candidates.get(d, 0))
                    for d, boots in sorted(per_device.items())]

    def candidates(self, window: int, group: str | None = None) -> WindowCandidates | None:
        with self._lock:
            self._refresh()
            if group is not None:
                return None                 # today's windows span every device: no groups
            if window in self._details:
                self._details.move_to_end(window)
                return self._details[window]
            payload = dict(self._results).get(window)
            if payload is None:
                return None
            with self._open() as store:
                detail, _ = self._walk_window(store, window, payload)
            self._remember(window, detail)
            return detail

    # -- refresh -----------------------------------------------------------------------
    def _refresh(self) -> None:
        now = time.monotonic()
        if now - self._refreshed < self._min_interval:
            return
        with self._open() as store:
            self._walk_readings(store)
            self._dead = store.dead_letter_count()
            self._results = store.window_results()
            for window, payload in self._results:
                if window not in self._walked:
                    detail, walked = self._walk_window(store, window, payload)
                    self._walked[window] = walked
                    self._remember(window, detail)
        horizon = int(self._clock()) - RATE_WINDOW_S
        for second in [s for s in self._arrivals if s < horizon]:
            del self._arrivals[second]
        self._refreshed = now

    def _walk_readings(self, store: AnalystStore) -> None:
        horizon = self._clock() - RATE_WINDOW_S
        while True:
            batch = store.readings_after(self._after, self._WALK_BATCH)
            for row_id, r in batch:
                key = (r.device_id, r.boot_id)
                boot = self._boots.get(key)
                if boot is None:
                    self._boots[key] = _Boot(r.seq, r.seq, 1, r.received_at)
                else:
                    boot.first_seq = min(boot.first_seq, r.seq)
                    boot.last_seq = max(boot.last_seq, r.seq)
                    boot.received += 1
                    boot.last_seen = max(boot.last_seen, r.received_at)
                if r.received_at > horizon:
                    self._arrivals[int(r.received_at)] += 1
                self._after = row_id
            if len(batch) < self._WALK_BATCH:
                return

    def _walk_window(self, store: AnalystStore, window: int,
                     payload: dict[str, Any]) -> tuple[WindowCandidates, _Walked]:
        """Read a window's rows once: its points by verdict and its candidates per device.

        A window is the run of row ids ``first_row .. last_row`` (the analyst reads windows
        in row-id order), so its ``n`` readings are the ``n`` rows after ``first_row - 1``.
        """
        first, n = int(payload["first_row"]), int(payload["n"])
        presumed = set(int(r) for r in payload.get("presumed_rows", ()))
        final = set(int(r) for r in payload.get("candidate_rows", ()))
        rows = store.readings_after(first - 1, n)
        if len(rows) != n or (rows and rows[-1][0] != int(payload["last_row"])):
            raise StorageError("window %d: stored result names rows %d..%s, the store has %d of them"
                               % (window, first, payload["last_row"], len(rows)))
        others_total = n - len(presumed | final)
        step = max(1, -(-others_total // MAX_POINTS))
        kept: list[Point] = []
        added: list[Point] = []
        removed: list[Point] = []
        others: list[Point] = []
        per_device: Counter[int] = Counter()
        seen_other = 0
        columns = 0
        for index, (row_id, r) in enumerate(rows):
            columns = len(r.values)
            in_p, in_r = row_id in presumed, row_id in final
            if in_r:
                per_device[r.device_id] += 1
            if not (in_p or in_r):
                seen_other += 1
                if (seen_other - 1) % step:
                    continue
            target = kept if in_p and in_r else added if in_r else removed if in_p else others
            if len(target) < MAX_POINTS:
                target.append(Point(index, r.device_id, r.boot_id, r.seq, tuple(r.values)))
        detail = WindowCandidates(window=window, group=None, readings=n, columns=columns,
                                  presumed=tuple(kept), added=tuple(added), removed=tuple(removed),
                                  others=tuple(others), candidates=len(final))
        return detail, _Walked(rows[-1][1].received_at if rows else None, dict(per_device))

    def _remember(self, window: int, detail: WindowCandidates) -> None:
        self._details[window] = detail
        self._details.move_to_end(window)
        while len(self._details) > self._DETAIL_CACHE:
            self._details.popitem(last=False)


def _int_or_none(v: object) -> int | None:
    return int(v) if isinstance(v, (int, float)) else None
