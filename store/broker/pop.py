"""Pop-style receive (RocketMQ 5 SimpleConsumer semantics) in the embedded store.

A group receives up to N messages of a topic, taken fairly from all its queues: each is
invisible to the group for `invisible_ms` and comes with a receipt handle and a 1-based
delivery attempt. `ack` with the handle ends the message for the group; `nack` reports a
failure; `change_invisible` moves the deadline (from now) and replaces the handle; `renew` moves
it and keeps the handle (a server renewing a push consumer's deliveries); `dead_letter` gives
the message up at once, as if its last attempt had failed.

Redelivery rule: when attempt `a` fails, by a nack at time t or by its invisible time running
out at time e (then t = e, whenever the expiry is noticed), attempt `a + 1` becomes visible
at t + backoff(a), where backoff(a) is the delay of level min(2 + a, max level) of the
store's current delay level table (attempt 1 waits level 3 = 10 s, attempt 2 level 4 = 30 s,
... as RocketMQ's retry schedule). A receive may hand its messages out without the backoff
after an expiry (`backoff_after_timeout=False`, RocketMQ 5 clients, whose invisible time is
the backoff): when such a delivery's invisible time runs out at e, the next attempt is visible
at e. A nack still waits the backoff. A group allows max_reconsume_times + 1 attempts (17 by
default); when attempt `a` fails and `a` has reached that, the message is dead-lettered: a
copy with reconsume times `a` is written to %DLQ%group queue 0, carrying ORIGIN_MESSAGE_ID,
RETRY_TOPIC, DLQ_ORIGIN_TOPIC and DLQ_ORIGIN_MESSAGE_ID (the unique key, else the offset id).

Unlike RocketMQ's broker, which writes checkpoints and retry copies to system topics,
redelivery re-reads the original record; only the dead letter is a new record. Expiries are
noticed by `revive_due` (the store's scheduler thread calls it) and, for one group and
topic, at the start of each receive.

Handles are valid for the current delivery of a message only: after a redelivery, a nack,
an ack, a dead_letter or a change_invisible the older handle is refused with
ReceiptHandleError (a renew keeps it), and so is a handle whose invisible time has run out
(even before the expiry is processed).

Bounds: max_messages 1..1000, invisible_ms 1 s..12 h, wait_ms 0..60 s. A topic that does not
exist yet gives no messages (a long poll waits for it); dead-letter topics, the schedule topic
and topics without read permission are refused with NotReadableError. A group starts
each queue at its committed consumer offset, else at the queue's first message, and keeps the
committed offset at the lowest offset not yet done (acked, dead-lettered or passed over by
the tag filter).

Orderly groups (consume_mode "orderly", RocketMQ 5 FIFO groups) get each queue in queue order,
one batch at a time: a receive hands out consecutive messages of one queue only, taken from the
queues in turn, and skips a queue while the group has any of its messages in flight. A queue
whose messages failed gives those again first, oldest first, once the oldest is visible again,
and newer ones only once none waits; queues do not wait for each other.

Persistence: the in-flight state is written to config/popState.json by the store's flush (the
snapshot is taken before the commit log is synced, so it never names a message the log may
lose). After a clean restart the handles of the current deliveries are still accepted and
deadlines are kept; entries in flight are redelivered after their invisible time with the
next attempt. After a crash the state of the last flush applies: messages received since are
delivered again (at least once), handles issued since are refused, nothing is skipped."""

from __future__ import annotations

import itertools
import os
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from store.broker.metadata import GroupConfig, TopicConfig, consuming_group
from store.broker.pop_state import InFlight, PopState, PopStateFile, Subscription, load_state
from store.broker.pull import TagFilter, check_consumable
from store.broker.receipt import ReceiptHandleError, decode_handle, new_handle
from store.broker.retired_handles import RetiredHandles
from store.broker.retry import retry_delay_level, with_retry_origin
from store.broker.trace import TraceEvent, TraceKind, client_label
from store.errors import StoreError
from store.format import topics
from store.format.codec import StoredMessage
from store.projections.consume_queue import ConsumeQueue, QueueUnit

if TYPE_CHECKING:
    from store.message_store import MessageStore, PutResult

MAX_MESSAGES = 1000
MIN_INVISIBLE_MS = 1000
MAX_INVISIBLE_MS = 12 * 3600 * 1000
MAX_WAIT_MS = 60_000
MAX_REASON_CHARS = 1024
MAX_SCAN_PER_RECEIVE = 10_000  # queue units looked at per receive (tag filters may pass many over)
REMEMBERED_HANDLES = 100_000  # retired handles kept to say why they are refused
POLL_SLICE_S = 0.1  # a long poll also wakes this often, to see messages that became visible again
TIMEOUT_REASON = "invisible time ran out"
GAVE_UP_REASON = "the consumer sent it to the dead-letter queue"


class PopRequestError(StoreError, ValueError):
    """A receive, ack, nack or change_invisible argument is out of bounds."""


@dataclass(frozen=True, slots=True)
class Received:
    message: StoredMessage
    receipt_handle: str
    delivery_attempt: int  # 1 for the first delivery
    invisible_until_ms: int


def _check_int(name: str, value: object, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise PopRequestError(f"{name} must be an integer between {low} and {high}, got {value!r}")
    return value


def _check_reason(reason: object) -> str | None:
    if reason is None:
        return None
    if not isinstance(reason, str):
        raise PopRequestError("a failure reason must be a string")
    return reason[:MAX_REASON_CHARS]


def _tag_filter(expression: object) -> TagFilter:
    if expression is not None and not isinstance(expression, str):
        raise PopRequestError("a tag subscription is a string such as '*' or 'TagA || TagB'")
    try:
        return TagFilter(expression)
    except ValueError as exc:
        raise PopRequestError(str(exc)) from None


def dead_letter_properties(original: StoredMessage) -> dict[str, str]:
    props = with_retry_origin(original)
    props.pop(topics.DELAY, None)
    props[topics.DLQ_ORIGIN_TOPIC] = original.topic
    props[topics.DLQ_ORIGIN_MESSAGE_ID] = original.unique_key or original.offset_msg_id
    return props


class PopService:
    """Owned by the store; every method that changes state takes the store lock."""

    def __init__(self, store: MessageStore):
        self._store = store
        self.state: PopState = load_state(store.paths.config, self._queue_bounds, self._unit_phys)
        self.state_file = PopStateFile(store.paths.config, self.state, store._lock)
        self._retired = RetiredHandles(REMEMBERED_HANDLES)
        # Nonces only tell deliveries apart (handles are checked against the table), so one seed
        # from the OS will do: a system call per handle costs more than the rest of a receive.
        self._nonces = random.Random(os.urandom(16))
        self.wait_clock: Callable[[], float] = time.monotonic  # seconds: how long a long poll has waited

    def _queue_bounds(self, topic: str, queue_id: int) -> tuple[int, int] | None:
        cq = self._store.queues.get(topic, queue_id)
        return None if cq is None else (cq.min_offset, cq.max_offset)

    def _unit_phys(self, topic: str, queue_id: int, queue_offset: int) -> int | None:
        cq = self._store.queues.get(topic, queue_id)
        unit = cq.get(queue_offset) if cq is not None else None
        return None if unit is None else unit.phys_offset

    def backoff_ms(self, attempt: int) -> int:
        """How long a message waits after attempt `attempt` failed."""
        levels = self._store.delay_levels
        return levels.delay_ms(levels.clamp(retry_delay_level(attempt - 1)))

    # -- receive -----------------------------------------------------------------------------
    def receive(self, group: str, topic: str, max_messages: int, invisible_ms: int, tags: str | None = None,
                wait_ms: int = 0, client: str | None = None, *, backoff_after_timeout: bool = True
                ) -> list[Received]:
        """`client`, when given, is named by the DELIVERED events (the receiving client's id)."""
        consuming_group(group)
        _check_int("max_messages", max_messages, 1, MAX_MESSAGES)
        _check_int("invisible_ms", invisible_ms, MIN_INVISIBLE_MS, MAX_INVISIBLE_MS)
        _check_int("wait_ms", wait_ms, 0, MAX_WAIT_MS)
        if type(backoff_after_timeout) is not bool:
            raise PopRequestError("backoff_after_timeout must be True or False")
        accepts = _tag_filter(tags)
        client = client_label(client)
        store = self._store
        deadline = self.wait_clock() + wait_ms / 1000
        with store._writing():
            while True:
                received, more_to_scan = self._receive_now(group, topic, max_messages, invisible_ms, accepts,
                                                           backoff_after_timeout, client)
                remaining = deadline - self.wait_clock()
                if received or remaining <= 0:
                    return received
                if not more_to_scan:
                    store.wait_for_append(min(remaining, POLL_SLICE_S))
                if store._closed:
                    raise StoreError("the store is closed")

    def _receive_now(self, group: str, topic: str, want: int, invisible_ms: int, accepts: TagFilter,
                     backoff_after_timeout: bool, client: str | None) -> tuple[list[Received], bool]:
        """Copies waiting in the group's pop retry topic (resent dead letters) first, then the topic
        (for an orderly group, only when the retry topic gave none: one queue per receive)."""
        store = self._store
        group_config = store.metadata.group(group)
        config = self._readable_topic(topic)
        if not group_config.consume_enable:
            raise PopRequestError(f"consumption is disabled for group {group}")
        if config is None:
            return [], False
        received: list[Received] = []
        more_to_scan = False
        retry = store.metadata.topic(topics.pop_retry_topic(group, topic)) if not topics.is_retry_topic(topic) else None
        orderly = group_config.consume_mode == "orderly"
        for source in (retry, config):
            if source is None or len(received) == want or (orderly and received):
                continue
            got, more = self._receive_from(group_config, source, want - len(received), invisible_ms, accepts,
                                           backoff_after_timeout, client)
            received += got
            more_to_scan = more_to_scan or more
        return received, more_to_scan

    def _receive_from(self, group_config: GroupConfig, config: TopicConfig, want: int, invisible_ms: int,
                      accepts: TagFilter, backoff_after_timeout: bool, client: str | None
                      ) -> tuple[list[Received], bool]:
        store = self._store
        now = store.clock.now_ms()
        sub = self.state.subscription(group_config.name, config.name)
        touched: set[int] = set()
        events: list[TraceEvent] = []
        self._expire(sub, now, group_config, events, touched)
        if group_config.consume_mode == "orderly":
            taken, fresh, more_to_scan = self._take_in_order(sub, config, now, want, accepts, touched)
        else:
            taken = self._take_visible(sub, now, want, accepts, touched)
            fresh, more_to_scan = self._take_new(sub, config, want - len(taken), accepts, touched)
        for queue_id, unit, msg in fresh:
            entry = InFlight(queue_id, unit.queue_offset, unit.phys_offset, msg.unique_key or msg.offset_msg_id,
                             msg.offset_msg_id, attempt=0, generation=0, receipt_handle=None, due_ms=now)
            sub.add(entry)
            taken.append((entry, msg))
        received = [self._hand_out(sub, entry, msg, now, invisible_ms, backoff_after_timeout) for entry, msg in taken]
        if received:
            store._note_due(now + invisible_ms)
        if received or touched or events:
            self.state_file.mark_changed()
        self._commit(sub, touched | {r.message.queue_id for r in received})
        if self._tracing(sub):
            events += [TraceEvent(TraceKind.DELIVERED, entry.unique_key, now, config.name, entry.queue_id,
                                  entry.queue_offset, entry.offset_msg_id, group=group_config.name,
                                  attempt=entry.attempt, reconsume_times=entry.attempt - 1, due_ms=entry.due_ms,
                                  client=client)
                       for entry, _ in taken]
            store._trace(events, now)
        return received, more_to_scan

    def _readable_topic(self, topic: str) -> TopicConfig | None:
        topics.validate_topic(topic)
        config = self._store.metadata.topic(topic)
        check_consumable(topic, config is None or config.readable)
        return config

    def _take_visible(self, sub: Subscription, now: int, want: int, accepts: TagFilter,
                      touched: set[int]) -> list[tuple[InFlight, StoredMessage]]:
        return self._take_waiting(sub, iter(partial(sub.pop_visible, now), None), want, accepts, touched)

    def _take_waiting(self, sub: Subscription, candidates: Iterator[InFlight], want: int, accepts: TagFilter,
                      touched: set[int]) -> list[tuple[InFlight, StoredMessage]]:
        """Up to `want` waiting entries of `candidates` to hand out again, asking it for no more
        than that; those gone or no longer wanted end for the group."""
        taken = []
        while len(taken) < want and (entry := next(candidates, None)) is not None:
            msg = self._read(entry.phys_offset)
            if msg is None or not accepts.matches(msg):  # gone, or the subscription no longer wants it
                sub.remove(entry)
                touched.add(entry.queue_id)
                continue
            taken.append((entry, msg))
        return taken

    def _take_new(self, sub: Subscription, config: TopicConfig, want: int, accepts: TagFilter,
                  touched: set[int]) -> tuple[list[tuple[int, QueueUnit, StoredMessage]], bool]:
        """Messages never handed out to the group, one queue after another in turn, and whether
        the scan stopped early with units left to look at."""
        store = self._store
        count = config.queues
        start = sub.next_queue % count
        sub.next_queue = start + 1
        open_queues = []
        for queue_id in [*range(start, count), *range(start)]:
            cq = store.queues.get(sub.topic, queue_id)
            if cq is not None and self._cursor(sub, queue_id, cq) < cq.max_offset:
                open_queues.append((queue_id, cq))
        taken: list[tuple[int, QueueUnit, StoredMessage]] = []
        budget = MAX_SCAN_PER_RECEIVE
        while open_queues and len(taken) < want and budget > 0:
            still_open = []
            for queue_id, cq in open_queues:
                if len(taken) == want or budget <= 0:
                    still_open.append((queue_id, cq))
                    continue
                cursor = sub.cursors[queue_id]
                found = None
                while found is None and cursor < cq.max_offset and budget > 0:
                    unit = cq.get(cursor)
                    cursor += 1
                    budget -= 1
                    if unit is None or not accepts.matches_code(unit.tags_code):
                        continue
                    msg = self._read(unit.phys_offset)
                    if msg is not None and accepts.matches(msg):
                        found = (queue_id, unit, msg)
                if cursor != sub.cursors[queue_id]:
                    sub.cursors[queue_id] = cursor
                    touched.add(queue_id)
                if found is not None:
                    taken.append(found)
                if cursor < cq.max_offset:
                    still_open.append((queue_id, cq))
            open_queues = still_open
        return taken, bool(open_queues) and len(taken) < want

    def _take_in_order(self, sub: Subscription, config: TopicConfig, now: int, want: int, accepts: TagFilter,
                       touched: set[int]) -> tuple[list[tuple[InFlight, StoredMessage]],
                                                   list[tuple[int, QueueUnit, StoredMessage]], bool]:
        """An orderly group's batch: the first queue in turn with none of its messages in flight
        gives its failed messages that are visible again, oldest first, then, once none waits,
        its next new ones; and whether the scan stopped early with units left to look at."""
        pending: dict[int, list[InFlight]] = {}
        for entry in sub.entries.values():
            pending.setdefault(entry.queue_id, []).append(entry)
        start = sub.next_queue % config.queues
        queue_ids = sorted({*range(config.queues), *pending})
        budget = MAX_SCAN_PER_RECEIVE
        for queue_id in [q for q in queue_ids if q >= start] + [q for q in queue_ids if q < start]:
            entries = pending.get(queue_id, [])
            if any(entry.handed_out for entry in entries):
                continue
            entries.sort(key=lambda entry: entry.queue_offset)
            visible = list(itertools.takewhile(lambda entry: entry.due_ms <= now, entries))
            retried = self._take_waiting(sub, iter(visible), want, accepts, touched)
            fresh: list[tuple[int, QueueUnit, StoredMessage]] = []
            if len(visible) == len(entries) and len(retried) < want:  # none waits any more
                fresh, scanned = self._take_run(sub, queue_id, want - len(retried), accepts, budget, touched)
                budget -= scanned
            if retried or fresh:
                sub.next_queue = queue_id + 1
                return retried, fresh, False
            if budget <= 0:
                return [], [], True
        sub.next_queue = start + 1
        return [], [], False

    def _take_run(self, sub: Subscription, queue_id: int, want: int, accepts: TagFilter, budget: int,
                  touched: set[int]) -> tuple[list[tuple[int, QueueUnit, StoredMessage]], int]:
        """Up to `want` new messages of one queue, consecutive but for those the tag filter passes
        over, looking at `budget` units at most; and how many units it looked at."""
        cq = self._store.queues.get(sub.topic, queue_id)
        if cq is None or want <= 0:
            return [], 0
        start = cursor = self._cursor(sub, queue_id, cq)
        end = min(cq.max_offset, cursor + budget)
        fresh = []
        while len(fresh) < want and cursor < end:
            unit = cq.get(cursor)
            cursor += 1
            if unit is None or not accepts.matches_code(unit.tags_code):
                continue
            msg = self._read(unit.phys_offset)
            if msg is not None and accepts.matches(msg):
                fresh.append((queue_id, unit, msg))
        if cursor != start:
            sub.cursors[queue_id] = cursor
            touched.add(queue_id)
        return fresh, cursor - start

    def _cursor(self, sub: Subscription, queue_id: int, cq: ConsumeQueue) -> int:
        """The next offset to hand out: first the committed consumer offset, else the queue's start."""
        cursor = sub.cursors.get(queue_id)
        if cursor is None:
            cursor = self._store.offsets.get(sub.topic, sub.group, queue_id)
        cursor = max(cursor or 0, cq.min_offset)
        if sub.cursors.get(queue_id) != cursor:
            sub.cursors[queue_id] = cursor
            self.state_file.mark_changed()
        return cursor

    def _hand_out(self, sub: Subscription, entry: InFlight, msg: StoredMessage, now: int,
                  invisible_ms: int, backoff_after_timeout: bool) -> Received:
        entry.attempt += 1
        entry.backoff_after_timeout = backoff_after_timeout
        self._issue_handle(sub, entry, now, invisible_ms)
        return Received(msg, entry.receipt_handle, entry.attempt, entry.due_ms)

    def _issue_handle(self, sub: Subscription, entry: InFlight, now: int, invisible_ms: int) -> str:
        entry.generation += 1
        entry.receipt_handle = new_handle(sub.group, sub.topic, entry.queue_id, entry.queue_offset, entry.generation,
                                          f"{self._nonces.getrandbits(64):016x}")
        entry.due_ms = now + invisible_ms
        sub.set_timer(entry, self.state.next_seq())
        return entry.receipt_handle

    def _read(self, phys_offset: int) -> StoredMessage | None:
        try:
            return self._store.commitlog.read(phys_offset)
        except StoreError:  # deleted by retention or damaged: nothing to deliver
            return None

    # -- ack, nack, change_invisible, renew, dead_letter -------------------------------------
    def ack(self, group: str, receipt_handle: str, client: str | None = None) -> None:
        [refused] = self.ack_many(group, [receipt_handle], client)
        if refused is not None:
            raise refused

    def ack_many(self, group: str, receipt_handles: list[str], client: str | None = None
                 ) -> list[ReceiptHandleError | None]:
        """Acknowledge several deliveries at once (one lock, one trace write): for each handle,
        None when it was acknowledged, else the error that refused it. `client`, when given, is
        named by the ACKED events (the acknowledging client's id), as by nack's and
        change_invisible's events."""
        client = client_label(client)
        store = self._store
        with store._writing():
            now = store.clock.now_ms()
            outcomes: list[ReceiptHandleError | None] = []
            touched: dict[tuple[str, str], tuple[Subscription, set[int]]] = {}
            events = []
            for handle, sub, entry in self._each_current(group, receipt_handles, now, outcomes):
                sub.remove(entry)
                self._retire(handle, "receipt handle no longer valid: the message was already acknowledged")
                touched.setdefault((sub.group, sub.topic), (sub, set()))[1].add(entry.queue_id)
                if self._tracing(sub):
                    events.append(TraceEvent(TraceKind.ACKED, entry.unique_key, now, sub.topic, entry.queue_id,
                                             entry.queue_offset, entry.offset_msg_id, group=group,
                                             attempt=entry.attempt, client=client))
            for sub, queue_ids in touched.values():
                self.state_file.mark_changed()
                self._commit(sub, queue_ids)
            store._trace(events, now)
            return outcomes

    def nack(self, group: str, receipt_handle: str, reason: str | None = None, client: str | None = None) -> None:
        """The consumer failed the message: it is delivered again after the backoff, or dead-lettered."""
        reason = _check_reason(reason)
        client = client_label(client)
        store = self._store
        with store._writing():
            now = store.clock.now_ms()
            sub, entry = self._current(group, receipt_handle, now)
            group_config = store.metadata.group(group)
            if entry.attempt >= group_config.max_reconsume_times + 1:
                self._check_dead_letter_writable(group)
            events: list[TraceEvent] = []
            self._retire(receipt_handle, "receipt handle no longer valid: the message was already nacked")
            self._fail(sub, entry, now, reason, group_config, now, events, timed_out=False, client=client)
            self.state_file.mark_changed()
            self._commit(sub, {entry.queue_id})
            store._trace(events, now)

    def change_invisible(self, group: str, receipt_handle: str, invisible_ms: int, client: str | None = None) -> str:
        """Make the message invisible for `invisible_ms` from now, within the same delivery
        attempt (an INVISIBLE_CHANGED event). Returns the new handle; the old one is refused
        afterwards."""
        _check_int("invisible_ms", invisible_ms, MIN_INVISIBLE_MS, MAX_INVISIBLE_MS)
        client = client_label(client)
        store = self._store
        with store._writing():
            now = store.clock.now_ms()
            sub, entry = self._current(group, receipt_handle, now)
            self._retire(receipt_handle, "stale receipt handle: change_invisible replaced it with a new one")
            self.state_file.mark_changed()
            store._note_due(now + invisible_ms)
            handle = self._issue_handle(sub, entry, now, invisible_ms)
            if self._tracing(sub):
                store._trace([TraceEvent(TraceKind.INVISIBLE_CHANGED, entry.unique_key, now, sub.topic, entry.queue_id,
                                         entry.queue_offset, entry.offset_msg_id, group=group, attempt=entry.attempt,
                                         due_ms=entry.due_ms, client=client)], now)
            return handle

    def renew(self, group: str, receipt_handle: str, invisible_ms: int) -> None:
        """Keep the message invisible for `invisible_ms` from now, under the same handle."""
        [refused] = self.renew_many(group, [receipt_handle], invisible_ms)
        if refused is not None:
            raise refused

    def renew_many(self, group: str, receipt_handles: list[str], invisible_ms: int
                   ) -> list[ReceiptHandleError | None]:
        """Renew several deliveries at once (one lock): for each handle, None when its message is
        now invisible until `invisible_ms` from now (the handle stays valid), else the error
        that refused it, as ack would."""
        _check_int("invisible_ms", invisible_ms, MIN_INVISIBLE_MS, MAX_INVISIBLE_MS)
        store = self._store
        with store._writing(caught_up=False):
            now = store.clock.now_ms()
            outcomes: list[ReceiptHandleError | None] = []
            for _, sub, entry in self._each_current(group, receipt_handles, now, outcomes):
                entry.due_ms = now + invisible_ms
                sub.set_timer(entry, self.state.next_seq())
                self.state_file.mark_changed()
            store._note_due(now + invisible_ms)
            return outcomes

    def dead_letter(self, group: str, receipt_handle: str, reason: str | None = None) -> PutResult | None:
        """The consumer gives the message up now: it is written to %DLQ%group as after a failed
        last attempt and ends for the group. None when there was nothing left to write (retention
        deleted the message): it ends for the group all the same. Refused, with nothing changed,
        for a handle ack would refuse or when the dead letter cannot be written."""
        reason = _check_reason(reason)
        store = self._store
        with store._writing():
            now = store.clock.now_ms()
            sub, entry = self._current(group, receipt_handle, now)
            self._check_dead_letter_writable(group)
            copy = self._dead_letter_copy(sub, entry, reason or GAVE_UP_REASON)  # may refuse: nothing changed yet
            events: list[TraceEvent] = []
            if self._tracing(sub):
                events.append(TraceEvent(TraceKind.FAILED, entry.unique_key, now, sub.topic, entry.queue_id,
                                         entry.queue_offset, entry.offset_msg_id, group=group, attempt=entry.attempt,
                                         reason=reason))
            result = self._end_dead(sub, entry, copy, now, events)
            self._retire(receipt_handle, "receipt handle no longer valid: the message was already dead-lettered")
            self.state_file.mark_changed()
            self._commit(sub, {entry.queue_id})
            store._trace(events, now)
            return result

    def _check_dead_letter_writable(self, group: str) -> None:
        """The dead letter must be writable before anything changes: a full disk refuses the call
        (DiskFullError) and the handle stays good for the consumer's next try."""
        self._store._room_for_change()
        self._store.metadata.topic_for_send(topics.dlq_topic(group))

    def _each_current(self, group: str, receipt_handles: list[str], now: int,
                      outcomes: list[ReceiptHandleError | None]) -> Iterator[tuple[str, Subscription, InFlight]]:
        """Each handle with the subscription and entry of its current delivery, for the handles
        that name one; `outcomes` gets None for those and the refusal for each other handle."""
        for handle in receipt_handles:
            try:
                sub, entry = self._current(group, handle, now)
            except ReceiptHandleError as exc:
                outcomes.append(exc)
                continue
            outcomes.append(None)
            yield handle, sub, entry

    def _current(self, group: str, text: str, now: int) -> tuple[Subscription, InFlight]:
        """The subscription and entry whose current, unexpired handle `text` is."""
        handle = decode_handle(text)
        if handle.group != group:
            raise ReceiptHandleError(f"the receipt handle was issued to another group, not {group}")
        sub = self.state.get(handle.group, handle.topic)
        entry = sub.entries.get((handle.queue_id, handle.queue_offset)) if sub is not None else None
        if entry is not None and entry.receipt_handle == text:
            if now >= entry.due_ms:
                raise ReceiptHandleError(f"expired receipt handle: the invisible time of attempt {entry.attempt} "
                                         f"ran out at {entry.due_ms}; the message will be delivered again")
            return sub, entry
        why = self._retired.why(text)
        if why is not None:
            raise ReceiptHandleError(why)
        if entry is not None and handle.generation < entry.generation:
            raise ReceiptHandleError("stale receipt handle: the message was delivered again or its invisible "
                                     "time was changed since")
        cursor = sub.cursors.get(handle.queue_id) if sub is not None else None
        if entry is None and cursor is not None and handle.queue_offset < cursor:
            raise ReceiptHandleError("receipt handle no longer valid: the message is no longer in flight "
                                     "(acknowledged or dead-lettered)")
        raise ReceiptHandleError("unknown receipt handle: no delivery of this store has it")

    def _retire(self, handle: str, why: str) -> None:
        self._retired.add(handle, why)

    # -- failures and expiry -----------------------------------------------------------------
    def next_expiry_ms(self) -> int | None:
        """(store lock held) The earliest time an invisible time may run out: revive_due has
        nothing to do before."""
        return min((t for sub in self.state.subscriptions.values() if (t := sub.next_expiry_ms()) is not None),
                   default=None)

    def revive_due(self) -> int:
        """Process every delivery whose invisible time ran out: schedule its next attempt or
        dead-letter it, and wake the long polls waiting, for those visible again at once.
        Returns how many expired."""
        store = self._store
        with store._writing():
            now = store.clock.now_ms()
            expired = 0
            events: list[TraceEvent] = []
            for sub in self.state:
                due = sub.next_due_ms()
                if due is None or due > now:
                    continue
                touched: set[int] = set()
                expired += self._expire(sub, now, store.metadata.group(sub.group), events, touched)
                self._commit(sub, touched)
            if expired:
                self.state_file.mark_changed()
                if store._long_polls:
                    store._appended.notify_all()
            store._trace(events, now)
            return expired

    def _expire(self, sub: Subscription, now: int, group_config: GroupConfig, events: list[TraceEvent],
                touched: set[int]) -> int:
        expired = 0
        while (entry := sub.pop_expired(now)) is not None:
            self._retire(entry.receipt_handle, f"expired receipt handle: the invisible time of attempt "
                                               f"{entry.attempt} ran out at {entry.due_ms}")
            self._fail(sub, entry, entry.due_ms, None, group_config, now, events, timed_out=True)
            touched.add(entry.queue_id)
            expired += 1
        return expired

    def _fail(self, sub: Subscription, entry: InFlight, failed_at: int, reason: str | None,
              group_config: GroupConfig, now: int, events: list[TraceEvent], *, timed_out: bool,
              client: str | None = None) -> None:
        """Attempt `entry.attempt` failed at `failed_at`: by a nack with `reason`, or its invisible time ran out."""
        entry.receipt_handle = None
        entry.last_failure = reason or (TIMEOUT_REASON if timed_out else "the consumer reported a failure")
        dead = entry.attempt >= group_config.max_reconsume_times + 1
        waits = not timed_out or entry.backoff_after_timeout
        retry_at = failed_at + self.backoff_ms(entry.attempt) if waits else failed_at
        if self._tracing(sub):
            kind = TraceKind.INVISIBLE_TIMEOUT if timed_out else TraceKind.FAILED
            events.append(TraceEvent(kind, entry.unique_key, failed_at, sub.topic, entry.queue_id,
                                     entry.queue_offset, entry.offset_msg_id, group=sub.group, attempt=entry.attempt,
                                     due_ms=None if dead else retry_at, reason=reason, client=client))
        if dead and self._dead_letter(sub, entry, now, events):
            return
        entry.due_ms = retry_at
        sub.set_timer(entry, self.state.next_seq())

    def _dead_letter(self, sub: Subscription, entry: InFlight, now: int, events: list[TraceEvent]) -> bool:
        """Write the message to %DLQ%group and end it for the group. False when the dead letter
        cannot be written: the message then waits for another attempt rather than vanishing."""
        try:
            copy = self._dead_letter_copy(sub, entry, entry.last_failure)
        except StoreError as exc:
            entry.last_failure = f"{entry.last_failure}; dead letter not written: {exc}"
            return False
        self._end_dead(sub, entry, copy, now, events)
        return True

    def _dead_letter_copy(self, sub: Subscription, entry: InFlight, last_failure: str
                          ) -> tuple[tuple[tuple, str, str], str] | None:
        """The record to write to %DLQ%group for the entry and why it is there; None when the
        message is gone. Raises StoreError when the record cannot be built."""
        original = self._read(entry.phys_offset)
        if original is None:
            return None
        why = f"{entry.attempt} delivery attempt{'' if entry.attempt == 1 else 's'} failed; last: {last_failure}"
        properties = dead_letter_properties(original)
        properties[topics.DLQ_REASON] = topics.dead_letter_reason_property(why)
        built = self._store._builder.build_copy(original, topics.dlq_topic(sub.group), 0, entry.attempt, properties)
        return built, why

    def _end_dead(self, sub: Subscription, entry: InFlight, copy: tuple[tuple[tuple, str, str], str] | None,
                  now: int, events: list[TraceEvent]) -> PutResult | None:
        """Write the dead letter `copy` (if the message still had one), then end the entry for the group."""
        if copy is None:
            sub.remove(entry)
            return None
        built, why = copy
        result = self._store._append_planned([built], now)[0]
        sub.remove(entry)
        if self._tracing(sub):
            events.append(TraceEvent(TraceKind.DEAD_LETTER, entry.unique_key, now, result.topic, result.queue_id,
                                     result.queue_offset, result.offset_msg_id, group=sub.group,
                                     attempt=entry.attempt, reconsume_times=entry.attempt, reason=why))
        return result

    def reset_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Receives of the group go on from `offset` of the queue (the caller holds the store's write lock)."""
        sub = self.state.get(group, topic)
        if sub is not None:
            for entry in sub.reset_queue(queue_id, offset):
                if entry.receipt_handle is not None:
                    self._retire(entry.receipt_handle, "receipt handle no longer valid: an operator reset the "
                                                       "group's offset")
            self.state_file.mark_changed()

    # -- offsets and trace -------------------------------------------------------------------
    def _commit(self, sub: Subscription, queue_ids: set[int]) -> None:
        """Keep the group's consumer offset of each queue at its lowest offset not yet done."""
        for queue_id in queue_ids:
            low = sub.low_water(queue_id)
            if low is not None and sub.committed.get(queue_id) != low:
                self._store.offsets.commit(sub.topic, sub.group, queue_id, low)
                sub.committed[queue_id] = low

    def _tracing(self, sub: Subscription) -> bool:
        return self._store.config.trace and sub.topic != topics.TRACE_TOPIC
