"""Producing messages over the REST API."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass, field

from app.services.errors import InvalidRequestError, PayloadTooLargeError
from app.services.topics import check_producer_topic
from store.broker.record_builder import NewMessage
from store.format import topics

MAX_MESSAGES_PER_REQUEST = 1000

# Properties the broker sets itself or that the request has fields for.
RESERVED_PROPERTIES = frozenset({
    topics.KEYS, topics.TAGS, topics.UNIQ_KEY, topics.WAIT, topics.DELAY, topics.RETRY_TOPIC, topics.REAL_TOPIC,
    topics.REAL_QID, topics.ORIGIN_MESSAGE_ID, topics.CLUSTER, topics.TRAN_MSG, topics.TIMER_DELIVER_MS,
})


@dataclass
class MessageInput:
    """One message as a REST client sends it (exactly one of body and body_base64)."""

    body: str | None = None
    body_base64: str | None = None
    tags: str | None = None
    keys: list[str] = field(default_factory=list)
    properties: dict[str, str] = field(default_factory=dict)
    delay_level: int | None = None
    deliver_at_ms: int | None = None
    queue_id: int | None = None


def _body(item: MessageInput, where: str) -> bytes:
    if (item.body is None) == (item.body_base64 is None):
        raise InvalidRequestError(f"{where}: give exactly one of 'body' and 'body_base64'")
    if item.body is not None:
        try:
            return item.body.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidRequestError(f"{where}: 'body' is not valid text (a lone surrogate): send such bytes as "
                                      "body_base64") from None
    try:
        return base64.b64decode(item.body_base64, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequestError(f"{where}: body_base64 is not valid base64") from None


def to_new_message(topic: str, item: MessageInput, where: str = "message") -> NewMessage:
    body = _body(item, where)
    reserved = sorted(RESERVED_PROPERTIES & item.properties.keys())
    if reserved:
        raise InvalidRequestError(f"{where}: property {reserved[0]} is reserved (set by the broker or by a field)")
    if item.delay_level is not None and item.deliver_at_ms is not None:
        raise InvalidRequestError(f"{where}: give delay_level or deliver_at_ms, not both")
    properties = dict(item.properties)
    if item.deliver_at_ms is not None:
        properties[topics.TIMER_DELIVER_MS] = str(item.deliver_at_ms)
    return NewMessage(topic=topic, body=body, tags=item.tags, keys=list(item.keys), properties=properties,
                      queue_id=item.queue_id, delay_level=item.delay_level or 0)


def new_messages(topic: str, items: Sequence[MessageInput], max_batch_bytes: int) -> list[NewMessage]:
    """The store's messages for one produce request, checked: a bad one rejects them all."""
    check_producer_topic(topic)
    if not items:
        raise InvalidRequestError("no messages to put")
    if len(items) > MAX_MESSAGES_PER_REQUEST:
        raise InvalidRequestError(f"{len(items)} messages in one request: at most {MAX_MESSAGES_PER_REQUEST}")
    single = len(items) == 1
    batch = [to_new_message(topic, item, "message" if single else f"message {i}") for i, item in enumerate(items)]
    total = sum(len(m.body) for m in batch)
    if not single and total > max_batch_bytes:
        raise PayloadTooLargeError(f"the {len(batch)} bodies take {total} bytes together: at most {max_batch_bytes} "
                                   "in one request (split the batch)")
    return batch
