"""How consumer groups are doing: the groups the store knows of, each group's committed offsets
and lag per queue, its retries waiting per delay level, its retry topic and its dead letters."""

from __future__ import annotations

import contextlib

from app.services import groups as group_service
from app.services.errors import NotFoundError
from backend.embedded_groups import (
    Bounds,
    known_groups,
    lags,
    queue_bounds,
    retry_topic_status,
    topic_queues,
)
from backend.protocol import Backend
from store.broker.metadata import GroupConfig, checked_group
from store.errors import StoreError
from store.format import topics
from store.message_store import MessageStore

RETRY_SCAN_LIMIT = 1_000  # scheduled messages looked at per delay level for one group's retries


def dead_letters(store: MessageStore, group: str, bounds: Bounds, now_ms: int) -> dict:
    """The group's DLQ: messages held, and the oldest one's store time and age."""
    topic = topics.dlq_topic(group)
    queues = topic_queues(bounds, topic)
    oldest = []
    for queue_id, lo, hi in queues:
        if hi > lo:
            with contextlib.suppress(StoreError):  # deleted by retention meanwhile
                oldest.append(store.get_by_queue_offset(topic, queue_id, lo).store_timestamp)
    oldest_ms = min(oldest, default=None)
    return {"topic": topic, "queues": [q for q, _, _ in queues], "messages": sum(hi - lo for _, lo, hi in queues),
            "oldest_ms": oldest_ms, "oldest_age_ms": None if oldest_ms is None else max(0, now_ms - oldest_ms)}


def retry_backlog(store: MessageStore, group: str, bounds: Bounds, scan_limit: int = RETRY_SCAN_LIMIT) -> list[dict]:
    """Per delay level, the group's retries still waiting in SCHEDULE_TOPIC_XXXX (queue level - 1)
    from the scheduler's delivery progress on; at most `scan_limit` messages are looked at per
    level, and a level cut short says so (`capped`)."""
    retry = topics.retry_topic(group)
    progress = store.scheduler.progress()
    rows = []
    for queue_id, lo, hi in topic_queues(bounds, topics.SCHEDULE_TOPIC):
        level = queue_id + 1
        start = max(lo, progress.get(level, 0))
        scan_end = min(hi, start + scan_limit)
        waiting, next_due = 0, None
        for offset in range(start, scan_end):
            try:
                msg = store.get_by_queue_offset(topics.SCHEDULE_TOPIC, queue_id, offset)
            except StoreError:  # a filler unit, or deleted meanwhile
                continue
            if msg.properties.get(topics.REAL_TOPIC) == retry:
                waiting += 1
                due = store.delay_levels.deliver_time(level, msg.store_timestamp, msg.phys_offset)
                next_due = due if next_due is None else min(next_due, due)
        capped = scan_end < hi
        if waiting or capped:
            rows.append({"level": level, "delay_ms": store.delay_levels.delay_ms(level), "waiting": waiting,
                         "capped": capped, "scanned": scan_end - start, "waiting_all_groups": max(0, hi - start),
                         "next_due_ms": next_due})
    return rows


def group_detail(store: MessageStore, group: str, now_ms: int, *, known_elsewhere: bool = False) -> dict:
    """One group: settings, lag per queue, retry backlog per delay level, retry topic and DLQ.
    A valid name the store knows nothing of (not even retries waiting), unless the caller knows
    of it (`known_elsewhere`: clients of the group are connected): NotFoundError."""
    checked_group(GroupConfig(group))
    bounds = queue_bounds(store)
    backlog = retry_backlog(store, group, bounds, RETRY_SCAN_LIMIT)
    if not backlog and not known_elsewhere and group not in known_groups(store, bounds):
        raise NotFoundError(f"no group {group}: it has no settings, committed offsets, retries, retry or "
                            "dead-letter topic")
    offsets = store.offsets.of_group(group)
    queue_lags = lags(offsets, bounds)
    return {
        "name": group,
        "settings": group_service.get_group(store, group),
        "offsets": queue_lags,
        "lag": sum(r.lag for r in queue_lags),
        "retry": retry_topic_status(group, offsets, bounds),
        "retry_backlog": backlog,
        "receive_retries": store.receive_status(group),
        "retry_scan_limit": RETRY_SCAN_LIMIT,
        "dead_letters": dead_letters(store, group, bounds, now_ms),
    }


def cluster_group_detail(backend: Backend, group: str) -> dict:
    """One group on a live cluster: settings as the brokers keep them, lag per broker and queue,
    its consumers online with their subscriptions, and its retry and dead-letter topics. A
    group no broker knows of, with nothing consumed, retried or online: NotFoundError."""
    settings = backend.get_group(group)
    progress = backend.group_progress(group)
    connections = backend.group_connections(group)
    retry = backend.get_topic(topics.retry_topic(group))
    dlq = backend.get_topic(topics.dlq_topic(group))
    if not (settings.configured or progress.queues or connections or retry or dlq):
        raise NotFoundError(f"no group {group}: no broker has its settings, offsets, consumers, retry or "
                            "dead-letter topic")

    def held(view) -> int:
        return 0 if view is None else sum(q.max_offset - q.min_offset for q in view.queue_offsets)

    return {
        "name": group, "settings": settings, "offsets": progress.queues,
        "lag": sum(q.lag for q in progress.queues), "connections": connections,
        "retry": {"topic": topics.retry_topic(group), "messages": held(retry), "exists": retry is not None},
        "dead_letters": {"topic": topics.dlq_topic(group), "messages": held(dlq), "exists": dlq is not None},
        "problems": progress.problems + (connections.problems if connections else []),
    }
