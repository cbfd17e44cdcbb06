"""The hops of a message's life (produced, delivered to a group, failed, scheduled for a retry,
redelivered, dead-lettered, resent, consumed, a transaction's half message and end), made
either from its recorded trace events or, when there are none, from the copies the broker wrote
and the properties they carry."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

from store.broker.trace import TraceEvent, TraceKind
from store.format import topics
from store.format.codec import TRANSACTION_COMMIT, StoredMessage
from store.format.delivery_time import timer_deliver_ms

HOP_LABELS = {
    "produced": "produced",
    "scheduled": "scheduled",
    "released": "released",
    "delivered": "delivered",
    "consumed": "consumed",
    "failed": "failed",
    "retry_scheduled": "retry scheduled",
    "redelivered": "redelivered",
    "dead_lettered": "dead-lettered",
    "resent": "resent",
    "duplicate": "duplicate send",
    "invisible_changed": "invisible time changed",
    "sent": "sent (client trace)",
    "transaction": "transaction",
}

# Properties a copy put back on its topic from a dead-letter queue still carries.
RESEND_MARKERS = (topics.ORIGIN_MESSAGE_ID, topics.DLQ_ORIGIN_TOPIC, topics.DLQ_ORIGIN_MESSAGE_ID)

DeliverTime = Callable[[int, int, int], int]  # (delay level, store time, phys offset) -> due time


@dataclass(frozen=True)
class Hop:
    kind: str  # a key of HOP_LABELS
    time_ms: int
    detail: str  # what happened, in words (times are in time_ms and due_ms)
    derived: bool  # reconstructed from a copy, not recorded when it happened
    group: str | None = None
    attempt: int | None = None  # 1-based delivery attempt
    topic: str | None = None  # the copy involved
    queue_id: int | None = None
    queue_offset: int | None = None
    offset_msg_id: str | None = None
    reconsume_times: int | None = None
    delay_level: int | None = None
    due_ms: int | None = None  # when a scheduled copy or the next attempt is due
    reason: str | None = None
    client: str | None = None  # the client that sent, received, acknowledged... it (a RocketMQ 5 client's id)

    @property
    def label(self) -> str:
        return HOP_LABELS[self.kind]

    def to_json(self) -> dict:
        return {**asdict(self), "label": self.label}


def _group_of(topic: str, prefix: str) -> str:
    return topic[len(prefix):]


def _schedule_level(topic: str | None, queue_id: int | None) -> int | None:
    """SCHEDULE_TOPIC_XXXX keeps delay level L in queue L - 1."""
    return queue_id + 1 if topic == topics.SCHEDULE_TOPIC and queue_id is not None else None


# -- from trace events -------------------------------------------------------------------------
def _event_hop(event: TraceEvent) -> Hop | None:
    where = {"topic": event.topic, "queue_id": event.queue_id, "queue_offset": event.queue_offset,
             "offset_msg_id": event.offset_msg_id, "group": event.group, "attempt": event.attempt,
             "reason": event.reason, "due_ms": event.due_ms, "reconsume_times": event.reconsume_times,
             "client": event.client}

    def hop(kind: str, detail: str, **changes) -> Hop:
        return Hop(kind, event.at_ms, detail, False, **{**where, **changes})

    kind, topic, client = event.kind, event.topic or "", event.client
    sent_by = f", sent by client {client}" if client else ""
    if kind in TRANSACTION_KINDS or (kind == TraceKind.STORED and topic == topics.TRANS_HALF_TOPIC):
        return _transaction_event_hop(event, hop)
    if kind == TraceKind.STORED:
        return hop("produced", f"stored in {topic}{sent_by}")
    if kind == TraceKind.SCHEDULED:
        level = _schedule_level(event.topic, event.queue_id)
        how = f"at delay level {level}" if level else "for its delivery time"
        return hop("scheduled", f"waits in {topic} {how}, then goes to {event.real_topic}{sent_by}",
                   delay_level=level)
    if kind == TraceKind.RELEASED:
        if topics.is_retry_topic(topic):
            group = _group_of(topic, topics.RETRY_PREFIX)
            attempt = (event.reconsume_times or 0) + 1
            return hop("redelivered", f"due: put to {topic} for delivery attempt {attempt}", group=group,
                       attempt=attempt, due_ms=None)
        return hop("released", f"due: put to {topic}", due_ms=None)
    if kind == TraceKind.DELIVERED:
        if client:
            return hop("delivered", f"attempt {event.attempt} received by client {client} of {event.group}",
                       due_ms=None)
        return hop("delivered", f"attempt {event.attempt} handed to {event.group}", due_ms=None)
    by_client = f" (client {client})" if client else ""
    if kind == TraceKind.ACKED:
        return hop("consumed", f"{event.group}{by_client} acknowledged attempt {event.attempt}")
    if kind in (TraceKind.FAILED, TraceKind.INVISIBLE_TIMEOUT):
        why = event.reason or ("not acknowledged within its invisible time" if kind == TraceKind.INVISIBLE_TIMEOUT
                               else "the consumer reported a failure")
        reported = f", reported by client {client}" if client else ""
        return hop("failed", f"attempt {event.attempt} failed: {why}{reported}", reason=why)
    if kind == TraceKind.INVISIBLE_CHANGED:
        return hop("invisible_changed", f"{event.group}{by_client} moved the invisible time of attempt "
                   f"{event.attempt}: unless acknowledged, it is delivered again when due")
    if kind == TraceKind.RETRY:
        level = _schedule_level(event.topic, event.queue_id)
        attempt = (event.reconsume_times or 0) + 1
        return hop("retry_scheduled", f"attempt {attempt} waits at delay level {level}, then goes through "
                   f"{event.real_topic}", delay_level=level, attempt=attempt)
    if kind == TraceKind.DEAD_LETTER:
        return hop("dead_lettered", f"moved to {topic}: {event.reason or 'no more retries'}")
    if kind == TraceKind.RESENT:
        return hop("resent", f"put back on {topic}" + (f" ({event.reason})" if event.reason else ""))
    if kind == TraceKind.DUPLICATE:
        who = f"client {client}" if client else "a producer"
        return hop("duplicate", f"{who} sent it again; it was not stored twice")
    return None


TRANSACTION_KINDS = frozenset({TraceKind.COMMITTED, TraceKind.ROLLED_BACK, TraceKind.CHECKED, TraceKind.DISCARDED})


def _transaction_event_hop(event: TraceEvent, hop: Callable[..., Hop]) -> Hop:
    """A half message stored (or put back by a check) waits as a "transaction" hop; a commit is
    the produced copy, or a scheduled one waiting for its delivery time."""
    topic, answer = event.topic or "", f" ({event.reason})" if event.reason else ""
    if event.kind == TraceKind.STORED:
        return hop("transaction", f"half message stored in {topic}: held until the producer commits or rolls back, "
                   f"then goes to {event.real_topic}")
    if event.kind == TraceKind.CHECKED:
        return hop("transaction", f"the broker asks the producer (check {event.attempt}): half message put back "
                   f"in {topic}")
    if event.kind == TraceKind.ROLLED_BACK:
        return hop("transaction", f"rolled back{answer}: never delivered")
    if event.kind == TraceKind.DISCARDED:
        return hop("transaction", f"discarded, {event.reason or 'checked too often'}: moved to {topic}, never "
                   "delivered")
    if topic in (topics.SCHEDULE_TOPIC, topics.TIMER_TOPIC):
        return hop("scheduled", f"committed{answer}: waits in {topic} for its delivery time, then goes to "
                   f"{event.real_topic}")
    return hop("produced", f"committed{answer}: put to {topic}")


def hops_from_events(events: Iterable[TraceEvent]) -> list[Hop]:
    """One hop per recorded event, in the events' order."""
    return [hop for event in events if (hop := _event_hop(event)) is not None]


# -- from the copies ---------------------------------------------------------------------------
def _where(msg: StoredMessage) -> dict:
    return {"topic": msg.topic, "queue_id": msg.queue_id, "queue_offset": msg.queue_offset,
            "offset_msg_id": msg.offset_msg_id, "reconsume_times": msg.reconsume_times}


def _scheduled_hops(msg: StoredMessage, deliver_time: DeliverTime) -> list[Hop]:
    real_topic = msg.properties.get(topics.REAL_TOPIC) or "?"
    level = _schedule_level(msg.topic, msg.queue_id)
    if level is not None:
        due = deliver_time(level, msg.store_timestamp, msg.phys_offset)
    else:
        due = timer_deliver_ms(msg.properties, msg.store_timestamp)
    where = _where(msg)
    if topics.is_retry_topic(real_topic):
        group = _group_of(real_topic, topics.RETRY_PREFIX)
        failed_attempt = msg.reconsume_times
        return [
            Hop("failed", msg.store_timestamp, f"attempt {failed_attempt} failed: {group} sent it back "
                "(the copy does not keep why)", True, group=group, attempt=failed_attempt, **where),
            Hop("retry_scheduled", msg.store_timestamp, f"attempt {failed_attempt + 1} waits at delay level "
                f"{level}, then goes through {real_topic}", True, group=group, attempt=failed_attempt + 1,
                delay_level=level, due_ms=due, **where),
        ]
    how = f"at delay level {level}" if level else "for its delivery time"
    return [Hop("scheduled", msg.store_timestamp, f"waits in {msg.topic} {how}, then goes to {real_topic}", True,
                delay_level=level, due_ms=due, **where)]


def _dead_letter_hops(msg: StoredMessage, max_reconsume_times: Callable[[str], int]) -> list[Hop]:
    group = _group_of(msg.topic, topics.DLQ_PREFIX)
    attempts = msg.reconsume_times
    limit = max_reconsume_times(group)
    if topics.DLQ_ORIGIN_TOPIC in msg.properties:  # receive/ack style: the count is of delivery attempts
        why = f"{attempts} delivery attempt{'' if attempts == 1 else 's'} failed (the group allows {limit + 1})"
    else:
        reconsumed = max(attempts - 1, 0)
        if reconsumed >= limit:
            why = f"after {reconsumed} reconsumes, the group's maximum of {limit}"
        else:
            why = (f"after {reconsumed} reconsumes, below the group's maximum of {limit}: "
                   "the consumer asked for no more retries, or set a lower maximum of its own (a RocketMQ "
                   "client sends its maxReconsumeTimes with each message it hands back)")
    where = _where(msg)
    return [
        Hop("failed", msg.store_timestamp, f"attempt {attempts} failed (the copy does not keep why)", True,
            group=group, attempt=attempts, **where),
        Hop("dead_lettered", msg.store_timestamp, f"moved to {msg.topic}: {why}", True, group=group,
            attempt=attempts, reason=why, **where),
    ]


def _topic_copy_hop(msg: StoredMessage) -> Hop:
    where = _where(msg)
    if msg.topic == topics.TRANS_HALF_TOPIC:
        checks = msg.properties.get(topics.TRANSACTION_CHECK_TIMES)
        again = f", put back by the broker's check {checks}" if checks else ""
        return Hop("transaction", msg.store_timestamp, f"half message{again}: held in {msg.topic} until the "
                   "producer commits or rolls back", True, **where)
    if msg.topic == topics.TRANS_CHECK_MAX_TIME_TOPIC:
        checks = msg.properties.get(topics.TRANSACTION_CHECK_TIMES, "0")
        return Hop("transaction", msg.store_timestamp, f"discarded after {checks} checks without an answer: moved "
                   f"to {msg.topic}, never delivered", True, **where)
    if msg.transaction_type == TRANSACTION_COMMIT:
        return Hop("produced", msg.store_timestamp, f"committed: put to {msg.topic}", True, **where)
    if any(name in msg.properties for name in RESEND_MARKERS):
        return Hop("resent", msg.store_timestamp, f"put back on {msg.topic} from a dead-letter queue", True, **where)
    if topics.REAL_TOPIC in msg.properties:
        return Hop("released", msg.store_timestamp, f"due: put to {msg.topic}", True, **where)
    return Hop("produced", msg.store_timestamp, f"stored in {msg.topic}", True, **where)


def hops_from_copies(copies: Iterable[StoredMessage], deliver_time: DeliverTime,
                     max_reconsume_times: Callable[[str], int]) -> list[Hop]:
    """The hops the copies show, oldest copy first: a SCHEDULE_TOPIC_XXXX copy bound for
    %RETRY%G is a failed attempt of G and its retry waiting at a delay level; a %RETRY%G copy is
    a redelivery; a %DLQ%G copy a last failure and the dead letter; a copy in a plain topic is
    the produced message, a delayed one released, or a dead letter resent."""
    hops: list[Hop] = []
    for msg in sorted(copies, key=lambda m: (m.store_timestamp, m.phys_offset)):
        kind = topics.message_copy_kind(msg.topic, msg.properties)
        if kind == "resent":
            hops.append(Hop("resent", msg.store_timestamp, f"a dead letter put back on {msg.topic}", True,
                            **_where(msg)))
        elif kind == "scheduled":
            hops += _scheduled_hops(msg, deliver_time)
        elif kind == "retry":
            attempt = msg.reconsume_times + 1
            hops.append(Hop("redelivered", msg.store_timestamp, f"put to {msg.topic} for delivery attempt {attempt}",
                            True, group=_group_of(msg.topic, topics.RETRY_PREFIX), attempt=attempt, **_where(msg)))
        elif kind == "dead_letter":
            hops += _dead_letter_hops(msg, max_reconsume_times)
        elif kind in ("original", "transaction_half"):
            hops.append(_topic_copy_hop(msg))
    return hops
