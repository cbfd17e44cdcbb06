"""A RocketMQ 4 push consumer over the embedded store: pull each queue, hand every message to a
listener, and follow the group's rules when the listener fails.

- concurrent, clustering: the failed message is sent back (retry topic after the next delay
  level, the DLQ past the group's maximum) and the queue moves on. The group's retry topic is
  consumed too, and its messages are shown under their original topic.
- orderly, clustering: the queue is held. The failed message is retried in place after the
  suspend interval and nothing behind it is delivered first. After the group's maximum of
  retries (1 + max attempts in all) it goes to the DLQ and the queue moves on.
- broadcast: every consumer instance gets every message, keeps its own offsets, and a failure
  is recorded but never retried.

`poll()` does one pass over the subscribed queues; a caller (or test) drives time and passes."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from store.broker.trace import TraceEvent, TraceKind
from store.errors import MessageNotFoundError
from store.format import topics
from store.format.codec import StoredMessage
from store.message_store import MessageStore

DEFAULT_SUSPEND_MS = 1000  # RocketMQ's suspendCurrentQueueTimeMillis
DEFAULT_BATCH = 32


@dataclass(frozen=True)
class Delivery:
    message: StoredMessage
    topic: str  # the topic the consumer subscribed to (a retry copy shows its original topic)
    attempt: int  # 1-based


Listener = Callable[[Delivery], bool | None]  # False or an exception: consumption failed


class PushConsumer:
    def __init__(self, store: MessageStore, group: str, topic: str, listener: Listener, *,
                 tags: str | None = None, batch: int = DEFAULT_BATCH, suspend_ms: int = DEFAULT_SUSPEND_MS):
        self.store = store
        self.group = group
        self.topic = topic
        self.listener = listener
        self.tags = tags
        self.batch = batch
        self.suspend_ms = suspend_ms
        settings = store.metadata.group(group)
        self.orderly = settings.consume_mode == "orderly"
        self.broadcast = settings.message_model == "broadcast"
        self.max_reconsume_times = settings.max_reconsume_times
        self._suspended_until: dict[tuple[str, int], int] = {}
        self._failures: dict[tuple[str, int, int], int] = {}  # orderly: failures of the held message
        self._local_offsets: dict[tuple[str, int], int] = {}  # broadcast: this instance's own offsets

    def subscriptions(self) -> list[str]:
        if self.broadcast:
            return [self.topic]
        return [self.topic, topics.retry_topic(self.group)]

    def poll(self) -> int:
        """One pass over every subscribed queue; returns how many messages the listener saw."""
        seen = 0
        for topic in self.subscriptions():
            for queue_id in self._queue_ids(topic):
                seen += self._consume_queue(topic, queue_id)
        return seen

    def _queue_ids(self, topic: str) -> list[int]:
        return [queue_id for queue_id, _, _ in self.store.topics().get(topic, [])]

    def _offset(self, topic: str, queue_id: int) -> int:
        if self.broadcast:
            return self._local_offsets.get((topic, queue_id), 0)
        committed = self.store.offsets.get(topic, self.group, queue_id)
        return 0 if committed is None else committed

    def _commit(self, topic: str, queue_id: int, offset: int) -> None:
        if self.broadcast:
            self._local_offsets[(topic, queue_id)] = offset
        else:
            self.store.commit_offset(self.group, topic, queue_id, offset)

    def _consume_queue(self, topic: str, queue_id: int) -> int:
        now = self.store.clock.now_ms()
        if self._suspended_until.get((topic, queue_id), 0) > now:
            return 0
        offset = self._offset(topic, queue_id)
        tags = self.tags if topic == self.topic else None
        pulled = self.store.pull(self.group, topic, queue_id, offset, self.batch, tags, trace=False)
        seen = 0
        for msg in pulled.messages:
            seen += 1
            if not self._deliver(topic, queue_id, msg):
                return seen  # orderly: the queue is held at this message
        if pulled.next_offset != offset:
            self._commit(topic, queue_id, pulled.next_offset)
        return seen

    def _deliver(self, topic: str, queue_id: int, msg: StoredMessage) -> bool:
        """Hand one message to the listener; False when the queue must stop at it."""
        held = (topic, queue_id, msg.queue_offset)
        attempt = self._failures.get(held, msg.reconsume_times) + 1
        shown_topic = msg.properties.get(topics.RETRY_TOPIC, msg.topic) if topics.is_retry_topic(topic) else topic
        now = self.store.clock.now_ms()
        self.store.stats.count_delivered(1)
        self._trace(TraceKind.DELIVERED, msg, attempt, now)
        reason = self._call(Delivery(msg, shown_topic, attempt))
        if reason is None:
            self._failures.pop(held, None)
            self.store.stats.count_acked(1)
            self._trace(TraceKind.ACKED, msg, attempt, self.store.clock.now_ms())
            self._commit(topic, queue_id, msg.queue_offset + 1)
            return True
        if self.broadcast:
            self._trace(TraceKind.FAILED, msg, attempt, now, reason=f"{reason} (broadcast consumers do not retry)")
        elif self.orderly:
            if attempt <= self.max_reconsume_times:
                self._failures[held] = attempt
                self._suspended_until[(topic, queue_id)] = now + self.suspend_ms
                self._trace(TraceKind.FAILED, msg, attempt, now, reason=reason, due_ms=now + self.suspend_ms)
                return False
            self._failures.pop(held, None)
            self._send_back(msg, reason, delay_level=-1, reconsume_times=attempt - 1)
        else:
            self._send_back(msg, reason)
        self._commit(topic, queue_id, msg.queue_offset + 1)
        return True

    def _trace(self, kind: TraceKind, msg: StoredMessage, attempt: int, at_ms: int, **details) -> None:
        self.store.trace([TraceEvent(kind, msg.unique_key or msg.offset_msg_id, at_ms, msg.topic, msg.queue_id,
                                     msg.queue_offset, msg.offset_msg_id, group=self.group, attempt=attempt,
                                     **details)])

    def _send_back(self, msg: StoredMessage, reason: str, **route) -> None:
        with contextlib.suppress(MessageNotFoundError):  # the record expired under us: nothing to retry
            self.store.send_back(msg.phys_offset, self.group, reason=reason, **route)

    def _call(self, delivery: Delivery) -> str | None:
        """None when the listener consumed the message, else why it did not."""
        try:
            outcome = self.listener(delivery)
        except Exception as exc:  # a consumer's own failure, whatever it is, is reported as the reason
            return f"{type(exc).__name__}: {exc}"
        return "the listener returned failure" if outcome is False else None
