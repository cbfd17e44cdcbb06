"""What the topics pages show: every topic with its kind and message count, and one topic's
queues with their offsets, how many messages arrived in the last minute and the newest one's time."""

from __future__ import annotations

from app.services.errors import NotFoundError
from backend.protocol import Backend
from store.format import topics

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


def list_topic_rows(backend: Backend) -> tuple[list[dict], list[str]]:
    """Every topic, user topics first, with its queue count, messages held and newest store
    time; and what could not be read (brokers that did not answer)."""
    listing = backend.list_topics()
    rows = []
    for view in listing.topics:
        newest = [a.newest_ms for a in backend.queue_activity(view, None)]
        rows.append({"name": view.name, "kind": topic_kind(view.name), "queues": view.queues,
                     "messages": sum(q.max_offset - q.min_offset for q in view.queue_offsets),
                     "newest_ms": max((t for t in newest if t is not None), default=None)})
    return sorted(rows, key=_sort_key), listing.problems


def topic_detail(backend: Backend, name: str, now_ms: int) -> dict:
    """One topic's settings and, per queue, its broker, min and max offset, messages, arrivals in
    the last minute (and per second) and the newest message's store time. Unknown topic: NotFoundError."""
    topics.validate_topic(name)
    view = backend.get_topic(name)
    if view is None:
        raise NotFoundError(f"no topic {name}")
    queues = []
    for q, activity in zip(view.queue_offsets, backend.queue_activity(view, now_ms - RATE_WINDOW_MS), strict=True):
        last_minute = activity.stored_since
        queues.append({
            **({"broker": q.broker} if q.broker is not None else {}),
            "queue_id": q.queue_id, "min_offset": q.min_offset, "max_offset": q.max_offset,
            "messages": q.max_offset - q.min_offset, "last_minute": last_minute,
            "per_second": None if last_minute is None else round(last_minute * 1000 / RATE_WINDOW_MS, 3),
            "newest_ms": activity.newest_ms,
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
