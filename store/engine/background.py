"""The store's own threads and their passes: dispatch of appended records, delivery of delayed
and timed messages when due, and retention."""

from __future__ import annotations

from store.broker.schedule import MAX_DELIVERIES_PER_PASS, DeliveryPass
from store.broker.trace import TraceEvent, TraceKind
from store.engine.results import FAR_FUTURE_MS
from store.errors import (
    DiskFullError,
    InvalidMessageError,
    StoreError,
)
from store.format import topics
from store.format.codec import StoredMessage
from store.locks import take_soon
from store.log.retention import HOUR_MS, Expiry, RetentionPass, expired_until, expiry_of

DISPATCH_GATHER_S = 0.001  # the dispatcher lets appends gather this long before a pass (RocketMQ's reput: 1 ms)


class BackgroundWork:
    def catch_up(self) -> None:
        """Project what the dispatcher thread has not reached yet, here and now (read-your-writes):
        a reader waits at most for the batch the dispatcher is writing, then does the rest."""
        if self.dispatcher.dispatched_to < self.commitlog.end:
            with self._dispatch_lock:
                if not self._closed:
                    try:
                        self.dispatcher.dispatch_pending()
                    except DiskFullError as exc:  # reads go on over what is projected; space freed, a pass
                        self.dispatch_error = exc  # projects the rest (the records are safe in the log)
                        self._disk_guard.recheck()

    def _dispatch_loop(self) -> None:
        """Project appended records into consume queues and index in whatever batches have
        accumulated since the last pass (RocketMQ's ReputMessageService)."""
        while True:
            self._dispatch_wake.wait()
            self._stop_flusher.wait(DISPATCH_GATHER_S)  # a pass costs about the same for 1 record or 100
            self._dispatch_wake.clear()
            if self._stop_flusher.is_set():  # close() sets it before the wake: never missed after the clear
                return
            take_soon(self._dispatch_lock, None)
            try:
                if self._closed:
                    return
                self.dispatcher.dispatch_pending()
                self.dispatch_error = None
            except Exception as exc:  # readers catch up themselves and see it; the next append retries
                self.dispatch_error = exc
                if isinstance(exc, DiskFullError):
                    self._disk_guard.recheck()
            finally:
                self._dispatch_lock.release()

    def _schedule_loop(self) -> None:
        """Deliver each delayed or timed message at its time, and process each received message
        whose invisible time runs out at that time: sleep until the earliest one due, woken early
        by a put of one due sooner, and at least every schedule_interval_ms (a clock that jumped,
        an invisible time set since the sleep began)."""
        interval_ms = self.config.schedule_interval_ms
        revived_at = self.clock.now_ms()
        while not self._stop_flusher.is_set():
            wait_ms = interval_ms
            try:
                passed = self.deliver_due()
                now = self.clock.now_ms()
                if now - revived_at >= interval_ms or now >= self._expiry_at_ms:
                    self.revive_due()
                    revived_at = self.clock.now_ms()
                wait_ms = 0 if passed.full else self._plan_wake(interval_ms)
            except StoreError:
                if self._closed:
                    return
            if wait_ms > 0 and not self._stop_flusher.is_set():  # close() sets both, in that order
                self._schedule_wake.wait(wait_ms / 1000)

    def _plan_wake(self, longest_ms: int) -> int:
        """Milliseconds until the earliest message waiting is due or invisible time runs out, at
        most `longest_ms`."""
        with self._reading():
            now = self.clock.now_ms()
            self._schedule_wake.clear()
            expiry = self.pop.next_expiry_ms()
            self._expiry_at_ms = FAR_FUTURE_MS if expiry is None else expiry
            due = [t for t in (self.scheduler.next_due_ms(now), self.timer.next_due_ms(), expiry) if t is not None]
            self._wake_at_ms = min([now + longest_ms, *due])
            return max(0, self._wake_at_ms - now)

    def _note_due(self, deliver_ms: int) -> None:
        """Something is due at `deliver_ms`: dispatch wrote messages that wait until then
        (projections' lock held), or a received message's invisible time runs out then (store
        lock held). Wakes the scheduler thread when that comes before its planned wake-up."""
        if deliver_ms < self._wake_at_ms:
            self._schedule_wake.set()

    @property
    def _reserved_ms(self) -> int:
        return int(self.config.file_reserved_hours * HOUR_MS)

    def delete_expired(self) -> RetentionPass:
        """Delete commit log segments older than the reserved time (never the live one) and the
        consume queue and index files that only point into them."""
        with self._writing():
            until = expired_until(self.commitlog.segments(), self.geometry.commitlog_file_size,
                                  self.clock.now_ms(), self._reserved_ms)
            if until is None:
                return RetentionPass([], self.commitlog.min_offset)
            deleted = self.commitlog.delete_segments_before(until)
            low = self.commitlog.min_offset
            for cq in self.queues:
                cq.drop_before_phys(low)
            self.index.drop_before_phys(low)
            self.dispatcher.dispatched_to = max(self.dispatcher.dispatched_to, low)
            self._disk_guard.recheck()
            return RetentionPass(deleted, low)

    def expires_at(self, phys_offset: int) -> Expiry | None:
        """When the record at `phys_offset` will be deleted by retention (None: already gone)."""
        with self._lock:
            return expiry_of(self.commitlog.segments(), self.geometry.commitlog_file_size, phys_offset,
                             self.clock.now_ms(), self._reserved_ms)

    def deliver_due(self) -> DeliveryPass:
        """Put delayed and timed messages whose time has come to their real topic and queue, at
        most MAX_DELIVERIES_PER_PASS (the pass is `full` when more may be due)."""
        with self._writing():
            now = self.clock.now_ms()
            delayed, skipped = self.scheduler.due(now, self.commitlog.read)
            timed, unreadable = self.timer.due(now, self.commitlog.read, MAX_DELIVERIES_PER_PASS - len(delayed))
            skipped += unreadable
            planned, sources = [], []
            for item in delayed + timed:
                if item.message is None:
                    continue
                try:
                    planned.append(self._release_copy(item.message))
                    sources.append(item)
                except (StoreError, ValueError, TypeError) as exc:
                    skipped.append((item.message.phys_offset, f"undeliverable: {exc}"))
            try:
                delivered = self._append_planned(planned, now) if planned else []
            except BaseException:
                self.timer.requeue(timed)
                raise
            self.scheduler.delivered(delayed)
            self.timer.delivered(timed)
            self._builder.timer_floor_ms = self.timer.floor_ms
            self._trace([TraceEvent(TraceKind.RELEASED, r.unique_key or src.message.offset_msg_id, now, r.topic,
                                    r.queue_id, r.queue_offset, r.offset_msg_id,
                                    reconsume_times=src.message.reconsume_times, due_ms=src.deliver_ms)
                         for src, r in zip(sources, delivered, strict=True)], now)
        return DeliveryPass(delivered, skipped, full=len(delayed) + len(timed) >= MAX_DELIVERIES_PER_PASS)

    def _release_copy(self, msg: StoredMessage) -> tuple[tuple, str, str]:
        """The record that puts a scheduled or timed message to its real topic and queue."""
        real_topic = msg.properties.get(topics.REAL_TOPIC)
        if real_topic in (topics.SCHEDULE_TOPIC, topics.TIMER_TOPIC):
            raise InvalidMessageError(f"its real topic {real_topic} is a scheduling topic")
        return self._builder.build_copy(msg, real_topic, int(msg.properties.get(topics.REAL_QID, "")),
                                        msg.reconsume_times)
