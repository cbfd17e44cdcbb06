"""The lifecycle events an append and a consumer's failure record (store.broker.trace)."""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

from store.broker.record_builder import NewMessage
from store.broker.retry import SendBack
from store.broker.trace import TraceEvent, TraceKind, client_label
from store.format import topics
from store.format.codec import StoredMessage
from store.format.delay_levels import DelayLevels
from store.format.delivery_time import parse_deliver_ms


class Written(Protocol):
    """Where a record went (the store's PutResult)."""

    topic: str
    queue_id: int
    queue_offset: int
    phys_offset: int
    store_timestamp: int
    unique_key: str | None

    @property
    def offset_msg_id(self) -> str: ...


def put_events(batch: list[NewMessage], results: list[Written], delay_levels: DelayLevels,
               now: int) -> list[TraceEvent]:
    """STORED, or SCHEDULED with its due time, for each producer's message (none for trace
    records), naming the client that sent it when the message says."""
    events = []
    for m, r in zip(batch, results, strict=True):
        if r.topic == topics.TRACE_TOPIC:
            continue
        if r.topic in (topics.SCHEDULE_TOPIC, topics.TIMER_TOPIC):
            if r.topic == topics.SCHEDULE_TOPIC:
                due = delay_levels.deliver_time(r.queue_id + 1, r.store_timestamp, r.phys_offset)
            else:
                due = parse_deliver_ms(m.properties.get(topics.TIMER_DELIVER_MS))
            event = TraceEvent(TraceKind.SCHEDULED, r.unique_key, now, r.topic, r.queue_id, r.queue_offset,
                               r.offset_msg_id, due_ms=due, real_topic=m.topic)
        else:
            event = TraceEvent(TraceKind.STORED, r.unique_key, now, r.topic, r.queue_id, r.queue_offset,
                               r.offset_msg_id, reconsume_times=m.reconsume_times or None)
        if m.client is not None:
            event = replace(event, client=client_label(m.client))
        events.append(event)
    return events


def duplicate_event(unique_key: str, earlier: Written, now: int, client: str | None = None) -> TraceEvent:
    """A producer (`client`, when known) sent a message whose unique key was stored as `earlier`:
    it is not stored again."""
    return TraceEvent(TraceKind.DUPLICATE, unique_key, now, earlier.topic, earlier.queue_id, earlier.queue_offset,
                      earlier.offset_msg_id, client=client_label(client))


def send_back_events(original: StoredMessage, group: str, route: SendBack, result: Written, reason: str | None,
                     delay_level: int, delay_levels: DelayLevels, now: int) -> list[TraceEvent]:
    """FAILED for the attempt, then RETRY (with its due time) or DEAD_LETTER (with why)."""
    key = original.unique_key or original.offset_msg_id
    failed = TraceEvent(TraceKind.FAILED, key, now, original.topic, original.queue_id, original.queue_offset,
                        original.offset_msg_id, group=group, attempt=route.reconsume_times, reason=reason)
    if route.dead_letter:
        if delay_level < 0:
            why = "the consumer asked for no more retries"
        else:
            why = f"{route.reconsume_times - 1} reconsumes reached the group's maximum"
        moved = TraceEvent(TraceKind.DEAD_LETTER, key, now, result.topic, result.queue_id, result.queue_offset,
                           result.offset_msg_id, group=group, reconsume_times=route.reconsume_times, reason=why)
    else:
        due = delay_levels.deliver_time(result.queue_id + 1, result.store_timestamp, result.phys_offset)
        moved = TraceEvent(TraceKind.RETRY, key, now, result.topic, result.queue_id, result.queue_offset,
                           result.offset_msg_id, group=group, reconsume_times=route.reconsume_times,
                           due_ms=due, real_topic=route.topic)
    return [failed, moved]


def half_stored_event(half: Written, real_topic: str, now: int) -> TraceEvent:
    """A transaction's half message was written: it waits for the transaction's end."""
    return TraceEvent(TraceKind.STORED, half.unique_key, now, half.topic, half.queue_id, half.queue_offset,
                      half.offset_msg_id, real_topic=real_topic)


def transaction_end_event(half: StoredMessage, committed: Written | None, from_check: bool, now: int) -> TraceEvent:
    """COMMITTED with where the copy went (and when it is due, when it waits for its delivery
    time), or ROLLED_BACK with the half message."""
    key = half.unique_key or half.offset_msg_id
    why = "the producer answered the broker's check" if from_check else None
    if committed is None:
        return TraceEvent(TraceKind.ROLLED_BACK, key, now, half.topic, half.queue_id, half.queue_offset,
                          half.offset_msg_id, reason=why)
    timed = committed.topic == topics.TIMER_TOPIC
    due = parse_deliver_ms(half.properties.get(topics.TIMER_DELIVER_MS)) if timed else None
    real_topic = half.properties.get(topics.REAL_TOPIC) if timed else None
    return TraceEvent(TraceKind.COMMITTED, key, now, committed.topic, committed.queue_id, committed.queue_offset,
                      committed.offset_msg_id, due_ms=due, reason=why, real_topic=real_topic)


def checked_event(again: Written, times: int, now: int) -> TraceEvent:
    """The broker put the half message back as `again` to ask its producer (check `times`)."""
    return TraceEvent(TraceKind.CHECKED, again.unique_key, now, again.topic, again.queue_id, again.queue_offset,
                      again.offset_msg_id, attempt=times)


def discarded_event(moved: Written, times: int, why: str, now: int) -> TraceEvent:
    """The half message was moved aside (as `moved`) without an end."""
    return TraceEvent(TraceKind.DISCARDED, moved.unique_key, now, moved.topic, moved.queue_id, moved.queue_offset,
                      moved.offset_msg_id, attempt=times or None, reason=why)
