"""Reading one queue by offset (a pull consumer's view, recording no delivery)."""

from __future__ import annotations

from dataclasses import dataclass

from app.services.errors import InvalidRequestError, NotFoundError
from store.broker.metadata import TopicConfig
from store.format import topics
from store.format.codec import StoredMessage
from store.message_store import MessageStore


@dataclass(frozen=True)
class QueueWindow:
    topic: str
    queue_id: int
    offset: int  # where the read started, inside the queue
    next_offset: int
    min_offset: int
    max_offset: int
    messages: list[StoredMessage]


def existing_queue(store: MessageStore, topic: str, queue_id: int) -> TopicConfig:
    """The topic's settings: a valid name (else 400) of a topic that exists (else 404), with a
    queue of that id (else 400)."""
    topics.validate_topic(topic)
    config = store.metadata.topic(topic)
    if config is None:
        raise NotFoundError(f"no topic {topic}")
    if queue_id >= config.queues and store.queues.get(topic, queue_id) is None:
        raise InvalidRequestError(f"topic {topic} has {config.queues} queues: queue ids 0 to {config.queues - 1}")
    return config


def read_queue(store: MessageStore, topic: str, queue_id: int, offset: int | None, max_messages: int,
               tags: str | None = None, group: str | None = None) -> QueueWindow:
    """Up to `max_messages` messages of the queue from `offset` whose tag matches; without an
    offset from `group`'s committed offset, else from the queue's first message. Read only:
    no delivery is recorded and no offset moves."""
    existing_queue(store, topic, queue_id)
    if group is not None:
        store.metadata.group(group)  # checks the name
    if offset is None and group is not None:
        offset = store.offsets.get(topic, group, queue_id)
    result = store.pull(group or "", topic, queue_id, offset or 0, max_messages, tags, trace=False)
    start = min(max(offset or 0, result.min_offset), result.max_offset)
    return QueueWindow(topic, queue_id, start, result.next_offset, result.min_offset, result.max_offset,
                       result.messages)
