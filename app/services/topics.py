"""Topics: the list with queue offsets, creating and changing one, and which a producer may use."""

from __future__ import annotations

from dataclasses import dataclass

from app.services.errors import ForbiddenError
from store import topics
from store.message_store import MessageStore
from store.metadata import TopicConfig


def check_producer_topic(name: str) -> str:
    """A topic a producer may send to: a valid name (else 400) that is not a system topic (else 403)."""
    topics.validate_topic(name)
    if topics.is_system_topic(name):
        raise ForbiddenError(f"topic {name} is a system topic: producers cannot send to it")
    return name


@dataclass(frozen=True)
class QueueOffsets:
    queue_id: int
    min_offset: int
    max_offset: int


@dataclass(frozen=True)
class TopicView:
    name: str
    queues: int
    perm: int
    readable: bool
    writable: bool
    kind: str
    system: bool
    queue_offsets: list[QueueOffsets]


def _view(config: TopicConfig, found: list[tuple[int, int, int]]) -> TopicView:
    by_queue = {queue_id: QueueOffsets(queue_id, lo, hi) for queue_id, lo, hi in found}
    queue_ids = sorted(set(range(config.queues)) | by_queue.keys())
    return TopicView(config.name, config.queues, config.perm, config.readable, config.writable,
                     topics.copy_kind(config.name), topics.is_system_topic(config.name),
                     [by_queue.get(q, QueueOffsets(q, 0, 0)) for q in queue_ids])


def list_topics(store: MessageStore) -> list[TopicView]:
    """Every topic with its settings and the offsets of each queue, by name."""
    offsets = store.topics()
    configs = {t.name: t for t in store.metadata.topics()}
    for name, queues in offsets.items():  # a queue on disk with no metadata (should not happen)
        configs.setdefault(name, TopicConfig(name, queues=max(q for q, _, _ in queues) + 1))
    return [_view(configs[name], offsets.get(name, [])) for name in sorted(configs)]


def get_topic(store: MessageStore, name: str) -> TopicView | None:
    config = store.metadata.topic(name)
    return None if config is None else _view(config, store.topics().get(name, []))


def put_topic(store: MessageStore, name: str, queues: int | None = None, perm: int | None = None
              ) -> tuple[TopicView, bool]:
    """Create a topic or change its queue count or permission; (the topic, whether it was created)."""
    topics.validate_topic(name)
    if topics.is_system_topic(name):
        raise ForbiddenError(f"topic {name} is a system topic: the broker manages it")
    current = store.metadata.topic(name)
    base = current if current is not None else TopicConfig(name, queues=store.config.default_queue_count)
    config = TopicConfig(name, queues=base.queues if queues is None else queues,
                         perm=base.perm if perm is None else perm)
    store.put_topic(config)
    view = get_topic(store, name)
    assert view is not None
    return view, current is None
