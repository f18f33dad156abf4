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

from .data import DashboardSource


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
        latency = SummaryMetricFamily("dpsense_round_latency_seconds",
                                      "Duration of the completed correction rounds, from the presumed set "
                                      "to the result.",
                                      count_value=s.rounds_completed, sum_value=s.round_seconds_total)
        yield latency


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
