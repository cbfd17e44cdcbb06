"""Transactional messages, kept as RocketMQ 4.9's broker keeps them in its store.

- The half message: the producer's message in RMQ_SYS_TRANS_HALF_TOPIC queue 0, its real topic
  and queue in REAL_TOPIC and REAL_QID, TRAN_MSG=true and the producer group in PGROUP, no
  transaction type in its sys flag (the broker resets it), so it is queued and indexed there.
- Its end: a commit puts a copy to the real topic and queue, with the commit type in its sys
  flag, the half's commit log offset as its prepared transaction offset and the half's
  properties string as it is (REAL_TOPIC, REAL_QID and TRAN_MSG included: the broker writes the
  string before it clears them); a later delivery time sends that copy through the timer
  topic first. Commit and rollback then write an op record to RMQ_SYS_TRANS_OP_HALF_TOPIC
  queue 0: body the half's queue offset in decimal, tag "d", born at the store host.
- The broker's check of a transaction still open: the half is put back, a new record with
  TRANSACTION_CHECK_TIMES one higher (the first check writes 1), and its offset message id is
  the transaction id from then on. A half already checked max_checks times, or born longer
  ago than the file reserved time, is discarded: copied as it is to TRANS_CHECK_MAX_TIME_TOPIC
  queue 0 (RocketMQ 4.9.8's DefaultTransactionalMessageCheckListener), with no op record.
- The check's progress: consumer group CID_RMQ_SYS_TRANS's offsets of the half and op queues.
  Every half below the half offset is ended, put back or discarded; every op record below the
  op offset names a half below the half offset.

A half and the copies checks put back share their unique key and born time: their lineage."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from store.broker.record_builder import RecordBuilder
from store.errors import InvalidMessageError
from store.format import topics
from store.format.codec import TRANSACTION_COMMIT, StoredMessage
from store.format.delivery_time import parse_deliver_ms

HALF_QUEUE_ID = 0
OP_QUEUE_ID = 0
DISCARD_QUEUE_ID = 0
REMOVE_TAG = "d"  # the tag of an op record that ends a half message
DEFAULT_MAX_CHECKS = 15  # RocketMQ's transactionCheckMax
MAX_HALVES_PER_CHECK = 1000  # halves one check pass handles; the next pass goes on

Lineage = tuple[str | None, int]


def lineage_of(half: StoredMessage) -> Lineage:
    return half.unique_key, half.born_timestamp


def op_properties() -> dict[str, str]:
    """An op record's properties, in the order RocketMQ's Message puts them."""
    return {topics.TAGS: REMOVE_TAG, topics.WAIT: "true"}


def op_body(half_queue_offset: int) -> bytes:
    return str(half_queue_offset).encode("ascii")


def ended_offsets(body: bytes) -> list[int]:
    """The half queue offsets an op record's body names (RocketMQ 5 joins several with commas)."""
    return [int(part) for part in body.decode("ascii", errors="replace").split(",") if part.strip().isdigit()]


def check_times(half: StoredMessage) -> int:
    """How often the broker asked the producer about the half (an unreadable count as none)."""
    text = half.properties.get(topics.TRANSACTION_CHECK_TIMES, "")
    return int(text) if text.isdigit() and len(text) < 10 else 0


Planned = tuple[tuple, str, str | None]  # a record item, its topic and its unique key


def real_place(half: StoredMessage) -> tuple[str, int]:
    """The topic and queue a half message is for. Raises InvalidMessageError without them."""
    topic, queue = half.properties.get(topics.REAL_TOPIC), half.properties.get(topics.REAL_QID, "")
    if not topic or not queue.isdigit() or len(queue) > 9:
        raise InvalidMessageError(f"half message {half.offset_msg_id} does not say its real topic and queue")
    return topic, int(queue)


def commit_record(builder: RecordBuilder, half: StoredMessage, now: int) -> Planned:
    """The copy a commit puts to the real topic and queue: through the timer topic when the
    half asks for a delivery time still ahead (REAL_TOPIC and REAL_QID then name the real
    place again, TRAN_MSG left out, as RocketMQ 5's timer rewrite of the cleared map)."""
    topic, queue_id = real_place(half)
    properties = None
    deliver_ms = parse_deliver_ms(half.properties.get(topics.TIMER_DELIVER_MS))
    if deliver_ms is not None and deliver_ms > max(now, builder.timer_floor_ms):
        cleared = (topics.REAL_TOPIC, topics.REAL_QID, topics.TRAN_MSG)
        properties = {name: value for name, value in half.properties.items() if name not in cleared}
        properties.update({topics.REAL_TOPIC: topic, topics.REAL_QID: str(queue_id)})
        topic, queue_id = topics.TIMER_TOPIC, 0
    item = builder.copy_item(half, topic, queue_id, half.reconsume_times, properties,
                             transaction_type=TRANSACTION_COMMIT, prepared_offset=half.phys_offset)
    return item, topic, half.unique_key


def op_record(builder: RecordBuilder, half: StoredMessage, now: int) -> Planned:
    """The op record that ends `half` (commit or rollback)."""
    return builder.build_broker_record(topics.TRANS_OP_HALF_TOPIC, OP_QUEUE_ID, op_body(half.queue_offset),
                                       op_properties(), now)


def checked_record(builder: RecordBuilder, half: StoredMessage, times: int) -> Planned:
    """The half put back by the broker's check number `times`."""
    properties = {**half.properties, topics.TRANSACTION_CHECK_TIMES: str(times)}
    item = builder.copy_item(half, topics.TRANS_HALF_TOPIC, HALF_QUEUE_ID, half.reconsume_times, properties)
    return item, topics.TRANS_HALF_TOPIC, half.unique_key


def discarded_record(builder: RecordBuilder, half: StoredMessage, times: int | None = None) -> Planned:
    """The half, copied to TRANS_CHECK_MAX_TIME_TOPIC as it is or, with `times`, with that
    TRANSACTION_CHECK_TIMES (RocketMQ counts the check before it finds a half too old)."""
    properties = None if times is None else {**half.properties, topics.TRANSACTION_CHECK_TIMES: str(times)}
    item = builder.copy_item(half, topics.TRANS_CHECK_MAX_TIME_TOPIC, DISCARD_QUEUE_ID, half.reconsume_times,
                             properties)
    return item, topics.TRANS_CHECK_MAX_TIME_TOPIC, half.unique_key


@dataclass(slots=True)
class OpenHalf:
    queue_offset: int
    phys_offset: int
    lineage: Lineage
    last_ms: int  # the store time of this copy: when the half was put, or last checked


@dataclass(frozen=True)
class TransactionCheck:
    """A transaction the broker asks its producer about: end it with `transaction_id`."""

    transaction_id: str  # the offset message id of the half message as put back
    producer_group: str | None
    check_times: int
    half: StoredMessage  # as put back: the producer's message, real topic and queue in its properties

    @property
    def real_topic(self) -> str | None:
        return self.half.properties.get(topics.REAL_TOPIC)

    @property
    def unique_key(self) -> str | None:
        return self.half.unique_key


class OpenHalves:
    """The transactions not ended yet, each by the newest copy of its half message, in half
    queue order (a copy put back goes to the end), and the check's progress."""

    def __init__(self, half_end: int = 0, op_end: int = 0):
        self._by_lineage: dict[Lineage, OpenHalf] = {}
        self._half_end = half_end  # the next half queue offset
        self._op_end = op_end  # the next op queue offset
        self._ops: deque[tuple[int, int]] = deque()  # (op offset, half offset) from the op progress on
        self.used = half_end > 0  # the store has half messages: the progress is worth keeping

    def __len__(self) -> int:
        return len(self._by_lineage)

    def current(self, lineage: Lineage) -> OpenHalf | None:
        return self._by_lineage.get(lineage)

    def add(self, half: OpenHalf) -> None:
        """A half put, or put back (the copy it replaces is done)."""
        self._by_lineage.pop(half.lineage, None)
        self._by_lineage[half.lineage] = half
        self._half_end = max(self._half_end, half.queue_offset + 1)
        self.used = True

    def drop(self, lineage: Lineage) -> None:
        """Ended, discarded, or its record expired."""
        self._by_lineage.pop(lineage, None)

    def noted_op(self, op_offset: int, half_offset: int) -> None:
        """An op record at `op_offset` of the op queue names the half at `half_offset`."""
        self._ops.append((op_offset, half_offset))
        self._op_end = max(self._op_end, op_offset + 1)

    def oldest(self) -> OpenHalf | None:
        return next(iter(self._by_lineage.values()), None)

    def due(self, cutoff_ms: int, limit: int) -> list[OpenHalf]:
        """The halves stored or last checked at or before `cutoff_ms`, oldest first, at most
        `limit`. As RocketMQ's check, it stops at the first one not due: copies are in the
        order of their store times, so the due ones come first."""
        found = []
        for half in self._by_lineage.values():
            if half.last_ms > cutoff_ms or len(found) == limit:
                break
            found.append(half)
        return found

    def progress(self) -> tuple[int, int]:
        """The check's progress (half queue offset, op queue offset): the first open half, and
        the first op record that names a half at or after it."""
        first_open = self.oldest()
        half_progress = first_open.queue_offset if first_open is not None else self._half_end
        while self._ops and self._ops[0][1] < half_progress:
            self._ops.popleft()
        return half_progress, self._ops[0][0] if self._ops else self._op_end
