"""A store's settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from store.broker.dedupe import DEFAULT_WINDOW_MS
from store.log.geometry import StoreGeometry
from store.log.retention import DEFAULT_RESERVED_HOURS

MAX_MIN_FREE_BYTES = 64 * 1024 * 1024
MIN_MIN_FREE_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class StoreConfig:
    geometry: StoreGeometry = field(default_factory=StoreGeometry)
    flush: Literal["sync", "async"] = "async"
    flush_interval_ms: int = 500
    store_host: str = "127.0.0.1:10911"
    cluster: str = "DefaultCluster"
    # None: the store's own table (config/delayLevels.json), else the one its scheduled messages
    # imply (a store another broker wrote), else RocketMQ's default; a file still wins over a table given
    delay_levels: str | None = None
    default_queue_count: int = 4
    auto_create_topics: bool = True
    # > 0: a thread delivers delayed and timed messages at their time, re-checking at least this often
    schedule_interval_ms: int = 0
    max_message_bytes: int = 4 * 1024 * 1024
    trace: bool = True  # record lifecycle events in the trace topic
    dedupe_window_ms: int = DEFAULT_WINDOW_MS  # 0: store every send, even one with a known unique key
    disk_max_used_ratio: float = 0.95  # producers' sends are refused above this (RocketMQ: 0.90)
    # None: scaled to the geometry, room for one more of each file (at most 64 MiB), so a small
    # store on a small disk works
    disk_min_free_bytes: int | None = None
    put_wait_ms: int = 1000  # a send that waits longer than this for the store is refused (busy)
    file_reserved_hours: float = DEFAULT_RESERVED_HOURS
    retention_check_ms: int = 0  # > 0: a thread deletes expired segments this often
    # A bulk load: log pages a flush made durable leave the page cache, so that the load keeps
    # reusing the same memory rather than touching new memory for every page it writes
    drop_flushed_pages: bool = False

    def min_free_bytes(self) -> int:
        """The free space below which writes are refused."""
        if self.disk_min_free_bytes is not None:
            return self.disk_min_free_bytes
        g = self.geometry
        one_of_each = g.commitlog_file_size + g.cq_file_size + g.index_file_size
        return min(MAX_MIN_FREE_BYTES, max(MIN_MIN_FREE_BYTES, one_of_each))
