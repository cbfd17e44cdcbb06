"""Lifecycle trace: every event of a message (stored, scheduled, delivered, acked, failed, sent to
retry, dead-lettered, resent, a transaction's end...) is kept in the trace topic of the commit log, keyed by the
message's unique key, so one index lookup returns a message's whole history across its original,
scheduled, retry and DLQ copies. Events are packed many to a record (store.broker.trace_pack);
stores written before that hold one record per event (JSON body, the kind as tag, keyed by the
unique key and the offset id of the copy it concerns), which decode_trace reads."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from enum import StrEnum

from store.format import topics
from store.format.codec import StoredMessage


class TraceKind(StrEnum):
    STORED = "stored"  # a producer's message was written
    SCHEDULED = "scheduled"  # written to wait for a delay level or a delivery time (due_ms)
    RELEASED = "released"  # a scheduled copy reached its due time and was put to its real topic
    DELIVERED = "delivered"  # handed to a consumer group (attempt)
    ACKED = "acked"
    FAILED = "failed"  # a consumer reported failure (reason)
    INVISIBLE_TIMEOUT = "invisible_timeout"  # a popped message was neither acked nor nacked in time
    RETRY = "retry"  # a retry copy was written (due_ms: when it is delivered again)
    DEAD_LETTER = "dead_letter"  # moved to %DLQ%group (reason)
    RESENT = "resent"  # an operator sent a dead letter back to its topic
    DUPLICATE = "duplicate"  # a producer resent a message already stored (not stored again)
    COMMITTED = "committed"  # a transaction's half message was committed: put to its topic (or scheduled)
    ROLLED_BACK = "rolled_back"  # a transaction was rolled back: its half message is never delivered
    CHECKED = "checked"  # the broker put a half message back to ask its producer (attempt: the check's number)
    DISCARDED = "discarded"  # a half message checked too often or too old, moved aside (reason)
    INVISIBLE_CHANGED = "invisible_changed"  # a consumer moved a received message's invisible time (to due_ms)


@dataclass(frozen=True)
class TraceEvent:
    kind: TraceKind
    unique_key: str
    at_ms: int
    topic: str | None = None  # the topic of the copy the event concerns
    queue_id: int | None = None
    queue_offset: int | None = None
    offset_msg_id: str | None = None
    group: str | None = None
    attempt: int | None = None  # 1-based delivery attempt
    reconsume_times: int | None = None
    due_ms: int | None = None
    reason: str | None = None
    real_topic: str | None = None  # where a scheduled copy goes when it is due
    client: str | None = None  # the client that sent, received, acked... it (a RocketMQ 5 client's id)

    def to_json(self) -> dict:
        values = {name: getattr(self, name) for name in _FIELD_NAMES}
        values["kind"] = self.kind.value
        return {name: value for name, value in values.items() if value is not None}

    @classmethod
    def from_json(cls, data: dict) -> TraceEvent:
        fields = {name: data.get(name) for name in cls.__dataclass_fields__}
        fields["kind"] = TraceKind(fields["kind"])
        return cls(**fields)


_FIELD_NAMES = tuple(f.name for f in fields(TraceEvent))
MAX_CLIENT_CHARS = 256


def client_label(client: object) -> str | None:
    """What an event keeps of the client a caller names: None for none, else its text, bounded."""
    return str(client)[:MAX_CLIENT_CHARS] if client else None


def decode_trace(msg: StoredMessage) -> TraceEvent | None:
    """The event a one-event trace record (JSON body) holds, or None for a record that is not one."""
    if msg.topic != topics.TRACE_TOPIC:
        return None
    try:
        return TraceEvent.from_json(json.loads(msg.body))
    except (ValueError, TypeError, KeyError):
        return None


def ordered(events: list[tuple[tuple[int, int], TraceEvent]]) -> list[TraceEvent]:
    """Events by time, ties in commit log order: ((trace record phys offset, place in the record),
    event) pairs in."""
    return [event for _, event in sorted(events, key=lambda pair: (pair[1].at_ms, pair[0]))]
