"""The groups the embedded store knows of, with their committed offsets, lag, retry topic and
dead letters: what the groups list shows."""

from __future__ import annotations

from backend.protocol import QueueLag
from store.broker.offsets import KEY_SEPARATOR
from store.format import topics
from store.message_store import MessageStore

Bounds = dict[tuple[str, int], tuple[int, int]]  # (topic, queue id) -> (min offset, max offset)


def queue_bounds(store: MessageStore) -> Bounds:
    return {(topic, queue_id): (lo, hi) for topic, queues in store.topics().items() for queue_id, lo, hi in queues}


def lags(offsets: dict[str, dict[int, int]], bounds: Bounds) -> list[QueueLag]:
    """One group's lag on every queue it committed an offset for, user topics first."""
    rows = []
    for topic, queues in offsets.items():
        for queue_id, committed in queues.items():
            lo, hi = bounds.get((topic, queue_id), (0, 0))
            rows.append(QueueLag(topic, queue_id, committed, lo, hi, max(0, hi - max(committed, lo)), committed < lo))
    return sorted(rows, key=lambda r: (topics.is_system_topic(r.topic), r.topic, r.queue_id))


def topic_queues(bounds: Bounds, topic: str) -> list[tuple[int, int, int]]:
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
    return sum(hi - lo for _, lo, hi in topic_queues(bounds, topics.dlq_topic(group)))


def retry_topic_status(group: str, offsets: dict[str, dict[int, int]], bounds: Bounds) -> dict:
    """The group's %RETRY% topic: messages held and how many the group has yet to consume."""
    topic = topics.retry_topic(group)
    committed = offsets.get(topic, {})
    queues = topic_queues(bounds, topic)
    lag = sum(hi - max(committed.get(q, lo), lo) for q, lo, hi in queues)
    return {"topic": topic, "queues": [q for q, _, _ in queues], "messages": sum(hi - lo for _, lo, hi in queues),
            "lag": max(0, lag), "consumed": bool(committed)}


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
