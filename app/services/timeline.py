"""A message's lifecycle: the trace events recorded for it, found by its unique key or by the
offset id of any of its copies."""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.services import lookup
from app.services.errors import InvalidRequestError, NotFoundError
from store import topics
from store.codec import StoredMessage
from store.message_store import MessageStore
from store.trace import TraceEvent, TraceKind

# Unique keys (client ids, RocketMQ 5 message ids) and offset message ids are hex strings.
MESSAGE_ID = re.compile(r"^[0-9A-Fa-f]{16,128}$")


@dataclass(frozen=True)
class TimelineEntry:
    event: TraceEvent
    derived: bool  # made from the stored record, not recorded


def _stored_message(store: MessageStore, offset_msg_id: str) -> StoredMessage | None:
    """The record an offset message id names, if the id is one and the record is there."""
    try:
        return lookup.by_offset_id(store, offset_msg_id)
    except (InvalidRequestError, NotFoundError):
        return None


def _stored_event(msg: StoredMessage) -> TraceEvent:
    return TraceEvent(TraceKind.STORED, msg.unique_key or msg.offset_msg_id, msg.store_timestamp, msg.topic,
                      msg.queue_id, msg.queue_offset, msg.offset_msg_id, reconsume_times=msg.reconsume_times or None,
                      real_topic=msg.properties.get(topics.REAL_TOPIC))


def timeline(store: MessageStore, message_id: str) -> list[TimelineEntry]:
    """The recorded events in order. With none (tracing was off, or the record predates it), an
    offset id of a readable record gives one derived "stored" event."""
    if not MESSAGE_ID.match(message_id):
        raise InvalidRequestError(f"malformed message id {message_id[:64]!r}: a unique key or an offset message id "
                                  "is 16 to 128 hex characters")
    for candidate in dict.fromkeys((message_id, message_id.upper())):
        events = store.timeline(candidate)
        if events:
            return [TimelineEntry(event, False) for event in events]
    msg = _stored_message(store, message_id)
    if msg is None:
        raise NotFoundError(f"no trace event and no message for id {message_id}")
    return [TimelineEntry(_stored_event(msg), True)]
