"""Consumers' side: pull and committed offsets, pop receive/ack/nack, a consumer's failure sent
back to retry or dead letter, and an operator's resend and offset reset."""

from __future__ import annotations

from store.broker.metadata import consuming_group
from store.broker.pop import Received
from store.broker.pull import SCAN_LIMIT_FACTOR, PullResult, TagFilter, check_consumable, check_pull_size
from store.broker.receipt import ReceiptHandleError
from store.broker.retry import SendBack, route_send_back
from store.broker.trace import TraceEvent, TraceKind
from store.broker.trace_events import send_back_events
from store.engine.results import PutResult
from store.errors import (
    InvalidIdError,
)
from store.format import topics
from store.format.codec import StoredMessage
from store.format.resend_plan import plan_resend


class Consuming:
    def pull(self, group: str, topic: str, queue_id: int, offset: int, max_messages: int = 32,
             tags: str | None = None, *, trace: bool = True) -> PullResult:
        """Up to `max_messages` messages of one queue from `offset` whose tag matches, recorded as
        delivered to `group`. An offset outside the queue starts from its nearest end."""
        check_pull_size(max_messages)
        wanted = TagFilter(tags)
        config = self.metadata.topic(topic)
        check_consumable(topic, config is None or config.readable)
        found: list[StoredMessage] = []
        with self._reading():
            cq = self.queues.get(topic, queue_id)
            if cq is None:
                return PullResult([], 0, 0, 0)
            position = min(max(offset, cq.min_offset), cq.max_offset)
            for unit in cq.units(position, max_messages * SCAN_LIMIT_FACTOR):
                position = unit.queue_offset + 1
                if not wanted.matches_code(unit.tags_code):
                    continue
                msg = self.commitlog.read(unit.phys_offset)
                if wanted.matches(msg):
                    found.append(msg)
                    if len(found) == max_messages:
                        break
            result = PullResult(found, position, cq.min_offset, cq.max_offset)
        if trace:
            self.stats.count_delivered(len(found))
        if found and trace and self.config.trace and not self.read_only:
            with self._writing():
                now = self.clock.now_ms()
                self._trace([TraceEvent(TraceKind.DELIVERED, m.unique_key or m.offset_msg_id, now, m.topic, m.queue_id,
                                        m.queue_offset, m.offset_msg_id, group=group, attempt=m.reconsume_times + 1)
                             for m in found], now)
        return result

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record that `group` consumed `topic`:`queue_id` up to (not including) `offset`."""
        consuming_group(group)
        topics.validate_topic(topic)
        if type(queue_id) is not int or queue_id < 0:
            raise InvalidIdError(f"invalid queue id {queue_id!r}")
        with self._reading():
            cq = self.queues.get(topic, queue_id)
            high = cq.max_offset if cq is not None else 0
            if type(offset) is not int or not 0 <= offset <= high:
                raise InvalidIdError(f"offset {offset!r} is outside queue {topic}:{queue_id} [0, {high}]")
            self.offsets.commit(topic, group, queue_id, offset)

    def receive(self, group: str, topic: str, max_messages: int, invisible_ms: int, tags: str | None = None,
                wait_ms: int = 0, client: str | None = None, *, backoff_after_timeout: bool = True
                ) -> list[Received]:
        """Up to `max_messages` messages of `topic` not yet handed out to `group`, each invisible
        to the group for `invisible_ms`; waits up to `wait_ms` (real time) when there are none.
        With `backoff_after_timeout` False (RocketMQ 5 clients), a message whose invisible time
        runs out is visible again at once rather than after the retry backoff. `client` (a
        RocketMQ 5 client's id), here and in ack, nack and change_invisible, is named by the
        trace events of the call; never written in a message record."""
        received = self.pop.receive(group, topic, max_messages, invisible_ms, tags, wait_ms, client,
                                    backoff_after_timeout=backoff_after_timeout)
        self.stats.count_delivered(len(received))
        return received

    def ack(self, group: str, receipt_handle: str, client: str | None = None) -> None:
        self.pop.ack(group, receipt_handle, client)
        self.stats.count_acked(1)

    def ack_many(self, group: str, receipt_handles: list[str], client: str | None = None
                 ) -> list[ReceiptHandleError | None]:
        outcomes = self.pop.ack_many(group, receipt_handles, client)
        self.stats.count_acked(outcomes.count(None))
        return outcomes

    def nack(self, group: str, receipt_handle: str, reason: str | None = None, client: str | None = None) -> None:
        self.pop.nack(group, receipt_handle, reason, client)

    def change_invisible(self, group: str, receipt_handle: str, invisible_ms: int, client: str | None = None) -> str:
        return self.pop.change_invisible(group, receipt_handle, invisible_ms, client)

    def renew(self, group: str, receipt_handle: str, invisible_ms: int) -> None:
        """Keep a received message invisible for `invisible_ms` from now; its handle stays valid."""
        self.pop.renew(group, receipt_handle, invisible_ms)

    def renew_many(self, group: str, receipt_handles: list[str], invisible_ms: int
                   ) -> list[ReceiptHandleError | None]:
        return self.pop.renew_many(group, receipt_handles, invisible_ms)

    def dead_letter(self, group: str, receipt_handle: str, reason: str | None = None) -> PutResult | None:
        """The consumer gives a received message up: it goes to %DLQ%group now (None: retention
        had deleted it, nothing written) and is done for the group."""
        return self.pop.dead_letter(group, receipt_handle, reason)

    def revive_due(self) -> int:
        """Redeliver or dead-letter the received messages whose invisible time ran out."""
        return self.pop.revive_due()

    def send_back(self, phys_offset: int, group: str, delay_level: int = 0,
                  max_reconsume_times: int | None = None, reason: str | None = None,
                  reconsume_times: int | None = None) -> tuple[PutResult, SendBack]:
        """A consumer of `group` failed the message at `phys_offset`: put its retry copy (via
        SCHEDULE_TOPIC_XXXX) or, past the group's maximum, its dead letter."""
        with self._writing():
            original = self.read(phys_offset)
            route = route_send_back(original, self.metadata.group(group), delay_level, max_reconsume_times,
                                    reconsume_times=reconsume_times)
            now = self.clock.now_ms()
            built = self._builder.build_copy(original, route.topic, route.queue_id, route.reconsume_times,
                                             route.properties)
            result = self._append_planned([built], now)[0]
            self._trace(send_back_events(original, group, route, result, reason, delay_level, self.delay_levels,
                                         now), now)
            return result, route

    def resend_dead_letter(self, phys_offset: int, actor: str | None = None, *, topic: str | None = None,
                           marks: dict[str, str] | None = None, unique_key: str | None = None,
                           body: bytes | None = None, property_changes: dict[str, str | None] | None = None
                           ) -> PutResult:
        """Put a dead letter back as a fresh delivery (reconsume times 0, same body, keys, tags
        and unique key) on `topic`: by default the topic it was consumed from (every group), or
        a retry topic of its group (that group only). `marks` join its properties (what tells
        which action made it); `unique_key` is given to a dead letter that has none. An operator
        may give another `body` and `property_changes` (None removes a property)."""
        with self._writing():
            dead = self.read(phys_offset)
            plan = plan_resend(dead, self.config.cluster, topic=topic, marks=marks, unique_key=unique_key, body=body,
                               property_changes=property_changes)
            form = self.metadata.topic_for_send(plan.target)
            now = self.clock.now_ms()
            queue_id = dead.queue_offset % form.queues
            built = self._builder.build_copy(plan.source, plan.target, queue_id, 0, plan.properties)
            result = self._append_planned([built], now)[0]
            why = f"resent from {dead.topic} to {plan.target}" + (f" by {actor}" if actor else "")
            self._trace([TraceEvent(TraceKind.RESENT, dead.unique_key or unique_key or dead.offset_msg_id, now,
                                    result.topic, result.queue_id, result.queue_offset, result.offset_msg_id,
                                    reason=why)], now)
            return result

    def reset_consumer_offset(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        """An operator moves the group's consumer offsets of the topic's queues: pull consumers
        and receives (pop) both go on from there."""
        with self._writing():
            self._room_for_change()
            for queue_id, offset in offsets.items():
                self.offsets.commit(topic, group, queue_id, offset)
                self.pop.reset_offset(group, topic, queue_id, offset)

    def receive_status(self, group: str | None = None) -> list[dict]:
        """Per group and topic received by pop (of one group, or all): messages handed out now, and
        failed ones waiting for their next attempt, with the soonest."""
        with self._lock:
            rows = []
            for sub in self.pop.state:
                if group is not None and sub.group != group:
                    continue
                waiting = [e.due_ms for e in sub.entries.values() if not e.handed_out and e.attempt > 0]
                in_flight = sum(1 for e in sub.entries.values() if e.handed_out)
                if waiting or in_flight:
                    rows.append({"group": sub.group, "topic": sub.topic, "in_flight": in_flight,
                                 "retries_waiting": len(waiting),
                                 "next_retry_ms": min(waiting) if waiting else None})
            return sorted(rows, key=lambda r: (r["group"], r["topic"]))

    def pops(self, group: str, topic: str) -> bool:
        """The group has received the topic by pop (receive/ack), so its retries take the pop route."""
        with self._lock:
            return self.pop.state.get(group, topic) is not None
