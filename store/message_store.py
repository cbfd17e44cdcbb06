"""The store facade: open read-write or read-only, put messages, and the four lookups."""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, NamedTuple

import numpy as np

from store import ids, topics
from store.checkpoint import Checkpoint
from store.clock import Clock, SystemClock
from store.codec import StoredMessage
from store.commitlog import CommitLog, RecoveryResult
from store.consume_queue import ConsumeQueues
from store.delay_levels import DEFAULT_DELAY_LEVELS, DelayLevels
from store.dispatch import Dispatcher
from store.errors import (
    InvalidIdError,
    MessageNotFoundError,
    ReadOnlyStoreError,
    StoreError,
    StoreLockedError,
    StoreNotFoundError,
)
from store.geometry import StoreGeometry
from store.hosts import HostAddress
from store.index import IndexService
from store.metadata import Metadata, TopicConfig
from store.offsets import ConsumerOffsets
from store.paths import LOCK_CONTENT, StorePaths
from store.record_builder import NewMessage, RecordBuilder
from store.recordio import assign_queue_offsets, put_results
from store.retry import SendBack, route_send_back
from store.schedule import DeliveryPass, ScheduleService

MAX_QUERY_RESULTS = 10_000


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
    schedule_interval_ms: int = 0  # > 0: a thread delivers due delayed messages this often
    max_message_bytes: int = 4 * 1024 * 1024


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
        self._flush_lock = threading.RLock()  # taken before _lock, never after
        self._lock_fd: int | None = None
        self._closed = False
        self._flusher: threading.Thread | None = None
        self._scheduler_thread: threading.Thread | None = None
        self._stop_flusher = threading.Event()
        self._queue_offsets: dict[tuple[bytes, int], int] = {}
        self.commitlog: CommitLog
        self.metadata: Metadata
        self.offsets: ConsumerOffsets
        self._builder: RecordBuilder
        self.queues: ConsumeQueues
        self.index: IndexService
        self.dispatcher: Dispatcher

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
        self.queues = ConsumeQueues(self.paths, self.geometry.cq_file_size, writable=False)
        self.index = IndexService(self.paths.index, self.geometry.index_slots, self.geometry.index_entries,
                                  self.clock, writable=False)
        self.dispatcher = Dispatcher(self.commitlog, self.queues, self.index, self.delay_levels)
        self.dispatcher.dispatched_to = self.commitlog.end
        self._open_config(writable=False)

    def _open_config(self, *, writable: bool) -> None:
        """Topic and group metadata and consumer offsets, from config/ (absent in a bare store)."""
        self.metadata = Metadata(self.paths.config, auto_create_topics=self.config.auto_create_topics,
                                 default_queues=self.config.default_queue_count,
                                 schedule_queues=self.delay_levels.max_level, writable=writable)
        self.metadata.adopt({topic: max(cq.queue_id for cq in queues) + 1
                             for topic, queues in self.queues.topics().items()})
        self.offsets = ConsumerOffsets(self.paths.config)
        self.scheduler = ScheduleService(self.paths.config, self.queues, self.delay_levels)

    def _open_read_write(self) -> None:
        root = self.paths.root
        if root.exists() and not root.is_dir():
            raise StoreNotFoundError(f"{root} is not a directory")
        root.mkdir(parents=True, exist_ok=True)
        self._take_lock()
        self.abnormal_shutdown = self.paths.abort.exists()
        self.paths.abort.touch()
        self.commitlog = CommitLog(self.paths.commitlog, self.geometry.commitlog_file_size, writable=True)
        self.recovery = self.commitlog.recover(count_tail=self.abnormal_shutdown)
        if self.recovery.truncated_bytes:
            self.commitlog.truncate_after(self.recovery.end)
        end = self.commitlog.end
        self.queues = ConsumeQueues(self.paths, self.geometry.cq_file_size, writable=True)
        for cq in self.queues:
            cq.truncate_after_phys(end)
        self.index = IndexService(self.paths.index, self.geometry.index_slots, self.geometry.index_entries,
                                  self.clock, writable=True)
        index_rebuild_from = self.index.truncate_after_phys(end)
        self.dispatcher = Dispatcher(self.commitlog, self.queues, self.index, self.delay_levels)
        self.dispatcher.dispatched_to = self._replay_start(index_rebuild_from)
        self.dispatcher.dispatch_pending()
        self._open_config(writable=True)
        self._builder = RecordBuilder(
            self.store_host, self.config.cluster, self.delay_levels, self.metadata.topic_for_send,
            self.config.max_message_bytes, self.commitlog.max_record_size(),
            ids.UniqueKeyFactory(self.store_host, self.clock))
        if self.config.flush == "async":
            self._flusher = threading.Thread(target=self._flush_loop, name="mqlens-flush", daemon=True)
            self._flusher.start()
        if self.config.schedule_interval_ms > 0:
            self._scheduler_thread = threading.Thread(target=self._schedule_loop, name="mqlens-schedule",
                                                      daemon=True)
            self._scheduler_thread.start()

    def _replay_start(self, index_rebuild_from: int | None) -> int:
        """Where dispatch must resume: the earliest point some projection may be missing."""
        cq_progress = self.commitlog.min_offset
        for cq in self.queues:
            last = cq.last_unit()
            if last is not None and last.size != 0x7FFFFFFF:
                cq_progress = max(cq_progress, last.phys_offset + last.size)
        starts = [cq_progress]
        if self.index.files:
            starts.append(self.index.end_phys)
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

    def _flush_loop(self) -> None:
        interval = self.config.flush_interval_ms / 1000
        while not self._stop_flusher.wait(interval):
            try:
                self.flush()
            except Exception:  # the store may be closing under us; the next close flushes
                if self._closed:
                    return

    def _schedule_loop(self) -> None:
        interval = self.config.schedule_interval_ms / 1000
        while not self._stop_flusher.wait(interval):
            try:
                self.deliver_due()
            except StoreError:
                if self._closed:
                    return

    def deliver_due(self) -> DeliveryPass:
        """Put every delayed message whose time has come to its real topic and queue."""
        with self._writing():
            now = self.clock.now_ms()
            due, skipped = self.scheduler.due(now, self.commitlog.read)
            planned, advances = [], []
            for level, msg, next_offset in due:
                advances.append((level, next_offset))
                try:
                    queue_id = int(msg.properties.get(topics.REAL_QID, ""))
                    planned.append(self._builder.build_copy(msg, msg.properties.get(topics.REAL_TOPIC), queue_id,
                                                            msg.reconsume_times))
                except (StoreError, ValueError, TypeError) as exc:
                    skipped.append((msg.phys_offset, f"undeliverable: {exc}"))
            delivered = self._append_planned(planned, now) if planned else []
            for level, offset in advances:
                self.scheduler.advance(level, offset)
        return DeliveryPass(delivered, skipped)

    def flush(self) -> None:
        """Make everything written so far durable and record it in the checkpoint."""
        if self.read_only:
            return
        with self._flush_lock:
            with self._lock:  # only to collect what to sync: writers go on during the syncs
                if self._closed:
                    return
                files = self.commitlog.dirty_files() + self.queues.dirty_files() + self.index.dirty_files()
                ts = self.dispatcher.last_store_timestamp
            for f in files:
                f.sync()
            Checkpoint(ts, ts, ts).write(self.paths.checkpoint)
            self.offsets.persist()
            self.scheduler.persist()

    def close(self) -> None:
        if self._closed:
            return
        self._stop_flusher.set()
        for thread in (self._flusher, self._scheduler_thread):
            if thread is not None:
                thread.join()
        with self._flush_lock, self._lock:
            if not self.read_only:
                self.flush()
            self._closed = True
            self.commitlog.close()
            self.queues.close()
            self.index.close()
            if not self.read_only:
                self.paths.abort.unlink(missing_ok=True)
        self._release()

    def __enter__(self) -> MessageStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- writing -----------------------------------------------------------------------------
    @contextmanager
    def _writing(self) -> Iterator[None]:
        """The store lock, for a change to a store that is open for writing."""
        if self.read_only:
            raise ReadOnlyStoreError("the store is open read-only")
        with self._lock:
            if self._closed:
                raise StoreError("the store is closed")
            yield

    def put(self, message: NewMessage) -> PutResult:
        return self.put_many([message])[0]

    def put_many(self, messages: Iterable[NewMessage]) -> list[PutResult]:
        """Append messages in order; with sync flush they are on disk when this returns.

        Every message is checked and sized before any is written, so a bad one rejects the
        whole batch."""
        with self._writing():
            now = self.clock.now_ms()
            return self._append_planned(self._builder.build_many(list(messages), now), now)

    def _append_planned(self, planned: list[tuple[tuple, str, str]], now: int) -> list[PutResult]:
        """Append built records, dispatch them and sync per the flush policy (store lock held)."""
        items = [item for item, _, _ in planned]
        queue_offsets, advanced = self._assign_queue_offsets(planned)
        phys = self.commitlog.append_records(items, queue_offsets, now, self.store_host)
        self._queue_offsets.update(advanced)
        self.dispatcher.dispatch_pending()
        if self.config.flush == "sync":
            self.commitlog.flush()
        return put_results(PutResult, planned, queue_offsets, phys, now, self.store_host)

    def send_back(self, phys_offset: int, group: str, delay_level: int = 0,
                  max_reconsume_times: int | None = None) -> tuple[PutResult, SendBack]:
        """A consumer of `group` failed the message at `phys_offset`: put its retry copy (via
        SCHEDULE_TOPIC_XXXX) or, past the group's maximum, its dead letter."""
        with self._writing():
            original = self.read(phys_offset)
            route = route_send_back(original, self.metadata.group(group), delay_level, max_reconsume_times)
            now = self.clock.now_ms()
            built = self._builder.build_copy(original, route.topic, route.queue_id, route.reconsume_times,
                                             route.properties)
            return self._append_planned([built], now)[0], route

    def _assign_queue_offsets(self, planned: list[tuple[tuple, str, str]]) -> tuple[np.ndarray, dict]:
        """Queue offsets from RocketMQ's topic-queue table (the next offset of each queue, ahead
        of dispatch), and the table's new entries, to keep once the records are written."""
        offsets = np.empty(len(planned), dtype=np.int64)
        advanced = assign_queue_offsets(planned, self._queue_offsets, self._queue_end, offsets)
        return offsets, advanced

    def _queue_end(self, topic: bytes, queue_id: int) -> int:
        cq = self.queues.get(topic.decode("utf-8"), queue_id)
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
        from store.check import check_store

        with self._lock:
            return check_store(self)
