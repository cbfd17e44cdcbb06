"""A message's lifecycle: the trace events recorded for it, found by its unique key or by the
offset id of any of its copies; and its retry timeline: every hop in time order and each consumer
group's verdict, made from the trace events or, when none were recorded, from its copies."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from app.services import lookup
from app.services.errors import InvalidRequestError, NotFoundError
from app.services.timeline_client import client_hops, merge_hops
from app.services.timeline_hops import Hop, hops_from_copies, hops_from_events
from app.services.timeline_verdicts import ConsumerProgress, Verdict, verdicts
from app.services.transactions import TransactionStanding, transaction_standing
from backend.protocol import Backend, BackendUnavailable, ClientTrace, RecordedProgress
from store.broker.trace import TraceEvent, TraceKind
from store.errors import StoreError
from store.format import topics
from store.format.client_trace import ClientTraceContext, TraceType
from store.format.codec import StoredMessage

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


def _recorded_events(backend: Backend, message_id: str) -> list[TraceEvent]:
    for candidate in dict.fromkeys((message_id, message_id.upper())):
        events = backend.recorded_events(candidate)
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
    problems: list[str] = field(default_factory=list)  # on a cluster: what did not answer, and why

    @property
    def first_copy(self) -> StoredMessage | None:
        """The produced copy when there is one (not a transaction's half message), else the oldest."""
        plain = [m for m in self.copies if not topics.is_system_topic(m.topic)]
        return (plain or self.copies or [None])[0]


def _reconsume_limits(backend: Backend) -> Callable[[str], int]:
    @functools.cache
    def limit(group: str) -> int:
        try:
            return backend.get_group(group).max_reconsume_times
        except (StoreError, BackendUnavailable):  # a group name mqlens would refuse, or no broker answered
            return topics.DEFAULT_RETRY_MAX_TIMES
    return limit


def _anchor(backend: Backend, message_id: str, problems: list[str]) -> StoredMessage | None:
    try:
        return lookup.stored_or_none(backend, message_id)
    except BackendUnavailable as exc:  # the broker the offset id names did not answer
        problems.append(str(exc))
        return None


def _message_topic(msg: StoredMessage) -> str | None:
    """The topic the message was produced to, as a copy of it tells."""
    for name in (msg.topic, msg.properties.get(topics.RETRY_TOPIC), msg.properties.get(topics.REAL_TOPIC)):
        if name and not topics.is_system_topic(name):
            return name
    return None


@dataclass
class _Narrowed:
    """On a cluster, where to look for the copies: the message's topic and its groups' retry and
    dead-letter topics, once the copy asked for or the clients' trace names the topic."""

    topic: str | None = None  # the message's, when known
    topic_names: list[str] | None = None  # None: every topic
    trace_key: str | None = None
    trace: ClientTrace | None = None
    progress: RecordedProgress | None = None


def _narrowed(backend: Backend, keys: list[str], anchor: StoredMessage | None, problems: list[str]) -> _Narrowed:
    if backend.kind != "cluster":
        return _Narrowed()
    narrowed = _Narrowed()
    for key in dict.fromkeys(keys):
        trace = backend.client_trace(key)
        problems += trace.problems
        if trace.contexts or narrowed.trace is None:
            narrowed.trace_key, narrowed.trace = key, trace
        if trace.contexts:
            break
    contexts = narrowed.trace.contexts if narrowed.trace else []
    topic = _message_topic(anchor) if anchor else None
    topic = topic or next((c.topic for c in contexts if c.type == TraceType.PUB and c.topic), None)
    if topic is None:
        return narrowed
    narrowed.topic = topic
    narrowed.progress = backend.consumer_progress([topic])
    problems += narrowed.progress.problems
    groups = {c.group for c in contexts if c.type != TraceType.PUB and c.group}
    groups |= ConsumerProgress(narrowed.progress).groups_on(topic)
    near = [topic, topics.SCHEDULE_TOPIC] + ([anchor.topic] if anchor is not None else [])
    near += [name for group in sorted(groups) for name in (topics.retry_topic(group), topics.dlq_topic(group))]
    narrowed.topic_names = list(dict.fromkeys(near))
    return narrowed


def _message_topics(copies: list[StoredMessage]) -> list[str]:
    return sorted({m.topic for m in copies if not topics.is_system_topic(m.topic)})


def message_timeline(source: lookup.Source, message_id: str, *, with_client_trace: bool = True) -> MessageTimeline:
    """The retry timeline of the message a unique key or the offset id of any copy names; with
    the RocketMQ clients' own trace merged in unless `with_client_trace` is False (the story the
    store's copies and mqlens's events tell alone, as the Spark timelines job rebuilds it)."""
    _check_id(message_id)
    backend = lookup.backend_of(source)
    problems: list[str] = []
    events = _recorded_events(backend, message_id)
    anchor = _anchor(backend, message_id, problems)
    keys = [e.unique_key for e in events[:1]] + ([anchor.unique_key] if anchor and anchor.unique_key else [])
    if anchor is None and not events:
        keys = [message_id, message_id.upper()]
    narrowed = _narrowed(backend, keys, anchor, problems)
    found = lookup.copies_of(backend, keys, anchor, narrowed.topic_names)
    copies = found.messages
    problems += found.problems
    if not events and not copies:
        if problems:
            raise BackendUnavailable(f"no copy of {message_id} was found, and part of the cluster did not answer: "
                                     + "; ".join(dict.fromkeys(problems)))
        raise NotFoundError(f"no trace event and no message for id {message_id}: give the unique key or the "
                            "offset message id of a copy stored here")
    if events:
        entries = [TimelineEntry(event, False) for event in events]
        hops = hops_from_events(events)
    else:
        entries = [TimelineEntry(_stored_event(anchor), True)] if anchor is not None else []
        delays = backend.delay_tables(copies)
        problems += delays.problems
        hops = hops_from_copies(copies, delays.levels.deliver_time, _reconsume_limits(backend))
    recorded = narrowed.progress
    if recorded is None or [narrowed.topic] != _message_topics(copies):
        recorded = backend.consumer_progress(_message_topics(copies))
        problems += recorded.problems
    progress = ConsumerProgress(recorded)
    unique_key = next((m.unique_key for m in copies if m.unique_key), None)
    if unique_key is None and events:
        unique_key = events[0].unique_key
    client_trace: list[ClientTraceContext] = []
    if unique_key and with_client_trace:
        trace = narrowed.trace if narrowed.trace_key == unique_key else backend.client_trace(unique_key)
        if trace is not narrowed.trace:
            problems += trace.problems
        client_trace = trace.contexts
    hops = merge_hops(hops, client_hops(client_trace))
    traced = bool(events) or bool(client_trace)
    return MessageTimeline(message_id, unique_key, entries, copies, hops, verdicts(hops, progress, traced=traced),
                           traced, progress.any_recorded, len(client_trace), transaction_standing(backend, copies),
                           list(dict.fromkeys(problems)))
