"""The store facade: open read-write or read-only, put messages, and the four lookups."""

from __future__ import annotations

import fcntl
import itertools
import os
import threading
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from store import codec, ids, topics
from store.checkpoint import Checkpoint
from store.clock import Clock, SystemClock
from store.codec import StoredMessage
from store.commitlog import CommitLog, RecoveryResult
from store.consume_queue import ConsumeQueues
from store.delay_levels import DEFAULT_DELAY_LEVELS, DelayLevels
from store.dispatch import Dispatcher
from store.errors import (
    InvalidIdError,
    InvalidMessageError,
    MessageNotFoundError,
    ReadOnlyStoreError,
    StoreError,
    StoreLockedError,
    StoreNotFoundError,
)
from store.geometry import StoreGeometry
from store.hosts import HostAddress
from store.index import IndexService
from store.paths import LOCK_CONTENT, StorePaths
from store.properties import MAX_PROPERTIES_BYTES, check_property, java_hashmap_order

MAX_QUERY_RESULTS = 10_000


def _has_separator(text: str) -> bool:
    return "\x01" in text or "\x02" in text

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
    max_message_bytes: int = 4 * 1024 * 1024


@dataclass
class NewMessage:
    """A message handed to `put`, as a producer sends it."""

    topic: str
    body: bytes
    tags: str | None = None
    keys: list[str] = field(default_factory=list)
    properties: dict[str, str] = field(default_factory=dict)
    queue_id: int | None = None
    born_timestamp: int | None = None
    born_host: str | None = None
    flag: int = 0
    delay_level: int = 0
    unique_key: str | None = None
    reconsume_times: int = 0
    compress: bool = False


@dataclass(frozen=True)
class PutResult:
    topic: str
    queue_id: int
    queue_offset: int
    phys_offset: int
    size: int
    offset_msg_id: str
    unique_key: str | None
    store_timestamp: int


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
        self._lock_fd: int | None = None
        self._closed = False
        self._flusher: threading.Thread | None = None
        self._stop_flusher = threading.Event()
        self._queue_rr: dict[str, Iterator[int]] = {}
        self._unique_keys = ids.UniqueKeyFactory(self.store_host, clock)
        self._queue_offsets: dict[tuple[str, int], int] = {}
        self._topic_bytes: dict[str, bytes] = {}
        self._property_orders: dict[tuple[str, ...], list[str]] = {}
        self._hosts: dict[str, HostAddress] = {}
        self.commitlog: CommitLog
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
        if self.config.flush == "async":
            self._flusher = threading.Thread(target=self._flush_loop, name="mqlens-flush", daemon=True)
            self._flusher.start()

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

    def flush(self) -> None:
        """Make everything written so far durable and record it in the checkpoint."""
        if self.read_only:
            return
        with self._lock:
            if self._closed:
                return
            self.commitlog.flush()
            self.queues.flush()
            self.index.flush()
            ts = self.dispatcher.last_store_timestamp
            Checkpoint(ts, ts, ts).write(self.paths.checkpoint)

    def close(self) -> None:
        if self._closed:
            return
        self._stop_flusher.set()
        if self._flusher is not None:
            self._flusher.join()
        with self._lock:
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
    def _next_queue_id(self, topic: str) -> int:
        rr = self._queue_rr.get(topic)
        if rr is None:
            rr = self._queue_rr[topic] = itertools.cycle(range(self.config.default_queue_count))
        return next(rr)

    def _check_topic(self, topic: str) -> bytes:
        encoded = self._topic_bytes.get(topic)
        if encoded is None:
            encoded = topics.validate_topic(topic).encode("utf-8")
            self._topic_bytes[topic] = encoded
        return encoded

    def _ordered(self, names: tuple[str, ...]) -> list[str]:
        order = self._property_orders.get(names)
        if order is None:
            order = self._property_orders[names] = java_hashmap_order(names)
        return order

    def _build_record(self, m: NewMessage, now: int) -> StoredMessage:
        """The record a producer's message becomes, as RocketMQ 4.9's broker writes it: the
        client properties plus CLUSTER, in java.util.HashMap order, without WAIT."""
        self._check_topic(m.topic)
        topic = m.topic
        body = m.body
        if not isinstance(body, bytes):
            if not isinstance(body, bytearray):
                raise InvalidMessageError("the body must be bytes")
            body = bytes(body)
        if len(body) > self.config.max_message_bytes:
            raise InvalidMessageError(f"body of {len(body)} bytes exceeds {self.config.max_message_bytes}")
        queue_id = self._next_queue_id(topic) if m.queue_id is None else m.queue_id
        if not isinstance(queue_id, int) or queue_id < 0:
            raise InvalidMessageError(f"invalid queue id {queue_id!r}")
        props: dict[str, str] = {}
        if m.properties:
            for name, value in m.properties.items():
                value = str(value)
                try:
                    check_property(name, value)
                except ValueError as exc:
                    raise InvalidMessageError(str(exc)) from None
                props[name] = value
        if m.keys:
            for key in m.keys:
                if not key or " " in key or _has_separator(key):
                    raise InvalidMessageError(f"invalid key {key!r}: keys are non-empty and have no spaces")
            props[topics.KEYS] = " ".join(m.keys)
        unique_key = m.unique_key or props.get(topics.UNIQ_KEY) or self._unique_keys.create()
        if _has_separator(unique_key):
            raise InvalidMessageError("the unique key contains a reserved separator character")
        props[topics.UNIQ_KEY] = unique_key
        if m.tags:
            if _has_separator(m.tags):
                raise InvalidMessageError("tags contain a reserved separator character")
            props[topics.TAGS] = m.tags
        sys_flag = 0
        if m.compress:
            body = zlib.compress(body, 5)
            sys_flag |= codec.COMPRESSED_FLAG
        delay = m.delay_level
        if delay and delay > 0:
            delay = self.delay_levels.clamp(delay)
            props[topics.DELAY] = str(delay)
            props[topics.REAL_TOPIC] = topic
            props[topics.REAL_QID] = str(queue_id)
            props[topics.WAIT] = "true"
            topic, queue_id = topics.SCHEDULE_TOPIC, delay - 1
        props[topics.CLUSTER] = self.config.cluster
        ordered = {name: props[name] for name in self._ordered(tuple(props))}
        born_host = self._parse_host(m.born_host) if m.born_host else self.store_host
        return StoredMessage(
            topic=topic, queue_id=queue_id, queue_offset=0, phys_offset=0,
            born_timestamp=now if m.born_timestamp is None else m.born_timestamp,
            born_host=born_host, store_timestamp=now, store_host=self.store_host,
            stored_body=body, properties=ordered, flag=m.flag, sys_flag=sys_flag,
            reconsume_times=m.reconsume_times,
        )

    def _parse_host(self, text: str) -> HostAddress:
        host = self._hosts.get(text)
        if host is None:
            try:
                host = HostAddress.parse(text)
            except ValueError as exc:
                raise InvalidMessageError(str(exc)) from None
            if len(self._hosts) < 4096:
                self._hosts[text] = host
        return host

    def put(self, message: NewMessage) -> PutResult:
        return self.put_many([message])[0]

    def put_many(self, messages: Iterable[NewMessage]) -> list[PutResult]:
        """Append messages in order; with sync flush they are on disk when this returns.

        Every message is checked and sized before any is written, so a bad one rejects the
        whole batch."""
        if self.read_only:
            raise ReadOnlyStoreError("the store is open read-only")
        with self._lock:
            if self._closed:
                raise StoreError("the store is closed")
            now = self.clock.now_ms()
            planned = [self._plan(self._build_record(m, now)) for m in messages]
            results = [self._append(*plan) for plan in planned]
            self.dispatcher.dispatch_pending()
            if self.config.flush == "sync":
                self.commitlog.flush()
        return results

    def _plan(self, record: StoredMessage) -> tuple[StoredMessage, bytes, bytes, int]:
        """The record with its encoded topic and properties and its size, checked to fit."""
        topic_bytes = self._topic_bytes.get(record.topic) or record.topic.encode("utf-8")
        props_bytes = record.properties_text().encode("utf-8")
        if len(props_bytes) > MAX_PROPERTIES_BYTES:
            raise InvalidMessageError(
                f"properties take {len(props_bytes)} bytes; the limit is {MAX_PROPERTIES_BYTES}")
        size = codec.encoded_size(len(record.stored_body), len(topic_bytes), len(props_bytes),
                                  record.born_host.is_ipv6, record.store_host.is_ipv6)
        if size > self.commitlog.max_record_size():
            raise InvalidMessageError(f"a record of {size} bytes does not fit in a commit log segment")
        return record, topic_bytes, props_bytes, size

    def _next_queue_offset(self, topic: str, queue_id: int) -> int:
        """RocketMQ's topic-queue table: the next offset of each queue, ahead of dispatch."""
        key = (topic, queue_id)
        offset = self._queue_offsets.get(key)
        if offset is None:
            cq = self.queues.get(topic, queue_id)
            offset = cq.max_offset if cq is not None else 0
        self._queue_offsets[key] = offset + 1
        return offset

    def _append(self, record: StoredMessage, topic_bytes: bytes, props_bytes: bytes, size: int) -> PutResult:
        phys = self.commitlog.prepare(size)
        record.queue_offset = self._next_queue_offset(record.topic, record.queue_id)
        record.phys_offset = phys
        record.size = size
        self.commitlog.append(codec.encode_fields(
            record.queue_id, record.flag, record.queue_offset, phys, record.sys_flag, record.born_timestamp,
            record.born_host, record.store_timestamp, record.store_host, record.reconsume_times,
            record.prepared_transaction_offset, record.stored_body, topic_bytes, props_bytes, record.magic,
        ))
        return PutResult(
            topic=record.topic, queue_id=record.queue_id, queue_offset=record.queue_offset,
            phys_offset=phys, size=size,
            offset_msg_id=ids.create_offset_msg_id(record.store_host, phys),
            unique_key=record.properties.get(topics.UNIQ_KEY), store_timestamp=record.store_timestamp,
        )

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
