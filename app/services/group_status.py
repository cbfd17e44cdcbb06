"""How consumer groups are doing: the groups the store knows of, each group's committed offsets
and lag per queue, its retries waiting per delay level, its retry topic and its dead letters."""

from __future__ import annotations

import contextlib

from app.services import groups as group_service
from app.services.errors import NotFoundError
from backend.embedded import Bounds, lags, queue_bounds
from store.broker.metadata import GroupConfig, checked_group
from store.broker.offsets import KEY_SEPARATOR
from store.errors import StoreError
from store.format import topics
from store.message_store import MessageStore

RETRY_SCAN_LIMIT = 1_000  # scheduled messages looked at per delay level for one group's retries



def _topic_queues(bounds: Bounds, topic: str) -> list[tuple[int, int, int]]:
    return sorted((q, lo, hi) for (t, q), (lo, hi) in bounds.items() if t == topic)


def committed_offsets(store: MessageStore) -> dict[str, dict[str, dict[int, int]]]:
    """group -> topic -> {queue id: committed offset}, for every group that committed one."""
    with store.offsets.lock:
        table = store.offsets.table_json()
    found: dict[str, dict[str, dict[int, int]]] = {}
    for key, queues in table.items():
        topic, group = key.rsplit(KEY_SEPARATOR, 1)
        found.setdefault(group, {})[topic] = {int(q): offset for q, offset in queues.items()}
    return found


def known_groups(store: MessageStore, bounds: Bounds | None = None) -> list[str]:
    """Configured groups, groups with committed offsets and groups with a retry or dead-letter topic."""
    names = {g.name for g in store.metadata.groups()} | committed_offsets(store).keys()
    topic_names = {t.name for t in store.metadata.topics()} | {t for t, _ in (bounds or queue_bounds(store))}
    retried = []
    for name in topic_names:
        if topics.is_retry_topic(name):
            retried.append(name[len(topics.RETRY_PREFIX):])
        elif topics.is_dlq_topic(name):
            names.add(name[len(topics.DLQ_PREFIX):])
    plain = {name for name in topic_names if not topics.is_system_topic(name)}
    for name in retried:  # a pop retry topic (%RETRY%group_topic) names its group, not another
        if not any(name.endswith("_" + t) and name[:-len(t) - 1] in names for t in plain):
            names.add(name)
    return sorted(n for n in names if n)


def dead_letter_count(bounds: Bounds, group: str) -> int:
    return sum(hi - lo for _, lo, hi in _topic_queues(bounds, topics.dlq_topic(group)))


def dead_letters(store: MessageStore, group: str, bounds: Bounds, now_ms: int) -> dict:
    """The group's DLQ: messages held, and the oldest one's store time and age."""
    topic = topics.dlq_topic(group)
    queues = _topic_queues(bounds, topic)
    oldest = []
    for queue_id, lo, hi in queues:
        if hi > lo:
            with contextlib.suppress(StoreError):  # deleted by retention meanwhile
                oldest.append(store.get_by_queue_offset(topic, queue_id, lo).store_timestamp)
    oldest_ms = min(oldest, default=None)
    return {"topic": topic, "queues": [q for q, _, _ in queues], "messages": sum(hi - lo for _, lo, hi in queues),
            "oldest_ms": oldest_ms, "oldest_age_ms": None if oldest_ms is None else max(0, now_ms - oldest_ms)}


def retry_topic_status(group: str, offsets: dict[str, dict[int, int]], bounds: Bounds) -> dict:
    """The group's %RETRY% topic: messages held and how many the group has yet to consume."""
    topic = topics.retry_topic(group)
    committed = offsets.get(topic, {})
    queues = _topic_queues(bounds, topic)
    lag = sum(hi - max(committed.get(q, lo), lo) for q, lo, hi in queues)
    return {"topic": topic, "queues": [q for q, _, _ in queues], "messages": sum(hi - lo for _, lo, hi in queues),
            "lag": max(0, lag), "consumed": bool(committed)}


def retry_backlog(store: MessageStore, group: str, bounds: Bounds, scan_limit: int = RETRY_SCAN_LIMIT) -> list[dict]:
    """Per delay level, the group's retries still waiting in SCHEDULE_TOPIC_XXXX (queue level - 1)
    from the scheduler's delivery progress on; at most `scan_limit` messages are looked at per
    level, and a level cut short says so (`capped`)."""
    retry = topics.retry_topic(group)
    progress = store.scheduler.progress()
    rows = []
    for queue_id, lo, hi in _topic_queues(bounds, topics.SCHEDULE_TOPIC):
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


def group_rows(store: MessageStore) -> list[dict]:
    """Every known group with its total lag, retry topic size and dead letters."""
    bounds = queue_bounds(store)
    committed = committed_offsets(store)
    configured = {g.name for g in store.metadata.groups()}
    rows = []
    for name in known_groups(store, bounds):
        offsets = committed.get(name, {})
        queue_lags = lags(offsets, bounds)
        rows.append({"name": name, "configured": name in configured, "queues": len(queue_lags),
                     "lag": sum(r.lag for r in queue_lags),
                     "retry_messages": retry_topic_status(name, offsets, bounds)["messages"],
                     "dead_letters": dead_letter_count(bounds, name)})
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
