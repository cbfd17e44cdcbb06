"""What the topics pages show: every topic with its kind and message count, and one topic's
queues with their offsets, how many messages arrived in the last minute and the newest one's time."""

from __future__ import annotations

from app.services import topics as topic_service
from app.services.errors import NotFoundError
from store.errors import StoreError
from store.format import topics
from store.message_store import MessageStore

RATE_WINDOW_MS = 60_000
KIND_ORDER = ("user", "retry", "dead_letter", "scheduled", "trace", "system")


def topic_kind(name: str) -> str:
    """user, retry, dead_letter, scheduled, trace or system (the broker's own topics)."""
    kind = topics.copy_kind(name)
    if kind == "original":
        return "system" if topics.is_system_topic(name) else "user"
    return kind


def _sort_key(row: dict) -> tuple[int, str]:
    return KIND_ORDER.index(row["kind"]), row["name"]


def newest_store_time(store: MessageStore, topic: str, queue_id: int, min_offset: int, max_offset: int) -> int | None:
    """When the queue's last message was stored (None: empty, or its last unit is not a message)."""
    if max_offset <= min_offset:
        return None
    try:
        return store.get_by_queue_offset(topic, queue_id, max_offset - 1).store_timestamp
    except StoreError:
        return None


def stored_since(store: MessageStore, topic: str, queue_id: int, min_offset: int, max_offset: int,
                 since_ms: int) -> int | None:
    """How many messages of the queue were stored at or after `since_ms` (a binary search by time)."""
    if max_offset <= min_offset:
        return 0
    try:
        return max_offset - store.queue_offset_by_time(topic, queue_id, since_ms)
    except StoreError:
        return None


def list_topic_rows(store: MessageStore) -> list[dict]:
    """Every topic, user topics first, with its queue count, messages held and newest store time."""
    rows = []
    for view in topic_service.list_topics(store):
        newest = [newest_store_time(store, view.name, q.queue_id, q.min_offset, q.max_offset)
                  for q in view.queue_offsets]
        rows.append({"name": view.name, "kind": topic_kind(view.name), "queues": view.queues,
                     "messages": sum(q.max_offset - q.min_offset for q in view.queue_offsets),
                     "newest_ms": max((t for t in newest if t is not None), default=None)})
    return sorted(rows, key=_sort_key)


def topic_detail(store: MessageStore, name: str, now_ms: int) -> dict:
    """One topic's settings and, per queue, min and max offset, messages, arrivals in the last
    minute (and per second) and the newest message's store time. Unknown topic: NotFoundError."""
    topics.validate_topic(name)
    view = topic_service.get_topic(store, name)
    if view is None:
        raise NotFoundError(f"no topic {name}")
    queues = []
    for q in view.queue_offsets:
        last_minute = stored_since(store, name, q.queue_id, q.min_offset, q.max_offset,
                                   now_ms - RATE_WINDOW_MS)
        queues.append({
            "queue_id": q.queue_id, "min_offset": q.min_offset, "max_offset": q.max_offset,
            "messages": q.max_offset - q.min_offset, "last_minute": last_minute,
            "per_second": None if last_minute is None else round(last_minute * 1000 / RATE_WINDOW_MS, 3),
            "newest_ms": newest_store_time(store, name, q.queue_id, q.min_offset, q.max_offset),
        })
    known = [q["last_minute"] for q in queues if q["last_minute"] is not None]
    total_last_minute = sum(known)
    return {
        "name": view.name, "kind": topic_kind(view.name), "queue_count": view.queues, "perm": view.perm,
        "readable": view.readable, "writable": view.writable, "queues": queues,
        "messages": sum(q["messages"] for q in queues),
        "last_minute": total_last_minute,
        "per_second": round(total_last_minute * 1000 / RATE_WINDOW_MS, 3),
        "newest_ms": max((q["newest_ms"] for q in queues if q["newest_ms"] is not None), default=None),
        "rate_window_ms": RATE_WINDOW_MS,
    }
