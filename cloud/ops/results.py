"""Detection results as data: windows, candidates, devices and counters of the analyst's store.

    from dpsense.cloud.ops import results
    from dpsense.cloud.storage import open_analyst_store

    with open_analyst_store("sqlite:///dpsense-data/analyst.db") as store:
        for w in results.windows(store, limit=5):
            print(w.id, w.group, w.n, w.candidates)
        for c in results.candidates(store, window=w.id):
            print(c.device_id, c.boot_id, c.seq, c.verdict)
        m = results.metrics(store)

Every function reads the store it is given and returns plain rows (frozen dataclasses); none
writes. Times are Unix seconds (``iso_time`` formats them). Nothing here holds a reading's
values, its noise or a distance difference: candidates are named by (device, boot, seq).
"""
from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from fractions import Fraction

from dpsense.cloud.storage import DEFAULT_GROUP, AnalystStore, Event, Verdict, WindowRecord
from dpsense.cloud.storage.repository import SEQ_MOD
from dpsense.cloud.storage.stream import WINDOW_STATES

__all__ = ["DeviceRow", "Event", "Metrics", "Tail", "Verdict", "WindowRecord", "candidates", "devices", "events",
           "iso_time", "metrics", "parse_since", "tails", "window", "windows"]

_AGO = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([smhd])")
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


@dataclass(frozen=True)
class DeviceRow:
    """One device as the analyst knows it: what it sent, what was flagged, what its ledger says.

    ``eps_window``, ``ledger_window`` and ``cap`` are the board's own words in its latest status
    message (sent at boot and when a ledger window reaches its cap), as of ``status_at``.
    ``eps_total`` is the epsilon of what the analyst holds about the device's readings: per boot,
    readings x that boot's ``eps_record`` (sequential composition; a boot without a status of
    its own is charged at the device's latest ``eps_record``), plus epsilon_A (the correction
    server's ``--analyst-epsilon``) for each of the ``round_readings``, the readings in windows
    the analyst asked a correction round for (cloud/correction/honest.py). ``eps_a`` is what
    the board charges its ledger per record for that round view (config ``epsilon_a``; None:
    nothing, and its caps bound its releases only).
    """

    device_id: int
    group: str
    readings: int
    candidates: int
    last_seen: float | None
    boots: int
    board: str | None
    entropy: str | None
    eps_record: Fraction | None
    eps_record_worst: Fraction | None
    ledger_window: int | None
    eps_window: Fraction | None
    cap: Fraction | None
    eps_total: Fraction | None
    status_event: str | None
    status_at: float | None
    set_apart: int = 0            # readings set apart from their windows (another column count or config_id)
    round_readings: int = 0       # readings in windows that ran a correction round
    eps_a: Fraction | None = None
    # Readings its boards said they released (``last_seq`` in a status) that were never stored
    # after the highest stored one of that boot: a lost tail (``tails``); None: no board said.
    tail_missing: int | None = None
    stopped: str | None = None    # the line the board stopped on (a config error), its latest status

    @property
    def stopped_flag(self) -> int:
        return int(self.stopped is not None)


@dataclass(frozen=True)
class Tail:
    """One boot's end as its board announced it against what the store holds.

    ``last_seq`` is the newest sequence number the board said it released (its latest status
    message of that boot, docs/protocol.md 13.2); ``stored_last`` the highest stored (on the
    circle of 2^32, as ``Gap``), None when nothing of the boot is stored; ``missing`` the
    numbers after it up to ``last_seq``: records that never arrived, which no gap shows."""

    device_id: int
    boot_id: int
    last_seq: int
    stored_last: int | None
    missing: int


def tails(store: AnalystStore) -> list[Tail]:
    """Every (device, boot) whose status says its last seq, by device and boot. Status messages
    without ``last_seq`` (older firmware) say nothing and are left out."""
    gaps = {(g.device_id, g.boot_id): g for g in store.gaps()}
    out = []
    for s in store.latest_statuses():
        last = _int(s.fields.get("last_seq"))
        if s.boot_id is None or last is None or not 0 <= last < SEQ_MOD:
            continue
        g = gaps.get((s.device_id, s.boot_id))
        if g is None:
            out.append(Tail(s.device_id, s.boot_id, last, None, last + 1))
            continue
        ahead = (last - g.last_seq) % SEQ_MOD
        # Behind the stored end (by less than half the circle): the status is older than those records.
        out.append(Tail(s.device_id, s.boot_id, last, g.last_seq, ahead if ahead < SEQ_MOD // 2 else 0))
    return out


def board_notes(store: AnalystStore) -> list[str]:
    """``dpsense status``'s lines on the boards: those stopped (as their gateway said), those
    without differential privacy, and boot tails that never arrived."""
    rows = devices(store)
    out = ["boards      device %d stopped: %s" % (r.device_id, r.stopped) for r in rows if r.stopped]
    # A board without a hardware noise source publishes with no differential privacy
    # (docs/privacy.md): said on every view of it, this one included.
    bare = [r.device_id for r in rows if r.entropy == "prng_no_dp"]
    if bare:
        out.append("privacy     NO differential privacy (entropy prng_no_dp: no hardware noise source): "
                   "devices %s" % ", ".join(map(str, bare)))
    lost = [t for t in tails(store) if t.missing]
    if lost:
        out.append("tails       %d readings released (the boards' status says) after the last stored of their boot "
                   "never arrived: %s" % (sum(t.missing for t in lost), ", ".join(
                       "device %d boot %d: last seq %d, stored up to %s: %d" % (
                           t.device_id, t.boot_id, t.last_seq, "none" if t.stored_last is None else t.stored_last,
                           t.missing) for t in lost)))
    return out


@dataclass(frozen=True)
class Metrics:
    """Running totals for a dashboard or Prometheus: every field is a count or seconds."""

    ingested: int                 # messages the ingest committed (readings, duplicates, dead letters)
    stored: int                   # readings stored
    duplicates: int               # readings received again (QoS 1 redelivery, resends)
    dead_letters: int
    gaps: int                     # missing sequence numbers over every (device, boot)
    windows_closed: int
    windows_held: int             # closed windows whose round has not completed (yet)
    rounds_completed: int
    rounds_failed: int            # attempts that ended with the window held
    round_seconds_total: float    # summed round latency of the completed rounds
    last_round_seconds: float | None
    readings_carried: int         # readings of windows below the minimum, each time they were carried
    candidates: int
    readings_set_apart: int = 0   # readings not scored: another column count or config_id than their window
    clock_steps: int = 0          # wall-clock steps the analyst saw (cloud/ingest/clock.py)


def iso_time(t: float | None) -> str:
    """``2025-11-25T16:40:05.123Z`` (UTC), or "" for None."""
    if t is None:
        return ""
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def parse_since(text: str, now: float | None = None) -> float:
    """A point in time: ``15m`` / ``2h`` / ``1d`` ago, an ISO 8601 time (UTC unless it says
    otherwise), or Unix seconds."""
    t = text.strip()
    m = _AGO.fullmatch(t.lower())
    if m is not None:
        return (time.time() if now is None else now) - float(m.group(1)) * _UNITS[m.group(2)]
    try:
        value = float(t)
    except ValueError:
        pass
    else:
        if math.isfinite(value):
            return value
    try:
        dt = datetime.fromisoformat(t[:-1] + "+00:00" if t.endswith("Z") else t)
    except ValueError:
        raise ValueError("--since is a duration ago (15m, 2h), an ISO time (2025-11-25T16:00) or Unix "
                         "seconds, got %r" % text) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


def windows(store: AnalystStore, group: str | None = None, limit: int | None = None,
            states: tuple[str, ...] = WINDOW_STATES) -> list[WindowRecord]:
    """Windows by id (the last ``limit``), of every group or one, done or still awaiting a round."""
    return store.windows(group=group, states=states, limit=limit)


def window(store: AnalystStore, window_id: int) -> WindowRecord | None:
    """One window by id, in whatever state, or None."""
    return store.window_record(window_id)


def candidates(store: AnalystStore, window: int | None = None, since: float | None = None,
               group: str | None = None, all_verdicts: bool = False) -> list[Verdict]:
    """The candidate set R of the done windows, per reading: (window, group, device, boot, seq,
    arrival, verdict). ``all_verdicts`` adds the presumed outliers the round removed."""
    return store.verdicts(window=window, since=since, group=group, candidates_only=not all_verdicts)


def events(store: AnalystStore, limit: int = 20) -> list[Event]:
    """The analyst's latest status entries (carried windows, held rounds), newest first."""
    return store.events(limit)


# What a board writes for an epsilon ("3", "1/20", "0.05"); anything else is not a figure.
# Bounded: Fraction("1e999999999") would build a 415 MB integer for one status message.
_FRACTION_TEXT = re.compile(r"[0-9]{1,40}(?:/[0-9]{1,40}|\.[0-9]{1,40})?")


def _fraction(value: object) -> Fraction | None:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return None
    if isinstance(value, str) and _FRACTION_TEXT.fullmatch(value) is None:
        return None
    try:
        f = Fraction(value)
    except (ValueError, ZeroDivisionError):
        return None
    return f if f >= 0 else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def devices(store: AnalystStore, epsilon_a: Fraction = Fraction(1)) -> list[DeviceRow]:
    """Every device that has a group, a reading or a status message, by device id; ``epsilon_a``
    is the correction server's ``--analyst-epsilon`` (its default, 1)."""
    groups = store.device_groups()
    in_rounds = store.round_readings()
    cands = store.candidate_counts()
    apart = store.set_apart_by_device()
    boots: dict[int, dict[int, tuple[int, float]]] = {}
    for b in store.boot_activity():
        boots.setdefault(b.device_id, {})[b.boot_id] = (b.readings, b.last_seen)
    latest: dict[int, tuple[float, dict[str, object]]] = {}
    boot_eps: dict[tuple[int, int], Fraction] = {}
    for s in store.latest_statuses():
        if s.device_id not in latest or s.received_at >= latest[s.device_id][0]:
            latest[s.device_id] = (s.received_at, s.fields)
        er = _fraction(s.fields.get("eps_record"))
        if s.boot_id is not None and er is not None:
            boot_eps[(s.device_id, s.boot_id)] = er
    lost: dict[int, int] = {}
    for t in tails(store):
        lost[t.device_id] = lost.get(t.device_id, 0) + t.missing
    rows = []
    for d in sorted(set(groups) | set(boots) | set(latest) | set(apart)):
        at, fields = latest.get(d, (None, {}))
        er = _fraction(fields.get("eps_record"))
        total: Fraction | None = Fraction(0) if d in boots else None
        for boot, (n, _) in boots.get(d, {}).items():
            rate = boot_eps.get((d, boot), er)
            total = None if rate is None or total is None else total + n * rate
        if total is not None:
            total += in_rounds.get(d, 0) * epsilon_a
        activity = boots.get(d, {})
        rows.append(DeviceRow(
            device_id=d, group=groups.get(d, DEFAULT_GROUP), readings=sum(n for n, _ in activity.values()),
            candidates=cands.get(d, 0), last_seen=max((t for _, t in activity.values()), default=None),
            boots=len(activity), board=_str(fields.get("board")), entropy=_str(fields.get("entropy")),
            eps_record=er, eps_record_worst=_fraction(fields.get("eps_record_worst")),
            ledger_window=_int(fields.get("window")), eps_window=_fraction(fields.get("spent")),
            cap=_fraction(fields.get("cap")), eps_total=total, status_event=_str(fields.get("event")),
            status_at=at, set_apart=apart.get(d, 0), round_readings=in_rounds.get(d, 0),
            eps_a=_fraction(fields.get("eps_a")), tail_missing=lost.get(d),
            stopped=_str(fields.get("error")) if fields.get("event") == "stopped" else None))
    return rows


@dataclass(frozen=True)
class Backlog:
    """A group's readings not in any window yet, and its windows awaiting a verdict."""

    group: str
    pending: int                      # readings not in any window
    oldest_pending_at: float | None   # arrival of the oldest of them
    windows_waiting: int              # closed or held windows without a verdict
    oldest_waiting_at: float | None   # when the oldest of those closed


def backlog(store: AnalystStore) -> list[Backlog]:
    """Per group, by name: the default group and every group a device was put in, with zeros
    where nothing waits (so a series exists to alert on), and any other group with a backlog."""
    pending = store.pending_by_group(0, store.max_row_id())
    waiting: dict[str, list[float]] = {}
    for w in store.windows(states=("closed", "held")):
        waiting.setdefault(w.group, []).append(w.closed_at)
    groups = set(pending) | set(waiting) | set(store.device_groups().values()) | {DEFAULT_GROUP}
    return [Backlog(g, pending[g].count if g in pending else 0, pending[g].first_at if g in pending else None,
                    len(waiting.get(g, [])), min(waiting[g]) if g in waiting else None)
            for g in sorted(groups)]


def dead_letter_reasons(store: AnalystStore) -> dict[str, int]:
    """Dead-lettered messages per kind of reason (numbers read N, hints dropped: the store's
    ``group_reasons``), so a metric labelled with it has few series whatever the devices."""
    return dict(store.dead_letter_reasons())


def metrics(store: AnalystStore) -> Metrics:
    """The counters a dashboard shows; ``gaps`` walks every reading (one grouped query)."""
    c = store.counters()
    done = store.windows(states=("done",), limit=1)
    counts = store.window_counts()
    return Metrics(
        ingested=int(c["ingest_received"]), stored=store.count(), duplicates=int(c["ingest_duplicates"]),
        dead_letters=store.dead_letter_messages(), gaps=sum(g.missing for g in store.gaps()),
        windows_closed=int(c["windows_closed"]), windows_held=counts["closed"] + counts["held"],
        rounds_completed=int(c["rounds_completed"]),
        rounds_failed=int(c["rounds_failed"]), round_seconds_total=c["round_seconds_total"],
        last_round_seconds=done[0].round_s if done else None, readings_carried=int(c["readings_carried"]),
        candidates=sum(store.candidate_counts().values()),
        readings_set_apart=int(c.get("readings_set_apart", 0)), clock_steps=int(c.get("clock_steps", 0)))
