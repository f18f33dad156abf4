"""Prometheus text metrics from a ``DashboardSource``, read afresh at every scrape.

    registry = metrics_registry(source)
    text = prometheus_client.generate_latest(registry)

Counters the source does not record (``None``) are exported with their HELP and TYPE lines
and no sample: the series exists, and is absent until the source knows it.
"""
from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from .data import LATENCY_BUCKETS_S, DashboardSource


class SourceCollector(Collector):
    """Yields the fleet's counters from ``source.summary()`` on every collection."""

    def __init__(self, source: DashboardSource) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        s = self._source.summary()
        yield _counter("dpsense_readings_ingested", "Reading messages the analyst's ingest took in "
                       "(stored + duplicates + dead letters).", s.ingested)
        yield _counter("dpsense_readings_stored", "Readings stored, one per device, boot and sequence number.",
                       s.stored)
        yield _counter("dpsense_readings_duplicates", "Re-delivered or retransmitted readings the store "
                       "ignored.", s.duplicates)
        yield _counter("dpsense_dead_letters", "Messages kept as dead letters instead of data.", s.dead_letters)
        yield _gauge("dpsense_sequence_numbers_missing", "Sequence numbers missing between the first and "
                     "last stored reading of each device boot (may fall when late readings arrive).", s.missing)
        yield _gauge("dpsense_device_boots_with_gaps", "Device boots with at least one missing sequence number.",
                     s.boots_with_gaps)
        yield _counter("dpsense_windows_closed", "Detection windows whose result is stored.", s.windows_closed)
        yield _counter("dpsense_rounds_failed", "Correction rounds that did not complete and were retried.",
                       s.rounds_failed)
        h = HistogramMetricFamily("dpsense_round_latency_seconds",
                                  "Duration of each completed correction round, from the presumed set "
                                  "to the result.")
        if s.latency is not None:
            buckets = [("%g" % b, float(c)) for b, c in zip(LATENCY_BUCKETS_S, s.latency.buckets, strict=True)]
            h.add_metric([], buckets + [("+Inf", float(s.latency.count))], s.latency.total_s)
        yield h


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
