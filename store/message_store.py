"""The store facade: one object that opens a store and serves its callers, composed of the parts
in store.engine (opening and closing, background work, lookups, consumers' side) and the write
path below."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import numpy as np

from store.broker import trace_log
from store.broker.dedupe import RecentKeyFilter
from store.broker.delay_inference import DEFAULT_TABLE_TEXT, FILE_TABLE_TEXT, DelayTableSource
from store.broker.metadata import Metadata, TopicConfig
from store.broker.offsets import ConsumerOffsets
from store.broker.pop import PopService
from store.broker.record_builder import NewMessage, RecordBuilder
from store.broker.stats import StoreStats
from store.broker.trace import TraceEvent
from store.broker.trace_events import duplicate_event, put_events
from store.clock import Clock
from store.engine.background import BackgroundWork
from store.engine.config import StoreConfig
from store.engine.consuming import Consuming
from store.engine.lifecycle import ProjectedInMemory, StoreLifecycle
from store.engine.lookups import Lookups
from store.engine.results import DEFAULT_QUERY_MAX, FAR_FUTURE_MS, MAX_QUERY_RESULTS, PutResult, QueryResult
from store.engine.transactions import Transactions
from store.errors import (
    FlowControlError,
    ReadOnlyStoreError,
    StoreError,
)
from store.format import topics
from store.format.delay_levels import DEFAULT_DELAY_LEVELS, DelayLevels
from store.format.hosts import HostAddress
from store.format.recordio import assign_queue_offsets, index_key_hash, put_results
from store.locks import take_soon
from store.log.commitlog import CommitLog, RecoveryResult
from store.log.delay_levels_file import read_delay_levels, write_delay_levels
from store.log.group_commit import GroupCommitter
from store.log.paths import StorePaths
from store.projections.consume_queue import ConsumeQueues
from store.projections.dead_letters import DeadLetterIndex
from store.projections.dispatch import Dispatcher
from store.projections.index import IndexService

__all__ = ["DEFAULT_QUERY_MAX", "FAR_FUTURE_MS", "MAX_QUERY_RESULTS", "MessageStore", "NewMessage", "PutResult",
           "QueryResult", "StoreConfig"]

YIELD_DISPATCH_LAG_BYTES = 4 << 20  # beyond this an append gives the dispatcher thread a turn
MAX_DISPATCH_LAG_BYTES = 32 << 20  # beyond this an append projects the backlog itself, the dispatcher idle


class MessageStore(StoreLifecycle, BackgroundWork, Lookups, Consuming, Transactions):
    def __init__(self, root: Path, config: StoreConfig, *, read_only: bool, clock: Clock):
        self.paths = StorePaths(root)
        self.config = config
        self.read_only = read_only
        self.clock = clock
        self.geometry = config.geometry
        self.store_host = HostAddress.parse(config.store_host)
        self.delay_levels = DelayLevels(config.delay_levels or DEFAULT_DELAY_LEVELS)
        self.delay_levels_source = DelayTableSource("default", DEFAULT_TABLE_TEXT)
        self.recovery: RecoveryResult | None = None
        self.projected_in_memory: ProjectedInMemory | None = None  # read-only: the tail the queues lacked
        self.abnormal_shutdown = False
        self._lock = threading.RLock()  # the store lock: changes, and reads that need them settled
        # The projections (consume queues, index): taken after _lock, never before. The dispatcher
        # thread takes only this one, so appends go on while it projects.
        self._dispatch_lock = threading.RLock()
        self._appended = threading.Condition(self._lock)  # notified after appends while long polls wait on it
        self._long_polls = 0  # receives waiting in wait_for_append
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
        self._expiry_at_ms = 0  # the earliest invisible time of a received message that may run out
        self._queue_offsets: dict[tuple[bytes, int], int] = {}
        self._tracer = trace_log.TraceWriter(clock, self.store_host, self._append_trace)
        self._recent = RecentKeyFilter(config.dedupe_window_ms) if config.dedupe_window_ms > 0 else None
        self._open_halves = None  # read-write: the transactions not ended yet (store.engine.transactions)
        self.stats = StoreStats(clock.now_ms())
        self.commitlog: CommitLog
        self.metadata: Metadata
        self.offsets: ConsumerOffsets
        self._builder: RecordBuilder
        self._queues: ConsumeQueues
        self._index: IndexService
        self.dispatcher: Dispatcher
        self.dead_letter_index: DeadLetterIndex
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

    # -- configuration -----------------------------------------------------------------------
    def set_delay_levels(self, spec: str) -> None:
        """Use delay level table `spec` ('1s 5s 10s ...') for messages written from now on, also
        after a restart (config/delayLevels.json). Messages already scheduled keep their deliver
        time. Raises InvalidConfigError for a bad table."""
        with self._writing():
            self._room_for_change()
            self.commitlog.flush()  # the new table applies after these bytes: they must outlive a crash
            tables = self.delay_levels.changed_to(spec, self.commitlog.end)
            write_delay_levels(self.paths.config, tables)
            self.delay_levels.use_tables(tables)
            self.delay_levels_source = DelayTableSource("file", FILE_TABLE_TEXT)
            self.scheduler.table_changed(self.clock.now_ms())
            self._fit_schedule_topic()

    def saved_delay_level_table(self) -> str | None:
        """The table config/delayLevels.json holds (what the store uses after a restart), None
        without the file."""
        saved = read_delay_levels(self.paths.config)
        return None if saved is None else saved.spec

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

    def put_topic(self, config: TopicConfig) -> TopicConfig:
        """Create a topic or change its queue count or permission."""
        with self._writing():
            self._room_for_change()
            self.metadata.put_topic(config)
            self._builder.forget_topic(config.name)
        return config

    # -- writing -----------------------------------------------------------------------------
    @contextmanager
    def _writing(self, wait_ms: int | None = None, *, caught_up: bool = True) -> Iterator[None]:
        """The store lock, for a change to a store that is open for writing, with the projections
        caught up unless the change only appends. With `wait_ms`, a store busier than that
        refuses the change (flow control) instead of queueing it."""
        self._lock_for_change(wait_ms)
        try:
            if caught_up:
                with self._dispatch_lock:
                    self.dispatcher.dispatch_pending()
                    yield
            else:
                yield
        finally:
            self._lock.release()
        self._make_durable()

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """The store lock and the projections' lock, for a read that needs a settled view."""
        with self._lock, self._dispatch_lock:
            yield

    def _make_durable(self) -> None:
        """Sync flush: return once the change and its trace events are on disk (store.log.group_commit)."""
        if self._committer is not None:
            self._committer.wait_durable(self._tracer.queued)

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
        self._lock_for_change(self.config.put_wait_ms)
        try:
            [result] = self._put_batch([message])
        finally:
            self._lock.release()
        self._make_durable()
        return result

    def _put_one(self, message: NewMessage, now: int) -> PutResult:
        """(store lock held) The single-send path: one message, without the batch machinery."""
        key = self._dedupe_key(message)
        new_hash = self._certainly_new(message, key) if key is not None else None
        earlier = self._stored_recently(message, key, now) if key is not None and new_hash is None else None
        if earlier is not None:  # stored before: only its duplicate event is new
            self._trace([duplicate_event(key, earlier, now, message.client)], now)
            return earlier
        result = self._append_one(self._builder.build_one(message, now), now)
        if key is not None:
            self._recent.add(new_hash or index_key_hash(result.topic, key), now)
        if self.config.trace:
            self._trace(self._put_events([message], [result], now), now)
        return result

    def _certainly_new(self, m: NewMessage, key: str) -> int | None:
        """The index hash of `key` when `m` goes straight to its topic and the filter has certainly
        not seen it there (the common case, settled without the index), else None."""
        if m.delay_level or (m.properties and topics.TIMER_DELIVER_MS in m.properties):
            return None
        key_hash = index_key_hash(m.topic, key)
        return None if self._recent.might_hold(key_hash) else key_hash

    def put_many(self, messages: Iterable[NewMessage]) -> list[PutResult]:
        """Append messages in order; with sync flush they are on disk when this returns.

        Every message is checked and sized before any is written, so a bad one rejects the
        whole batch. A message whose client-given unique key was stored within the dedupe
        window is not stored again: its result is the first copy's."""
        batch = list(messages)
        with self._writing(self.config.put_wait_ms, caught_up=False):
            return self._put_batch(batch)

    def put_many_nowait(self, messages: list[NewMessage]) -> list[PutResult] | None:
        """put_many for a caller that must not block (an event loop): None when another thread
        holds the store, and no wait for the disk; with sync flush answer from `when_durable`."""
        if self.read_only:
            raise ReadOnlyStoreError("the store is open read-only")
        if not self._lock.acquire(False):
            return None
        try:
            if self._closed:
                raise StoreError("the store is closed")
            return self._put_batch(messages)
        finally:
            self._lock.release()

    def when_durable(self, done: Callable[[BaseException | None], None]) -> None:
        """Call `done(None)` once what was appended so far is on disk per the flush policy (at
        once with async flush), or `done(error)` when the sync that covers it failed; `done` may
        run on the store's commit thread and must not block."""
        if self._committer is None:
            done(None)
        else:
            self._committer.when_durable(done, self._tracer.queued)

    def _room_for_change(self) -> None:
        """An operator's change is refused (DiskFullError) on a disk the guard finds too full,
        measured now: the state files it writes would fail midway."""
        self._disk_guard.recheck()
        self._disk_guard.check()

    def _put_batch(self, batch: list[NewMessage]) -> list[PutResult]:
        self._disk_guard.check()
        now = self.clock.now_ms()
        if len(batch) == 1:
            results = [self._put_one(batch[0], now)]
        elif self._recent is not None:
            results = self._put_deduplicated(batch, now)
        else:
            results = self._append_planned(self._builder.build_many(batch, now), now)
            self._trace(self._put_events(batch, results, now), now)
        self.stats.count_put(len(results))
        return results

    def _put_deduplicated(self, batch: list[NewMessage], now: int) -> list[PutResult]:
        """The batch with producer dedupe: one compiled pass clears nearly every message (no key,
        or a key certainly new); the others take the full check, in order."""
        if type(batch) is not list:
            batch = list(batch)
        new_hashes, attention = self._recent.screen(batch)
        results: list[PutResult | None] = [None] * len(batch)
        first_in_batch: dict[str, int] = {}
        repeats: list[tuple[int, int]] = []
        skipped: set[int] = set()
        for i in attention:
            m = batch[i]
            key = self._dedupe_key(m)
            if key is None:
                continue
            if key in first_in_batch:
                repeats.append((i, first_in_batch[key]))
                skipped.add(i)
                continue
            earlier = self._stored_recently(m, key, now)
            if earlier is not None:
                results[i] = earlier
                skipped.add(i)
                continue
            first_in_batch[key] = i
        written = [m for i, m in enumerate(batch) if i not in skipped] if skipped else batch
        stored = self._append_planned(self._builder.build_many(written, now), now) if written else []
        if skipped:
            fresh = iter(stored)
            results = [r if i in skipped else next(fresh) for i, r in enumerate(results)]
            for i, first in repeats:
                results[i] = results[first]
        else:
            results = stored
        if first_in_batch:
            checked = [index_key_hash(results[i].topic, results[i].unique_key) for i in first_in_batch.values()]
            new_hashes = np.concatenate([new_hashes, np.array(checked, dtype=np.int64)])
        if len(new_hashes):
            self._recent.add_many(new_hashes, now)
        events = self._put_events(written, stored, now)
        events += [duplicate_event(results[i].unique_key, results[i], now, batch[i].client) for i in sorted(skipped)]
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
        return self._recent_copy(places, key, now)

    def _recent_copy(self, places: list[str], key: str, now: int) -> PutResult | None:
        """The newest copy with unique key `key` one of the topics got within the window, if any."""
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
        """Queue lifecycle events (store lock held): store.broker.trace_log writes them."""
        if self.config.trace and events:
            self._tracer.add(events)

    def _append_trace(self, records: list[NewMessage], now: int) -> None:
        self._append_planned(self._builder.build_many(records, now), now)

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
        """After an append: have it projected, synced per the flush policy, and long polls woken.
        The dispatcher lets go of the interpreter inside its pass and, with producers that never
        block, waited a whole switch interval at each turn: an append past a backlog of
        YIELD_DISPATCH_LAG_BYTES gives it a turn, and past MAX_DISPATCH_LAG_BYTES projects the
        backlog itself when the dispatcher is idle."""
        lag = self.commitlog.end - self.dispatcher.dispatched_to
        if not self._dispatch_wake.is_set():
            self._dispatch_wake.set()
        if lag > MAX_DISPATCH_LAG_BYTES and self._dispatch_lock.acquire(False):
            try:
                self.dispatcher.dispatch_pending()
            finally:
                self._dispatch_lock.release()
        elif lag > YIELD_DISPATCH_LAG_BYTES:
            time.sleep(0)
        if self._long_polls:
            self._appended.notify_all()

    def wait_for_append(self, timeout_s: float) -> None:
        """(store lock held) Wait at most `timeout_s` for the next append; the store lock and the
        projections' lock are released while waiting, so appends and their dispatch go on."""
        held = 0
        while self._dispatch_lock._is_owned():
            self._dispatch_lock.release()
            held += 1
        self._long_polls += 1
        try:
            self._appended.wait(timeout_s)
        finally:
            self._long_polls -= 1
            for _ in range(held):
                self._dispatch_lock.acquire()

    def new_unique_key(self) -> str:
        """A fresh unique key in RocketMQ's client form, as a producer would make."""
        return self._builder.unique_keys.create()

    def _assign_queue_offsets(self, planned: list[tuple[tuple, str, str]]) -> tuple[np.ndarray, dict]:
        """Queue offsets from RocketMQ's topic-queue table (the next offset of each queue, ahead
        of dispatch), and the table's new entries, to keep once the records are written."""
        offsets = np.empty(len(planned), dtype=np.int64)
        advanced = assign_queue_offsets(planned, self._queue_offsets, self._queue_end, offsets)
        return offsets, advanced

    def _queue_end(self, topic: bytes, queue_id: int) -> int:
        cq = self._queues.get(topic.decode("utf-8"), queue_id)
        return cq.max_offset if cq is not None else 0

