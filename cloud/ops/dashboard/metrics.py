"""Prometheus text metrics from a ``DashboardSource``, read afresh at every scrape.

    registry = metrics_registry(source)
    text = prometheus_client.generate_latest(registry)

Every counter here is a running total the analyst's store keeps in the transaction of what it
counts (``results.metrics``), so it never goes back and survives restarts of the analyst and
of the dashboard. The round latency is a *summary* (count and sum, no quantiles): the store
keeps the number of completed rounds and their summed duration, which is exactly what a
summary's ``_count`` and ``_sum`` are, so ``rate(_sum) / rate(_count)`` is the mean latency over
any range. A histogram would need a bucket count per round, which the store does not keep;
building one from the per-window durations would read every window at every scrape.
"""
from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from .data import AGGREGATE_WINDOW_S, DashboardSource


class SourceCollector(Collector):
    """Yields the fleet's counters from ``source.summary()`` on every collection."""

    def __init__(self, source: DashboardSource) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        s = self._source.summary()
        yield _counter("dpsense_readings_ingested", "Reading messages the analyst's ingest committed "
                       "(stored + duplicates + dead letters).", s.ingested)
        yield _counter("dpsense_readings_stored", "Readings stored, one per device, boot and sequence number.",
                       s.stored)
        yield _counter("dpsense_readings_duplicates", "Readings received again (QoS 1 re-delivery, a board's "
                       "resend) and not stored twice.", s.duplicates)
        yield _counter("dpsense_dead_letters", "Messages kept as dead letters instead of data.", s.dead_letters)
        yield _gauge("dpsense_sequence_numbers_missing", "Sequence numbers missing between the first and "
                     "last stored reading of each device boot (falls when late readings arrive).", s.gaps)
        yield _counter("dpsense_windows_closed", "Detection windows closed (their members fixed).",
                       s.windows_closed)
        yield _gauge("dpsense_windows_held", "Closed windows whose correction round has not completed yet.",
                     s.windows_held)
        yield _counter("dpsense_rounds_failed", "Correction round attempts that did not complete; their "
                       "window is held and retried.", s.rounds_failed)
        yield _counter("dpsense_readings_carried", "Readings of windows below the detector's minimum size, "
                       "carried into the group's next window (counted each time).", s.readings_carried)
        yield _counter("dpsense_candidates", "Candidates (the corrected outlier set) over every done window.",
                       s.candidates)
        yield _counter("dpsense_clock_steps", "Wall-clock steps the analyst saw; its windows keep to the "
                       "monotonic clock through them (an event says each one).", s.clock_steps)
        latency = SummaryMetricFamily("dpsense_round_latency_seconds",
                                      "Duration of the completed correction rounds, from the presumed set "
                                      "to the result.",
                                      count_value=s.rounds_completed, sum_value=s.round_seconds_total)
        yield latency
        yield from self._labelled()

    def _labelled(self) -> Iterator[Metric]:
        """Per device, group and dead-letter reason: what an operator alerts on (docs/dashboard.md)."""
        src = self._source
        dev = [("readings", CounterMetricFamily, "dpsense_device_readings",
                "Readings stored from the device."),
               ("candidates", CounterMetricFamily, "dpsense_device_candidates",
                "Readings of the device in the candidate set of a done window."),
               ("last_seen", GaugeMetricFamily, "dpsense_device_last_seen_timestamp_seconds",
                "Arrival (Unix time) of the device's newest stored reading."),
               ("eps_total", GaugeMetricFamily, "dpsense_device_epsilon_spent",
                "Epsilon of the device's readings the analyst holds (per boot, readings x the boot's "
                "epsilon per record)."),
               ("eps_window", GaugeMetricFamily, "dpsense_device_epsilon_window",
                "Epsilon the board's ledger spent in its current window, as its latest status said."),
               ("cap", GaugeMetricFamily, "dpsense_device_epsilon_window_cap",
                "The board's ledger cap per window, as its latest status said."),
               ("tail_missing", GaugeMetricFamily, "dpsense_device_tail_missing",
                "Readings the board said it released (last_seq of a boot's latest status) after the "
                "highest one stored for that boot: a tail that never arrived."),
               ("stopped_flag", GaugeMetricFamily, "dpsense_device_stopped",
                "1 when the board's latest status says it stopped (a config error, relayed by its gateway).")]
        rows = src.devices()
        for attr, kind, name, doc in dev:
            family = kind(name, doc, labels=["device", "group"])
            for r in rows:
                v = getattr(r, attr)
                if v is not None:
                    family.add_metric(["d%d" % r.device_id, r.group], float(v))
            yield family
        pending = GaugeMetricFamily("dpsense_group_readings_pending", "Readings not in any window yet.",
                                    labels=["group"])
        age = GaugeMetricFamily("dpsense_group_oldest_pending_timestamp_seconds",
                                "Arrival (Unix time) of the group's oldest reading not in a window.",
                                labels=["group"])
        waiting = GaugeMetricFamily("dpsense_group_windows_waiting", "Closed windows of the group awaiting "
                                    "their verdict (held or not yet run).", labels=["group"])
        oldest = GaugeMetricFamily("dpsense_group_oldest_waiting_window_timestamp_seconds",
                                   "When the group's oldest window awaiting its verdict closed (Unix time).",
                                   labels=["group"])
        for b in src.backlog():
            pending.add_metric([b.group], float(b.pending))
            waiting.add_metric([b.group], float(b.windows_waiting))
            if b.oldest_pending_at is not None:
                age.add_metric([b.group], b.oldest_pending_at)
            if b.oldest_waiting_at is not None:
                oldest.add_metric([b.group], b.oldest_waiting_at)
        yield from (pending, age, waiting, oldest)
        dead = CounterMetricFamily("dpsense_dead_letters_by_reason", "Dead-lettered messages by reason "
                                   "(numbers in the reason read N).", labels=["reason"])
        for reason, n in sorted(src.dead_letter_reasons().items()):
            dead.add_metric([reason], float(n))
        yield dead
        yield from self._means()

    def _means(self) -> Iterator[Metric]:
        """Each group's mean per column over its latest aggregate window with readings, and the
        95% interval: estimates from released readings, no privacy budget spent."""
        src = self._source
        fam = {k: GaugeMetricFamily(name, doc, labels=["group", "column"]) for k, name, doc in (
            ("value", "dpsense_group_mean", "Mean of the column over the group's latest %d s window with "
             "readings, in physical units, estimated from the released readings (no privacy budget spent)."
             % AGGREGATE_WINDOW_S),
            ("lo", "dpsense_group_mean_lower", "Lower end of that mean's 95% interval."),
            ("hi", "dpsense_group_mean_upper", "Upper end of that mean's 95% interval."),
            ("n", "dpsense_group_mean_readings", "Readings that mean is computed from."))}
        first = src.aggregates(0, AGGREGATE_WINDOW_S, 2 * AGGREGATE_WINDOW_S)
        if first is not None:
            for c in range(first.columns):
                a = first if c == 0 else src.aggregates(c, AGGREGATE_WINDOW_S, 2 * AGGREGATE_WINDOW_S)
                for g, bands in sorted((a.groups if a is not None else {}).items()):
                    last = bands[-1]
                    for k, f in fam.items():
                        f.add_metric([g, str(c)], float(getattr(last, k)))
        yield from fam.values()


def metrics_registry(source: DashboardSource) -> CollectorRegistry:
    """A registry holding only the fleet's metrics (no process or platform collectors)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SourceCollector(source))
    return registry


def _counter(name: str, doc: str, value: int | None) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc)
    if value is not None:
        family.add_metric([], float(value))
    return family


def _gauge(name: str, doc: str, value: int | None) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc)
    if value is not None:
        family.add_metric([], float(value))
    return family
