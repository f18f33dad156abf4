"""Aggregates of the analyst's store per device group and time window, in physical units.

    from dpsense.cloud.privacy.stream_aggregates import Stat, aggregate
    with open_analyst_store("sqlite:///dpsense-data/analyst.db") as store:
        for w in aggregate(store, load_profile("dpsense-data"), group="hall-a", window_s=3600,
                           since=t0, until=t1, column=0, stat=Stat("mean")):
            print(w.start, w.n, w.rows[0].value, w.rows[0].lo, w.rows[0].hi)

Windows are tumbling intervals of arrival time aligned on the epoch (as the analyst's time
windows, cloud/analyst/windows.py); a reading belongs to the window holding its arrival. Only readings
with the profile's column count and ``config_id`` are used (their noise law is the profile's);
the others are counted in ``set_apart``. The estimators are cloud/privacy/aggregate.py's: values
are de-scaled with the profile's quantum (its map is the identity on quanta, cloud/deploy/profile.py).

Privacy: no budget is spent. The analyst holds these readings as released, each epsilon-DP
towards it per column (the board's ledger charged them when they were sent); every number
here is a function of them alone, so it is post-processing and reveals nothing more.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np

from .aggregate import NO_BUDGET, Estimate, NoiseLaw, count_between, mean, quantile, total

if TYPE_CHECKING:
    from dpsense.cloud.deploy.profile import DeviceProfile
    from dpsense.cloud.storage import AnalystStore

__all__ = ["NO_BUDGET", "STATS", "Row", "Stat", "WindowAggregate", "aggregate", "column_means", "default_edges",
           "parse_stat"]

STATS = ("mean", "sum", "count-above", "count-below", "histogram", "quantile")


@dataclass(frozen=True)
class Stat:
    """What to estimate: ``mean``, ``sum``, ``count-above T`` / ``count-below T`` (``arg`` = T in
    physical units), ``histogram`` (``edges`` in physical units, or the profile's default) or
    ``quantile q`` (``arg`` = q in (0, 1))."""

    kind: str
    arg: float | None = None
    edges: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if self.kind not in STATS:
            raise ValueError("stat must be one of %s, got %r" % (", ".join(STATS), self.kind))
        needs = self.kind in ("count-above", "count-below", "quantile")
        if needs and (self.arg is None or not math.isfinite(self.arg)):
            raise ValueError("%s needs a finite number" % self.kind)
        if not needs and self.arg is not None:
            raise ValueError("%s takes no number" % self.kind)
        if self.kind == "quantile" and not 0 < float(self.arg or 0) < 1:
            raise ValueError("quantile q must be in (0, 1), got %r" % self.arg)
        if self.edges is not None:
            if self.kind != "histogram":
                raise ValueError("edges are for histogram only")
            if len(self.edges) < 2 or any(not math.isfinite(e) for e in self.edges) or \
                    any(b <= a for a, b in zip(self.edges, self.edges[1:])):
                raise ValueError("histogram edges must be at least two increasing finite numbers")

    def describe(self) -> str:
        return self.kind if self.arg is None else "%s %g" % (self.kind, self.arg)


def parse_stat(words: list[str]) -> Stat:
    """``["mean"]``, ``["count-above", "40"]``, ``["quantile", "0.5"]``, ...: a :class:`Stat`.
    Parses the operator's words, reads no data: no privacy cost."""
    if not words:
        raise ValueError("--stat is one of %s" % ", ".join(STATS))
    kind, rest = words[0], words[1:]
    if kind not in STATS:
        raise ValueError("--stat is one of %s, got %r" % (", ".join(STATS), kind))
    if len(rest) > 1:
        raise ValueError("--stat %s takes at most one number, got %s" % (kind, " ".join(rest)))
    arg = None
    if rest:
        try:
            arg = float(rest[0])
        except ValueError:
            raise ValueError("--stat %s: expected a number, got %r" % (kind, rest[0])) from None
    return Stat(kind, arg)


@dataclass(frozen=True)
class Row:
    """One estimate in physical units (counts: readings), its interval, and a label (a bin)."""

    label: str
    value: float
    lo: float
    hi: float
    method: str


@dataclass(frozen=True)
class WindowAggregate:
    group: str
    start: float
    end: float
    column: int
    stat: str
    n: int                  # readings used
    set_apart: int          # readings of the window with another column count or config_id
    level: float
    rows: tuple[Row, ...]
    # A histogram's released counts per bin (``rows``' bins, in order): the noisy values as
    # released, beside the deconvolved estimates. Empty for the other statistics.
    released: tuple[int, ...] = ()


def _decimal(x: float) -> Fraction:
    return Fraction(repr(float(x)))


def _quanta_above(t: float, quantum: float) -> int:
    """Smallest q with q * quantum > t."""
    return math.floor(_decimal(t) / _decimal(quantum)) + 1


def _quanta_below(t: float, quantum: float) -> int:
    """Largest q with q * quantum < t."""
    return math.ceil(_decimal(t) / _decimal(quantum)) - 1


def column_means(values: np.ndarray, profile: DeviceProfile, level: float = 0.95) -> list[Row]:
    """The mean of each column of ``values`` (released readings in quanta, one row each, the
    profile's columns) in physical units, with its interval at ``level``. Spends no privacy
    budget: post-processing of readings already released (module docstring)."""
    y = np.asarray(values)
    if y.ndim != 2 or y.shape[1] != len(profile.delta_q) or not len(y):
        raise ValueError("values must be a non-empty matrix of the profile's %d columns" % len(profile.delta_q))
    return [_estimates(y[:, j].astype(np.int64), NoiseLaw.for_column(d, profile.epsilon), Stat("mean"),
                       profile.quantum, level, ())[0] for j, d in enumerate(profile.delta_q)]


def default_edges(profile: DeviceProfile, column: int) -> tuple[float, ...]:
    """Ten bins over the column's centre +- twice its relaxed sensitivity: public profile
    parameters, never the data, so choosing them spends no privacy budget."""
    if isinstance(column, bool) or not isinstance(column, int) or not 0 <= column < len(profile.delta_q):
        raise ValueError("column must be in 0..%d, got %r" % (len(profile.delta_q) - 1, column))
    c, d = profile.centre_q[column], profile.delta_q[column]
    return tuple(float((c - 2 * d + 4 * d * k / 10) * profile.quantum) for k in range(11))


def _estimates(y: np.ndarray, law: NoiseLaw, stat: Stat, quantum: float, level: float,
               edges: tuple[float, ...]) -> tuple[Row, ...]:
    def row(label: str, e: Estimate, scale: float) -> Row:
        return Row(label, e.value * scale, e.lo * scale, e.hi * scale, e.method)

    if stat.kind == "mean":
        return (row("mean", mean(y, law, level), quantum),)
    if stat.kind == "sum":
        return (row("sum", total(y, law, level), quantum),)
    if stat.kind == "quantile":
        assert stat.arg is not None
        return (row("quantile %g" % stat.arg, quantile(y, law, stat.arg, level), quantum),)
    if stat.kind == "count-above":
        assert stat.arg is not None
        return (row("> %g" % stat.arg, count_between(y, law, lo=_quanta_above(stat.arg, quantum), level=level), 1),)
    if stat.kind == "count-below":
        assert stat.arg is not None
        return (row("< %g" % stat.arg, count_between(y, law, hi=_quanta_below(stat.arg, quantum), level=level), 1),)
    # Histogram: [e_k, e_k+1) and the two open ends, so that the bins hold every reading.
    y = np.sort(y)
    cuts = _cuts(edges, quantum)
    out = [row("< %g" % edges[0], count_between(y, law, hi=cuts[0] - 1, level=level, presorted=True), 1)]
    for k in range(len(edges) - 1):
        if cuts[k + 1] - 1 < cuts[k]:
            raise ValueError("histogram bin [%g, %g) holds no quantum (%g)" % (edges[k], edges[k + 1], quantum))
        out.append(row("[%g, %g)" % (edges[k], edges[k + 1]),
                       count_between(y, law, lo=cuts[k], hi=cuts[k + 1] - 1, level=level, presorted=True), 1))
    out.append(row(">= %g" % edges[-1], count_between(y, law, lo=cuts[-1], level=level, presorted=True), 1))
    return tuple(out)


def _cuts(edges: tuple[float, ...], quantum: float) -> list[int]:
    """The first quantum of each histogram bin [e_k, e_k+1)."""
    return [math.ceil(_decimal(e) / _decimal(quantum)) for e in edges]


def released_counts(y: np.ndarray, edges: tuple[float, ...], quantum: float) -> tuple[int, ...]:
    """How many released values (quanta) fall in each of the histogram's bins (the two open
    ends included): what a reader of the raw released stream would count, noise and all."""
    idx = np.searchsorted(np.asarray(_cuts(edges, quantum), dtype=np.int64), np.asarray(y, dtype=np.int64),
                          side="right")
    return tuple(int(c) for c in np.bincount(idx, minlength=len(edges) + 1))


def aggregate(store: AnalystStore, profile: DeviceProfile, *, group: str, window_s: float, since: float,
              until: float, column: int, stat: Stat, level: float = 0.95) -> list[WindowAggregate]:
    """Per time window of ``window_s`` seconds (aligned on the epoch) with readings of ``group``
    that arrived in ``[since, until)``: ``stat`` of ``column``, with its interval at ``level``.
    Windows without a usable reading are left out. Spends no privacy budget: post-processing of
    readings already released, each epsilon-DP towards the analyst (module docstring)."""
    if not isinstance(group, str) or not group:
        raise ValueError("group must be a non-empty name")
    if not (isinstance(window_s, (int, float)) and math.isfinite(window_s) and window_s >= 1):
        raise ValueError("window must be at least 1 s, got %r" % (window_s,))
    if not (math.isfinite(since) and math.isfinite(until) and since < until):
        raise ValueError("the interval must satisfy since < until")
    m = len(profile.delta_q)
    if isinstance(column, bool) or not isinstance(column, int) or not 0 <= column < m:
        raise ValueError("column must be in 0..%d (the profile has %d columns), got %r" % (m - 1, m, column))
    if not isinstance(stat, Stat):
        raise TypeError("stat must be a Stat")
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0.5 <= level < 1:
        raise ValueError("level must be in [0.5, 1), got %r" % (level,))
    law = NoiseLaw.for_column(profile.delta_q[column], profile.epsilon)
    edges = stat.edges or default_edges(profile, column)
    rows = store.released_rows(group, since, until)
    by_window: dict[int, tuple[list[bytes], int]] = {}
    for at, config_id, vals in rows:
        k = math.floor(float(at) / window_s)
        blobs, odd = by_window.get(k, ([], 0))
        if len(vals) == 4 * m and int(config_id) == profile.config_id:
            blobs.append(bytes(vals))
        else:
            odd += 1
        by_window[k] = (blobs, odd)
    out = []
    for k in sorted(by_window):
        blobs, odd = by_window[k]
        if not blobs:
            continue
        y = np.frombuffer(b"".join(blobs), dtype="<i4").reshape(len(blobs), m)[:, column].astype(np.int64)
        out.append(WindowAggregate(group, k * window_s, (k + 1) * window_s, column, stat.describe(), len(blobs),
                                   odd, float(level), _estimates(y, law, stat, profile.quantum, level, edges),
                                   released_counts(y, edges, profile.quantum) if stat.kind == "histogram" else ()))
    return out
