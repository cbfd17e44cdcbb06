"""A message's lifecycle: the trace events recorded for it, found by its unique key or by the
offset id of any of its copies; and its retry timeline: every hop in time order and each consumer
group's verdict, made from the trace events or, when none were recorded, from its copies."""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.services import lookup
from app.services.errors import InvalidRequestError, NotFoundError
from app.services.timeline_client import client_hops, merge_hops
from app.services.timeline_hops import Hop, hops_from_copies, hops_from_events
from app.services.timeline_verdicts import ConsumerProgress, Verdict, verdicts
from app.services.transactions import TransactionStanding, transaction_standing
from store.broker.client_trace import client_trace_of
from store.broker.metadata import DEFAULT_RETRY_MAX_TIMES
from store.broker.trace import TraceEvent, TraceKind
from store.errors import StoreError
from store.format import topics
from store.format.codec import StoredMessage
from store.message_store import MessageStore

# Unique keys (client ids, RocketMQ 5 message ids) and offset message ids are hex strings.
MESSAGE_ID = re.compile(r"^[0-9A-Fa-f]{16,128}$")


@dataclass(frozen=True)
class TimelineEntry:
    event: TraceEvent
    derived: bool  # made from the stored record, not recorded


def _stored_event(msg: StoredMessage) -> TraceEvent:
    return TraceEvent(TraceKind.STORED, msg.unique_key or msg.offset_msg_id, msg.store_timestamp, msg.topic,
                      msg.queue_id, msg.queue_offset, msg.offset_msg_id, reconsume_times=msg.reconsume_times or None,
                      real_topic=msg.properties.get(topics.REAL_TOPIC))


def _check_id(message_id: str) -> None:
    if not MESSAGE_ID.fullmatch(message_id):
        raise InvalidRequestError(f"malformed message id {message_id[:64]!r}: a unique key or an offset message id "
                                  "is 16 to 128 hex characters")


def _recorded_events(store: MessageStore, message_id: str) -> list[TraceEvent]:
    for candidate in dict.fromkeys((message_id, message_id.upper())):
        events = store.timeline(candidate)
        if events:
            return events
    return []


@dataclass(frozen=True)
class MessageTimeline:
    message_id: str  # as asked for
    unique_key: str | None
    entries: list[TimelineEntry]  # the recorded events; without any, a derived "stored" event of the id's copy
    copies: list[StoredMessage]  # oldest first
    hops: list[Hop]  # in time order
    verdicts: list[Verdict]  # one per group, by name
    traced: bool  # hops from recorded events or the clients' trace (else reconstructed from the copies)
    progress_recorded: bool  # the store holds consumer offsets or receive state of some group
    client_trace_contexts: int = 0  # contexts of the RocketMQ clients' own trace merged into the hops
    transaction: TransactionStanding | None = None  # a message sent in a transaction: committed, rolled back...

    @property
    def first_copy(self) -> StoredMessage | None:
        """The produced copy when there is one (not a transaction's half message), else the oldest."""
        plain = [m for m in self.copies if not topics.is_system_topic(m.topic)]
        return (plain or self.copies or [None])[0]


def _max_reconsume_times(store: MessageStore, group: str) -> int:
    try:
        return store.metadata.group(group).max_reconsume_times
    except StoreError:  # a dead-letter topic named after a group name mqlens would refuse
        return DEFAULT_RETRY_MAX_TIMES


def message_timeline(store: MessageStore, message_id: str, *, with_client_trace: bool = True) -> MessageTimeline:
    """The retry timeline of the message a unique key or the offset id of any copy names; with
    the RocketMQ clients' own trace merged in unless `with_client_trace` is False (the story the
    store's copies and mqlens's events tell alone, as the Spark timelines job rebuilds it)."""
    _check_id(message_id)
    events = _recorded_events(store, message_id)
    anchor = lookup.stored_or_none(store, message_id)
    keys = [e.unique_key for e in events[:1]] + ([anchor.unique_key] if anchor and anchor.unique_key else [])
    if anchor is None and not events:
        keys = [message_id, message_id.upper()]
    copies = lookup.all_copies(store, keys, anchor)
    if not events and not copies:
        raise NotFoundError(f"no trace event and no message for id {message_id}: give the unique key or the "
                            "offset message id of a copy stored here")
    if events:
        entries = [TimelineEntry(event, False) for event in events]
        hops = hops_from_events(events)
    else:
        entries = [TimelineEntry(_stored_event(anchor), True)] if anchor is not None else []
        hops = hops_from_copies(copies, store.delay_levels.deliver_time,
                                lambda group: _max_reconsume_times(store, group))
    progress = ConsumerProgress(store)
    unique_key = next((m.unique_key for m in copies if m.unique_key), None)
    if unique_key is None and events:
        unique_key = events[0].unique_key
    client_trace = client_trace_of(store, unique_key) if unique_key and with_client_trace else []
    hops = merge_hops(hops, client_hops(client_trace))
    traced = bool(events) or bool(client_trace)
    return MessageTimeline(message_id, unique_key, entries, copies, hops, verdicts(hops, progress, traced=traced),
                           traced, progress.any_recorded, len(client_trace), transaction_standing(store, copies))
