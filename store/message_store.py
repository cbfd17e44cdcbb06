"""The store facade: open read-write or read-only, put messages, and the four lookups."""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal, NamedTuple

import numpy as np

from store.broker.dedupe import DEFAULT_WINDOW_MS, RecentKeyFilter
from store.broker.metadata import GroupConfig, Metadata, TopicConfig, checked_group
from store.broker.offsets import ConsumerOffsets
from store.broker.pop import PopService, Received
from store.broker.pull import SCAN_LIMIT_FACTOR, PullResult, TagFilter, check_consumable, check_pull_size
from store.broker.receipt import ReceiptHandleError
from store.broker.record_builder import NewMessage, RecordBuilder, is_valid_key
from store.broker.resend import plan_resend
from store.broker.retry import SendBack, route_send_back
from store.broker.schedule import MAX_DELIVERIES_PER_PASS, DeliveryPass, ScheduleService
from store.broker.stats import StoreStats
from store.broker.timer import TimerService
from store.broker.trace import TraceEvent, TraceKind, decode_trace, ordered, trace_message
from store.broker.trace_events import duplicate_event, put_events, send_back_events
from store.clock import Clock, SystemClock
from store.errors import (
    FlowControlError,
    InvalidIdError,
    InvalidMessageError,
    MessageNotFoundError,
    ReadOnlyStoreError,
    StoreError,
    StoreLockedError,
    StoreNotFoundError,
)
from store.format import ids, topics
from store.format.codec import StoredMessage
from store.format.delay_levels import DEFAULT_DELAY_LEVELS, DelayLevels
from store.format.hosts import HostAddress
from store.format.recordio import assign_queue_offsets, index_key_hash, put_results
from store.locks import take_soon
from store.log.checkpoint import Checkpoint
from store.log.commitlog import CommitLog, RecoveryResult
from store.log.delay_levels_file import read_delay_levels, write_delay_levels
from store.log.disk_guard import DiskGuard
from store.log.geometry import StoreGeometry
from store.log.group_commit import GroupCommitter
from store.log.paths import LOCK_CONTENT, StorePaths
from store.log.retention import DEFAULT_RESERVED_HOURS, HOUR_MS, Expiry, RetentionPass, expired_until, expiry_of
from store.projections.consume_queue import ConsumeQueues
from store.projections.dispatch import Dispatcher
from store.projections.index import IndexService

MAX_QUERY_RESULTS = 10_000
MAX_DISPATCH_LAG_BYTES = 4 << 20  # beyond this an append projects the backlog itself
TRACE_BATCH_EVENTS = 512


DEFAULT_QUERY_MAX = 32
FAR_FUTURE_MS = 2**63 - 1


@dataclass(frozen=True)
class StoreConfig:
    geometry: StoreGeometry = field(default_factory=StoreGeometry)
    flush: Literal["sync", "async"] = "async"
    flush_interval_ms: int = 500
    store_host: str = "127.0.0.1:10911"
    cluster: str = "DefaultCluster"
    delay_levels: str = DEFAULT_DELAY_LEVELS
    default_queue_count: int = 4
    auto_create_topics: bool = True
    # > 0: a thread delivers delayed and timed messages at their time, re-checking at least this often
    schedule_interval_ms: int = 0
    max_message_bytes: int = 4 * 1024 * 1024
    trace: bool = True  # record lifecycle events in the trace topic
    dedupe_window_ms: int = DEFAULT_WINDOW_MS  # 0: store every send, even one with a known unique key
    disk_max_used_ratio: float = 0.95  # producers' sends are refused above this (RocketMQ: 0.90)
    disk_min_free_bytes: int = 64 * 1024 * 1024
    put_wait_ms: int = 1000  # a send that waits longer than this for the store is refused (busy)
    file_reserved_hours: float = DEFAULT_RESERVED_HOURS
    retention_check_ms: int = 0  # > 0: a thread deletes expired segments this often


class PutResult(NamedTuple):
    topic: str
    queue_id: int
    queue_offset: int
    phys_offset: int
    size: int
    unique_key: str | None
    store_timestamp: int
    store_host: HostAddress

    @property
    def offset_msg_id(self) -> str:
        return ids.create_offset_msg_id(self.store_host, self.phys_offset)


@dataclass
class QueryResult:
    messages: list[StoredMessage]
    truncated: bool


class MessageStore:
    def __init__(self, root: Path, config: StoreConfig, *, read_only: bool, clock: Clock):
        self.paths = StorePaths(root)
        self.config = config
        self.read_only = read_only
        self.clock = clock
        self.geometry = config.geometry
        self.store_host = HostAddress.parse(config.store_host)
        self.delay_levels = DelayLevels(config.delay_levels)
        self.recovery: RecoveryResult | None = None
        self.abnormal_shutdown = False
        self._lock = threading.RLock()
        self._appended = threading.Condition(self._lock)  # notified after every append; long polls wait on it
        self._flush_lock = threading.RLock()  # taken before _lock, never after
        self._lock_fd: int | None = None
        self._closed = False
        self._flusher: threading.Thread | None = None
        self._scheduler_thread: threading.Thread | None = None
        self._retention_thread: threading.Thread | None = None
        self._stop_flusher = threading.Event()
        self._dispatch_thread: threading.Thread | None = None
        self._dispatch_wake = threading.Event()  # set by appends: the dispatcher has records to project
        self.dispatch_error: Exception | None = None  # the dispatcher thread's last failure, if any
        self._committer: GroupCommitter | None = None  # flush="sync" only
        self._schedule_wake = threading.Event()  # set by a put of a message due before the planned wake-up
        self._wake_at_ms = 0
        self._queue_offsets: dict[tuple[bytes, int], int] = {}
        self._pending_trace: list[TraceEvent] = []
        self._recent = RecentKeyFilter(config.dedupe_window_ms) if config.dedupe_window_ms > 0 else None
        self.stats = StoreStats(clock.now_ms())
        self.commitlog: CommitLog
        self.metadata: Metadata
        self.offsets: ConsumerOffsets
        self._builder: RecordBuilder
        self._queues: ConsumeQueues
        self._index: IndexService
        self.dispatcher: Dispatcher
        self.pop: PopService

    @property
    def queues(self) -> ConsumeQueues:
        """The consume queues, with every record appended so far projected into them."""
        self.catch_up()
        return self._queues

    @property
    def index(self) -> IndexService:
        """The index files, with every record appended so far projected into them."""
        self.catch_up()
        return self._index

    def catch_up(self) -> None:
        """Project what the dispatcher thread has not reached yet, here and now (read-your-writes):
        a reader waits at most for the batch the dispatcher is writing, then does the rest."""
        if self.dispatcher.dispatched_to < self.commitlog.end:
            with self._lock:
                if not self._closed:
                    self.dispatcher.dispatch_pending()

    def _dispatch_loop(self) -> None:
        """Project appended records into consume queues and index in whatever batches have
        accumulated since the last pass (RocketMQ's ReputMessageService)."""
        while True:
            self._dispatch_wake.wait()
            if self._stop_flusher.is_set():
                return
            self._dispatch_wake.clear()
            take_soon(self._lock, None)
            try:
                if self._closed:
                    return
                self.dispatcher.dispatch_pending()
                self.dispatch_error = None
            except Exception as exc:  # readers catch up themselves and see it; the next append retries
                self.dispatch_error = exc
            finally:
                self._lock.release()

    # -- opening and closing -----------------------------------------------------------------
    @classmethod
    def open(cls, root: str | os.PathLike, config: StoreConfig | None = None, *, read_only: bool = False,
             clock: Clock | None = None) -> MessageStore:
        store = cls(Path(root), config or StoreConfig(), read_only=read_only, clock=clock or SystemClock())
        try:
            if read_only:
                store._open_read_only()
            else:
                store._open_read_write()
        except BaseException:
            store._release()
            raise
        return store

    def _open_read_only(self) -> None:
        if not self.paths.commitlog.is_dir():
            raise StoreNotFoundError(f"{self.paths.root} is not a store (no commitlog directory)")
        self.abnormal_shutdown = self.paths.abort.exists()
        self.commitlog = CommitLog(self.paths.commitlog, self.geometry.commitlog_file_size, writable=False)
        self.recovery = self.commitlog.recover(count_tail=self.abnormal_shutdown)
        self._queues = ConsumeQueues(self.paths, self.geometry.cq_file_size, writable=False)
        for cq in self._queues:
            cq.drop_before_phys(self.commitlog.min_offset)
        self._index = IndexService(self.paths.index, self.geometry.index_slots, self.geometry.index_entries,
                                   self.clock, writable=False)
        self.delay_levels = read_delay_levels(self.paths.config, self.config.delay_levels)
        self.dispatcher = Dispatcher(self.commitlog, self._queues, self._index, self.delay_levels)
        self.dispatcher.dispatched_to = self.commitlog.end
        self._open_config(writable=False)

    def _open_config(self, *, writable: bool) -> None:
        """Topic and group metadata and consumer offsets, from config/ (absent in a bare store)."""
        self.metadata = Metadata(self.paths.config, auto_create_topics=self.config.auto_create_topics,
                                 default_queues=self.config.default_queue_count,
                                 schedule_queues=self.delay_levels.max_level, writable=writable)
        self.metadata.adopt({topic: max(cq.queue_id for cq in queues) + 1
                             for topic, queues in self._queues.topics().items()})
        self.offsets = ConsumerOffsets(self.paths.config)
        self.scheduler = ScheduleService(self.paths.config, self._queues, self.delay_levels)
        self.timer = TimerService(self.paths.config, self._queues)
        self.pop = PopService(self)

    def _open_read_write(self) -> None:
        root = self.paths.root
        if root.exists() and not root.is_dir():
            raise StoreNotFoundError(f"{root} is not a directory")
        root.mkdir(parents=True, exist_ok=True)
        self._take_lock()
        self.abnormal_shutdown = self.paths.abort.exists()
        self.paths.abort.touch()
        self._disk_guard = DiskGuard(root, self.config.disk_max_used_ratio, self.config.disk_min_free_bytes)
        self.commitlog = CommitLog(self.paths.commitlog, self.geometry.commitlog_file_size, writable=True)
        self.recovery = self.commitlog.recover(count_tail=self.abnormal_shutdown)
        if self.recovery.truncated_bytes:
            self.commitlog.truncate_after(self.recovery.end)
        end = self.commitlog.end
        self._queues = ConsumeQueues(self.paths, self.geometry.cq_file_size, writable=True)
        for cq in self._queues:
            cq.truncate_after_phys(end)
            cq.drop_before_phys(self.commitlog.min_offset)
        self._index = IndexService(self.paths.index, self.geometry.index_slots, self.geometry.index_entries,
                                   self.clock, writable=True)
        index_rebuild_from = self._index.truncate_after_phys(end)
        if self.abnormal_shutdown:
            self._index.repair_after_crash()
        self.delay_levels = read_delay_levels(self.paths.config, self.config.delay_levels)
        self.dispatcher = Dispatcher(self.commitlog, self._queues, self._index, self.delay_levels)
        self.dispatcher.dispatched_to = self._replay_start(index_rebuild_from)
        self.dispatcher.dispatch_pending()
        self._open_config(writable=True)
        self._builder = RecordBuilder(
            self.store_host, self.config.cluster, self.delay_levels, self.metadata.topic_for_send,
            self.config.max_message_bytes, self.commitlog.max_record_size(),
            ids.UniqueKeyFactory(self.store_host, self.clock))
        self._builder.timer_floor_ms = self.timer.floor_ms
        self._fit_schedule_topic()
        if self._recent is not None:
            now = self.clock.now_ms()
            self._recent.add_many(self._index.key_hashes_since(now - self._recent.window_ms), now)
        self._dispatch_thread = threading.Thread(target=self._dispatch_loop, name="mqlens-dispatch", daemon=True)
        self._dispatch_thread.start()
        if self.config.flush == "async":
            self._flusher = self._start_periodic("mqlens-flush", self.config.flush_interval_ms, self.flush)
        else:
            self._committer = GroupCommitter(self.commitlog, self._lock, self._flush_lock)
            self._committer.start()
        if self.config.retention_check_ms > 0:
            self._retention_thread = self._start_periodic("mqlens-retention", self.config.retention_check_ms,
                                                          self.delete_expired)
        if self.config.schedule_interval_ms > 0:
            self.dispatcher.on_due = self._note_due
            self._scheduler_thread = threading.Thread(target=self._schedule_loop, name="mqlens-schedule",
                                                      daemon=True)
            self._scheduler_thread.start()

    def _replay_start(self, index_rebuild_from: int | None) -> int:
        """Where dispatch must resume: the earliest point some projection may be missing."""
        cq_progress = self.commitlog.min_offset
        for cq in self._queues:
            last = cq.last_unit()
            if last is not None and last.size != 0x7FFFFFFF:
                cq_progress = max(cq_progress, last.phys_offset + last.size)
        starts = [cq_progress]
        if self._index.files:
            starts.append(self._index.end_phys)
        else:
            starts.append(self.commitlog.min_offset)
        if index_rebuild_from is not None:
            starts.append(index_rebuild_from)
        return max(self.commitlog.min_offset, min(starts))

    def _take_lock(self) -> None:
        fd = os.open(self.paths.lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise StoreLockedError(f"store {self.paths.root} is in use by another process") from None
        os.pwrite(fd, LOCK_CONTENT, 0)
        self._lock_fd = fd

    def _release(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def _start_periodic(self, name: str, interval_ms: int, action) -> threading.Thread:
        """A daemon thread calling `action` every `interval_ms` until close. A failed call is tried
        again at the next tick; once the store is closed the thread ends (close flushes itself)."""
        def loop() -> None:
            while not self._stop_flusher.wait(interval_ms / 1000):
                try:
                    action()
                except Exception:
                    if self._closed:
                        return

        thread = threading.Thread(target=loop, name=name, daemon=True)
        thread.start()
        return thread

    def _schedule_loop(self) -> None:
        """Deliver each delayed or timed message at its time: sleep until the earliest one due,
        woken early by a put of one due sooner, and at least every schedule_interval_ms (a clock
        that jumped, received messages whose invisible time ran out)."""
        interval_ms = self.config.schedule_interval_ms
        revived_at = self.clock.now_ms()
        while not self._stop_flusher.is_set():
            wait_ms = interval_ms
            try:
                passed = self.deliver_due()
                if self.clock.now_ms() - revived_at >= interval_ms:
                    self.revive_due()
                    revived_at = self.clock.now_ms()
                wait_ms = 0 if passed.full else self._plan_wake(interval_ms)
            except StoreError:
                if self._closed:
                    return
            if wait_ms > 0 and not self._stop_flusher.is_set():  # close() sets both, in that order
                self._schedule_wake.wait(wait_ms / 1000)

    def _plan_wake(self, longest_ms: int) -> int:
        """Milliseconds until the earliest message waiting is due, at most `longest_ms`."""
        with self._lock:
            now = self.clock.now_ms()
            self._schedule_wake.clear()
            due = [t for t in (self.scheduler.next_due_ms(now), self.timer.next_due_ms()) if t is not None]
            self._wake_at_ms = min([now + longest_ms, *due])
            return max(0, self._wake_at_ms - now)

    def _note_due(self, deliver_ms: int) -> None:
        """Dispatch wrote messages that wait until `deliver_ms` (store lock held)."""
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

    def set_delay_levels(self, spec: str) -> None:
        """Use delay level table `spec` ('1s 5s 10s ...') for messages written from now on, also
        after a restart (config/delayLevels.json). Messages already scheduled keep their deliver
        time. Raises InvalidConfigError for a bad table."""
        with self._writing():
            self.commitlog.flush()  # the new table applies after these bytes: they must outlive a crash
            tables = self.delay_levels.changed_to(spec, self.commitlog.end)
            write_delay_levels(self.paths.config, tables)
            self.delay_levels.use_tables(tables)
            self.scheduler.table_changed(self.clock.now_ms())
            self._fit_schedule_topic()

    def delay_level_table(self) -> str:
        """The delay level table in use, as text."""
        return self.delay_levels.spec

    def _fit_schedule_topic(self) -> None:
        """SCHEDULE_TOPIC_XXXX has a queue for each level of the table in use."""
        levels = self.delay_levels.max_level
        self.metadata.schedule_queues = max(self.metadata.schedule_queues, levels)
        current = self.metadata.topic(topics.SCHEDULE_TOPIC)
        if current is not None and current.queues < levels:
            self.metadata.put_topic(replace(current, queues=levels))
            self._builder.forget_topic(topics.SCHEDULE_TOPIC)

    def flush(self) -> None:
        """Make everything written so far durable and record it in the checkpoint."""
        if self.read_only:
            return
        with self._flush_lock:
            with self._lock:  # only to collect what to sync: writers go on during the syncs
                if self._closed:
                    return
                self._write_trace(self.clock.now_ms())
                reach = self.commitlog.end
                files = self.commitlog.dirty_files() + self.queues.dirty_files() + self.index.dirty_files()
                ts = self.dispatcher.last_store_timestamp
                # before the syncs: the states name only messages the syncs make durable
                states = [(state_file, state_file.snapshot())
                          for state_file in (self.scheduler, self.timer, self.pop.state_file)]
            for f in files:
                f.sync()
            if self._committer is not None:
                self._committer.covered(reach)
            Checkpoint(ts, ts, ts).write(self.paths.checkpoint)
            self.offsets.persist()
            for state_file, state in states:
                state_file.write_snapshot(state)

    def close(self) -> None:
        if self._closed:
            return
        self._stop_flusher.set()
        self._schedule_wake.set()
        self._dispatch_wake.set()
        if self._committer is not None:
            self._committer.stop()
        for thread in (self._flusher, self._scheduler_thread, self._retention_thread, self._dispatch_thread):
            if thread is not None:
                thread.join()
        with self._flush_lock, self._lock:
            if not self.read_only:
                self.flush()
            self._closed = True
            self.commitlog.close()
            self._queues.close()
            self._index.close()
            if not self.read_only:
                self.paths.abort.unlink(missing_ok=True)
        self._release()

    def __enter__(self) -> MessageStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- writing -----------------------------------------------------------------------------
    @contextmanager
    def _writing(self, wait_ms: int | None = None, *, caught_up: bool = True) -> Iterator[None]:
        """The store lock, for a change to a store that is open for writing, with the projections
        caught up unless the change only appends. With `wait_ms`, a store busier than that
        refuses the change (flow control) instead of queueing it."""
        self._lock_for_change(wait_ms)
        try:
            if caught_up:
                self.dispatcher.dispatch_pending()
            yield
        finally:
            self._lock.release()
        self._make_durable()

    def _make_durable(self) -> None:
        """Sync flush: return once the change is on disk (store.log.group_commit)."""
        if self._committer is not None:
            self._committer.wait_durable()

    @property
    def commit_syncs(self) -> int:
        """Syncs of the commit log made for sync-flush changes (0 with async flush)."""
        return self._committer.syncs if self._committer is not None else 0

    def _lock_for_change(self, wait_ms: int | None) -> None:
        """Take the store lock for a change (the caller releases it), or raise why not."""
        if self.read_only:
            raise ReadOnlyStoreError("the store is open read-only")
        if not take_soon(self._lock, wait_ms):
            raise FlowControlError(f"the store is busy (waited {wait_ms} ms for it): retry shortly")
        if self._closed:
            self._lock.release()
            raise StoreError("the store is closed")

    def put(self, message: NewMessage) -> PutResult:
        """One message, as put_many([message]) would store it, by the single-send path."""
        key = self._dedupe_key(message)
        self._lock_for_change(self.config.put_wait_ms)
        try:
            self._disk_guard.check()
            now = self.clock.now_ms()
            if key is not None:
                earlier = self._stored_recently(message, key, now)
                if earlier is not None:
                    self._trace([duplicate_event(key, earlier, now)], now)
                    self.stats.count_put(1)
                    return earlier  # its copy was made durable when it was stored
            result = self._append_one(self._builder.build_one(message, now), now)
            if key is not None:
                self._recent.add(index_key_hash(result.topic, key), now)
            if self.config.trace:
                self._trace(self._put_events([message], [result], now), now)
            self.stats.count_put(1)
        finally:
            self._lock.release()
        self._make_durable()
        return result

    def put_many(self, messages: Iterable[NewMessage]) -> list[PutResult]:
        """Append messages in order; with sync flush they are on disk when this returns.

        Every message is checked and sized before any is written, so a bad one rejects the
        whole batch. A message whose client-given unique key was stored within the dedupe
        window is not stored again: its result is the first copy's."""
        batch = list(messages)
        with self._writing(self.config.put_wait_ms, caught_up=False):
            self._disk_guard.check()
            now = self.clock.now_ms()
            if self._recent is not None and any(self._dedupe_key(m) is not None for m in batch):
                results = self._put_deduplicated(batch, now)
            else:
                results = self._append_planned(self._builder.build_many(batch, now), now)
                self._trace(self._put_events(batch, results, now), now)
            self.stats.count_put(len(results))
            return results

    def _put_deduplicated(self, batch: list[NewMessage], now: int) -> list[PutResult]:
        results: list[PutResult | None] = [None] * len(batch)
        fresh: list[int] = []
        first_in_batch: dict[str, int] = {}
        repeats: list[tuple[int, int]] = []
        for i, m in enumerate(batch):
            key = self._dedupe_key(m)
            if key is not None:
                if key in first_in_batch:
                    repeats.append((i, first_in_batch[key]))
                    continue
                earlier = self._stored_recently(m, key, now)
                if earlier is not None:
                    results[i] = earlier
                    continue
                first_in_batch[key] = i
            fresh.append(i)
        written = [batch[i] for i in fresh]
        stored = self._append_planned(self._builder.build_many(written, now), now) if written else []
        remembered = []
        for i, result in zip(fresh, stored, strict=True):
            results[i] = result
            if result.unique_key in first_in_batch:
                remembered.append(index_key_hash(result.topic, result.unique_key))
        if remembered:
            self._recent.add_many(np.array(remembered, dtype=np.int64), now)
        for i, first in repeats:
            results[i] = results[first]
        events = self._put_events(written, stored, now)
        written_at = set(fresh)
        events += [duplicate_event(r.unique_key, r, now) for i, r in enumerate(results) if i not in written_at]
        self._trace(events, now)
        return results

    def _dedupe_key(self, m: NewMessage) -> str | None:
        """The client-given unique key that makes `m` subject to duplicate suppression, if any."""
        if self._recent is None:
            return None
        key = m.unique_key or (m.properties.get(topics.UNIQ_KEY) if m.properties else None)
        return key if key and type(key) is str else None

    def _stored_recently(self, m: NewMessage, key: str, now: int) -> PutResult | None:
        """The copy with unique key `key` stored within the window, if any: the filter rules
        out nearly every new key, the index settles the rest."""
        if m.delay_level and m.delay_level > 0:
            places = [topics.SCHEDULE_TOPIC]
        else:
            places = [m.topic, topics.TIMER_TOPIC] if topics.TIMER_DELIVER_MS in m.properties else [m.topic]
        places = [topic for topic in places if self._recent.might_hold(index_key_hash(topic, key))]
        if not places:
            return None
        window = self._recent.window_ms
        try:
            found = [msg for topic in places
                     for msg in self.query_by_unique_key(topic, key, begin=now - window, max_results=1).messages]
        except StoreError:
            return None
        if not found:
            return None
        msg = found[0]
        return PutResult(msg.topic, msg.queue_id, msg.queue_offset, msg.phys_offset, msg.size, key,
                         msg.store_timestamp, self.store_host)

    def _put_events(self, batch: list[NewMessage], results: list[PutResult], now: int) -> list[TraceEvent]:
        return put_events(batch, results, self.delay_levels, now) if self.config.trace else []

    def trace(self, events: list[TraceEvent]) -> None:
        """Record lifecycle events (consumers' deliveries, acks, failures) in the trace topic."""
        with self._writing():
            self._trace(events, self.clock.now_ms())

    def _trace(self, events: list[TraceEvent], now: int) -> None:
        """Queue lifecycle events; they are written in batches (at once with sync flush), and
        always before a flush, a timeline lookup or close."""
        if self.config.trace and events:
            self._pending_trace.extend(events)
            if self.config.flush == "sync" or len(self._pending_trace) >= TRACE_BATCH_EVENTS:
                self._write_trace(now)

    def _write_trace(self, now: int) -> None:
        events, self._pending_trace = self._pending_trace, []
        if events:
            self._append_planned(self._builder.build_many([trace_message(e) for e in events], now), now)

    def _append_planned(self, planned: list[tuple[tuple, str, str]], now: int) -> list[PutResult]:
        """Append built records and sync per the flush policy (store lock held). The dispatcher
        thread projects them, or this call when it has fallen too far behind."""
        items = [item for item, _, _ in planned]
        queue_offsets, advanced = self._assign_queue_offsets(planned)
        phys = self.commitlog.append_records(items, queue_offsets, now, self.store_host)
        self._queue_offsets.update(advanced)
        self._appended_to_log()
        return put_results(PutResult, planned, queue_offsets, phys, now, self.store_host)

    def _append_one(self, planned: tuple[tuple, str, str], now: int) -> PutResult:
        """_append_planned of a single record."""
        item, topic, unique_key = planned
        queue = (item[1], item[2])
        queue_offset = self._queue_offsets.get(queue)
        if queue_offset is None:
            queue_offset = self._queue_end(*queue)
        phys = self.commitlog.append_one(item, queue_offset, now, self.store_host)
        self._queue_offsets[queue] = queue_offset + 1
        self._appended_to_log()
        return PutResult(topic, item[2], queue_offset, phys, item[0], unique_key, now, self.store_host)

    def _appended_to_log(self) -> None:
        """After an append: have it projected, synced per the flush policy, and long polls woken."""
        if self.commitlog.end - self.dispatcher.dispatched_to > MAX_DISPATCH_LAG_BYTES:
            self.dispatcher.dispatch_pending()
        elif not self._dispatch_wake.is_set():
            self._dispatch_wake.set()
        self._appended.notify_all()

    # -- pop-style receive (store/pop.py) ----------------------------------------------------
    def receive(self, group: str, topic: str, max_messages: int, invisible_ms: int, tags: str | None = None,
                wait_ms: int = 0) -> list[Received]:
        """Up to `max_messages` messages of `topic` not yet handed out to `group`, each invisible
        to the group for `invisible_ms`; waits up to `wait_ms` (real time) when there are none."""
        received = self.pop.receive(group, topic, max_messages, invisible_ms, tags, wait_ms)
        self.stats.count_delivered(len(received))
        return received

    def ack(self, group: str, receipt_handle: str) -> None:
        self.pop.ack(group, receipt_handle)
        self.stats.count_acked(1)

    def ack_many(self, group: str, receipt_handles: list[str]) -> list[ReceiptHandleError | None]:
        outcomes = self.pop.ack_many(group, receipt_handles)
        self.stats.count_acked(outcomes.count(None))
        return outcomes

    def nack(self, group: str, receipt_handle: str, reason: str | None = None) -> None:
        self.pop.nack(group, receipt_handle, reason)

    def change_invisible(self, group: str, receipt_handle: str, invisible_ms: int) -> str:
        return self.pop.change_invisible(group, receipt_handle, invisible_ms)

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

    def new_unique_key(self) -> str:
        """A fresh unique key in RocketMQ's client form, as a producer would make."""
        return self._builder.unique_keys.create()

    def pops(self, group: str, topic: str) -> bool:
        """The group has received the topic by pop (receive/ack), so its retries take the pop route."""
        with self._lock:
            return self.pop.state.get(group, topic) is not None

    def _assign_queue_offsets(self, planned: list[tuple[tuple, str, str]]) -> tuple[np.ndarray, dict]:
        """Queue offsets from RocketMQ's topic-queue table (the next offset of each queue, ahead
        of dispatch), and the table's new entries, to keep once the records are written."""
        offsets = np.empty(len(planned), dtype=np.int64)
        advanced = assign_queue_offsets(planned, self._queue_offsets, self._queue_end, offsets)
        return offsets, advanced

    def _queue_end(self, topic: bytes, queue_id: int) -> int:
        cq = self._queues.get(topic.decode("utf-8"), queue_id)
        return cq.max_offset if cq is not None else 0

    # -- reading -----------------------------------------------------------------------------
    def read(self, phys_offset: int) -> StoredMessage:
        with self._lock:
            try:
                return self.commitlog.read(phys_offset)
            except StoreError as exc:
                raise MessageNotFoundError(f"no message at commit log offset {phys_offset}: {exc}") from None

    def get_by_offset_id(self, offset_msg_id: str) -> StoredMessage:
        _, phys = ids.decode_offset_msg_id(offset_msg_id)
        return self.read(phys)

    def get_by_queue_offset(self, topic: str, queue_id: int, queue_offset: int) -> StoredMessage:
        with self._lock:
            cq = self.queues.get(topic, queue_id)
            if cq is None:
                raise MessageNotFoundError(f"topic {topic!r} has no queue {queue_id}")
            if not cq.min_offset <= queue_offset < cq.max_offset:
                raise MessageNotFoundError(
                    f"offset {queue_offset} is outside queue {topic}:{queue_id} [{cq.min_offset}, {cq.max_offset})"
                )
            unit = cq.get(queue_offset)
            return self.read(unit.phys_offset)

    def dispatch_lag_bytes(self) -> int:
        """Commit log bytes written but not yet projected into consume queues and index."""
        with self._lock:
            return max(0, self.commitlog.end - self.dispatcher.dispatched_to)

    def queue_offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset stored at or after `timestamp_ms` (the max offset if none)."""
        with self._lock:
            cq = self.queues.get(topic, queue_id)
            if cq is None:
                raise MessageNotFoundError(f"topic {topic!r} has no queue {queue_id}")
            return cq.offset_by_time(timestamp_ms, lambda phys: self.commitlog.read(phys).store_timestamp)

    def _query(self, topic: str, key: str, begin: int, end: int, max_results: int, matches) -> QueryResult:
        if not 0 < max_results <= MAX_QUERY_RESULTS:
            raise InvalidIdError(f"max must be between 1 and {MAX_QUERY_RESULTS}")
        if begin > end:
            raise InvalidIdError("the time window begins after it ends")
        found: list[StoredMessage] = []
        truncated = False
        with self._lock:
            # Index times are whole seconds after the file's begin: widen by one second, then
            # filter on each record's real store time.
            for phys in self.index.query(topic, key, max(0, begin - 1000), end):
                try:
                    msg = self.commitlog.read(phys)
                except StoreError:
                    continue
                if msg.topic != topic or not matches(msg) or not begin <= msg.store_timestamp <= end:
                    continue
                if len(found) == max_results:
                    truncated = True
                    break
                found.append(msg)
        return QueryResult(found, truncated)

    def query_by_key(self, topic: str, key: str, begin: int = 0, end: int = FAR_FUTURE_MS,
                     max_results: int = DEFAULT_QUERY_MAX) -> QueryResult:
        """Messages of `topic` whose KEYS hold `key`, newest first (the index walk order)."""
        return self._query(topic, key, begin, end, max_results, lambda m: key in m.keys)

    def query_by_unique_key(self, topic: str, unique_key: str, begin: int = 0, end: int = FAR_FUTURE_MS,
                            max_results: int = DEFAULT_QUERY_MAX) -> QueryResult:
        """Messages of `topic` whose UNIQ_KEY equals `unique_key`, newest first."""
        return self._query(topic, unique_key, begin, end, max_results, lambda m: m.unique_key == unique_key)

    def pull(self, group: str, topic: str, queue_id: int, offset: int, max_messages: int = 32,
             tags: str | None = None, *, trace: bool = True) -> PullResult:
        """Up to `max_messages` messages of one queue from `offset` whose tag matches, recorded as
        delivered to `group`. An offset outside the queue starts from its nearest end."""
        check_pull_size(max_messages)
        wanted = TagFilter(tags)
        config = self.metadata.topic(topic)
        check_consumable(topic, config is None or config.readable)
        found: list[StoredMessage] = []
        with self._lock:
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
        checked_group(GroupConfig(group))
        topics.validate_topic(topic)
        if type(queue_id) is not int or queue_id < 0:
            raise InvalidIdError(f"invalid queue id {queue_id!r}")
        with self._lock:
            cq = self.queues.get(topic, queue_id)
            high = cq.max_offset if cq is not None else 0
            if type(offset) is not int or not 0 <= offset <= high:
                raise InvalidIdError(f"offset {offset!r} is outside queue {topic}:{queue_id} [0, {high}]")
            self.offsets.commit(topic, group, queue_id, offset)

    def timeline(self, id_or_key: str, max_events: int = MAX_QUERY_RESULTS) -> list[TraceEvent]:
        """The ordered lifecycle events of a message, given its unique key or the offset id of
        any of its copies (original, scheduled, retry, dead letter)."""
        if self._pending_trace and not self.read_only:
            with self._writing():
                self._write_trace(self.clock.now_ms())
        events = self._trace_events(id_or_key, max_events)
        keys = {e.unique_key for e in events}
        if len(keys) == 1 and id_or_key not in keys and is_valid_key(unique_key := keys.pop()):
            events = self._trace_events(unique_key, max_events)
        return events

    def _trace_events(self, key: str, max_events: int) -> list[TraceEvent]:
        """Trace records are keyed by unique key and by the offset id of the copy they concern."""
        records = self.query_by_key(topics.TRACE_TOPIC, key, max_results=max_events).messages
        return ordered([(m.phys_offset, event) for m in records if (event := decode_trace(m)) is not None])

    def put_topic(self, config: TopicConfig) -> TopicConfig:
        """Create a topic or change its queue count or permission."""
        with self._writing():
            self.metadata.put_topic(config)
            self._builder.forget_topic(config.name)
        return config

    def topics(self) -> dict[str, list[tuple[int, int, int]]]:
        """topic -> [(queue_id, min_offset, max_offset)]"""
        with self._lock:
            return {
                topic: [(cq.queue_id, cq.min_offset, cq.max_offset) for cq in queues]
                for topic, queues in self.queues.topics().items()
            }

    def check(self):
        from store.projections.check import check_store

        with self._lock:
            return check_store(self)
