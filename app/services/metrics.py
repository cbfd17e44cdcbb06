"""Prometheus metrics, read from the store when scraped: one registry per app, holding one
collector that asks for the store only then (the app opens it after the registry is made)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from app.services import store_status
from backend import embedded_groups
from backend.embedded_groups import lags, queue_bounds
from store.message_store import MessageStore

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4


class StoreCollector(Collector):
    def __init__(self, store_of: Callable[[], MessageStore | None]):
        self._store_of = store_of

    def describe(self) -> Iterable[Metric]:
        return []  # names are not checked up front: collecting needs the open store

    def collect(self) -> Iterable[Metric]:
        store = self._store_of()
        if store is None:  # attached to a live cluster: its brokers keep their own figures
            return
        status = store_status.store_status(store)
        yield GaugeMetricFamily("mqlens_store_bytes", "Bytes the store's files take on disk.", status.store_bytes)
        yield GaugeMetricFamily("mqlens_commitlog_segments", "Commit log segment files.", status.commitlog_segments)
        yield GaugeMetricFamily("mqlens_dispatch_lag_bytes",
                                "Commit log bytes not yet projected into consume queues and index.",
                                status.dispatch_lag_bytes)
        yield CounterMetricFamily("mqlens_messages_put", "Messages producers put since the store was opened.",
                                  status.messages_put)
        yield CounterMetricFamily("mqlens_messages_delivered",
                                  "Messages handed to consumers (pulls and receives) since the store was opened.",
                                  status.messages_delivered)
        yield CounterMetricFamily("mqlens_messages_acked", "Receipts acknowledged since the store was opened.",
                                  status.messages_acked)
        bounds = queue_bounds(store)
        max_offsets = GaugeMetricFamily("mqlens_queue_max_offset", "The next queue offset to be written.",
                                        labels=["topic", "queue"])
        for (topic, queue_id), (_, hi) in sorted(bounds.items()):
            max_offsets.add_metric([topic, str(queue_id)], hi)
        yield max_offsets
        lag = GaugeMetricFamily("mqlens_consumer_lag", "Messages a group has yet to consume from a queue.",
                                labels=["group", "topic", "queue"])
        for group, offsets in sorted(embedded_groups.committed_offsets(store).items()):
            for row in lags(offsets, bounds):
                lag.add_metric([group, row.topic, str(row.queue_id)], row.lag)
        yield lag
        dlq = GaugeMetricFamily("mqlens_dlq_messages", "Messages in a group's dead-letter topic.", labels=["group"])
        for group in embedded_groups.known_groups(store, bounds):
            dlq.add_metric([group], embedded_groups.dead_letter_count(bounds, group))
        yield dlq


def metrics_registry(store_of: Callable[[], MessageStore | None]) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(store_of))
    return registry


def rpc_counter(registry: CollectorRegistry) -> Callable[[str, str], None]:
    """A counter of the gRPC front's calls by method and status code, in `registry`; returns its
    count(method, code)."""
    calls = Counter("mqlens_grpc_requests", "Calls of the gRPC front answered, by method and status code.",
                    ["method", "code"], registry=registry)
    return lambda method, code: calls.labels(method, code).inc()


def exposition(registry: CollectorRegistry) -> bytes:
    """The registry's metrics in the Prometheus text format 0.0.4."""
    return generate_latest(registry)
