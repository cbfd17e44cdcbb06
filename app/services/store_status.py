"""The store at a glance: its size on disk, commit log segments, dispatch lag, dead letters
waiting, and how many topics and groups it has."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from backend.embedded_groups import Bounds, known_groups, queue_bounds
from store.format import topics
from store.message_store import MessageStore


@dataclass(frozen=True)
class StoreStatus:
    store_bytes: int  # allocated on disk by every file of the store
    commitlog_bytes: int  # commit log data held: from the oldest segment's start to the end
    commitlog_segments: int
    dispatch_lag_bytes: int
    dlq_messages: int
    delayed_messages: int  # waiting in SCHEDULE_TOPIC_XXXX (every level) and in the timer
    receive_retries: int  # failed receives (pop) waiting for their next attempt, every group
    topics: int
    groups: int
    messages_put: int  # since the store was opened
    messages_delivered: int
    messages_acked: int
    delay_levels_source: str  # where the delay level table in use came from
    opening_notes: list[str]  # what a read-only store did to serve a copy taken off a running or crashed broker


def disk_bytes(root: Path) -> int:
    """Bytes the files under `root` take on disk (a preallocated, sparse segment counts what is written)."""
    total = 0
    for directory, _, files in os.walk(root):
        for name in files:
            try:
                info = os.stat(os.path.join(directory, name))
            except OSError:  # deleted while we looked (retention, roll)
                continue
            blocks = getattr(info, "st_blocks", None)
            total += info.st_size if blocks is None else blocks * 512
    return total


def dlq_messages(bounds: Bounds) -> int:
    return sum(hi - lo for (topic, _), (lo, hi) in bounds.items() if topics.is_dlq_topic(topic))


def store_status(store: MessageStore) -> StoreStatus:
    bounds = queue_bounds(store)
    counts = store.stats.snapshot()
    topic_names = {t.name for t in store.metadata.topics()} | {t for t, _ in bounds}
    return StoreStatus(
        store_bytes=disk_bytes(store.paths.root),
        commitlog_bytes=max(0, store.commitlog.end - store.commitlog.min_offset),
        commitlog_segments=store.commitlog.segment_count,
        dispatch_lag_bytes=store.dispatch_lag_bytes(),
        dlq_messages=dlq_messages(bounds),
        delayed_messages=sum(store.scheduler.pending().values()) + store.timer.pending(),
        receive_retries=sum(row["retries_waiting"] for row in store.receive_status()),
        topics=len(topic_names),
        groups=len(known_groups(store, bounds)),
        messages_put=counts.put,
        messages_delivered=counts.delivered,
        messages_acked=counts.acked,
        delay_levels_source=store.delay_levels_source.text,
        opening_notes=opening_notes(store),
    )


def opening_notes(store: MessageStore) -> list[str]:
    """Read-only: the records projected in memory because the store's consume queues and index
    lagged its commit log, and a torn tail left out."""
    notes = []
    projected = store.projected_in_memory
    if projected is not None:
        notes.append(f"The consume queues and index of this copy lag its commit log: {projected.records} records "
                     f"(commit log offsets {projected.start:,} to {projected.end:,}) were projected in memory to "
                     f"serve them ({projected.queue_units} queue units, {projected.index_keys} index keys); "
                     "nothing was written to the store.")
    recovery = store.recovery
    if recovery is not None and recovery.truncated_bytes:
        notes.append(f"The commit log ends in a torn or unreadable record at offset {recovery.end:,} "
                     f"({recovery.reason or 'unreadable data'}): the {recovery.truncated_bytes:,} bytes after "
                     "the last complete record are not served.")
    return notes
