"""Opening a store (read-write with crash recovery, or read-only), flushing it and closing it."""

from __future__ import annotations

import bisect
import fcntl
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from store.broker import trace_log
from store.broker.delay_inference import (
    DEFAULT_TABLE_TEXT,
    FILE_TABLE_TEXT,
    GIVEN_TABLE_TEXT,
    DelayTableSource,
    infer_delay_table,
    schedule_queues_of,
    store_time_reader,
)
from store.broker.metadata import Metadata
from store.broker.offsets import ConsumerOffsets
from store.broker.pop import PopService
from store.broker.record_builder import RecordBuilder
from store.broker.schedule import ScheduleService
from store.broker.timer import TimerService
from store.clock import Clock, SystemClock
from store.engine.config import StoreConfig
from store.errors import (
    DiskFullError,
    StoreLockedError,
    StoreNotFoundError,
    is_no_space,
)
from store.format import ids, topics
from store.format.delay_levels import DEFAULT_DELAY_LEVELS, DelayLevels
from store.log.checkpoint import Checkpoint
from store.log.commitlog import CommitLog
from store.log.config_file import remove_leftover_temps
from store.log.delay_levels_file import read_delay_levels
from store.log.disk_guard import DiskGuard
from store.log.group_commit import GroupCommitter
from store.log.paths import LOCK_CONTENT
from store.projections.consume_queue import ConsumeQueues
from store.projections.dead_letters import DeadLetterIndex
from store.projections.dispatch import Dispatcher
from store.projections.index import IndexService

# The newest bytes of the log (behind the dispatcher's position) stay mapped after a flush: the dispatcher,
# receives and lookups read them.
RESIDENT_TAIL_BYTES = 4 * 1024 * 1024
# Likewise the newest index entries (a lookup of a recent key walks them); the slot table stays whole.
RESIDENT_INDEX_TAIL_BYTES = 1024 * 1024


@dataclass(frozen=True)
class ProjectedInMemory:
    """Records a read-only store projected itself at open: its consume queues and index ended
    before them (a copy taken while the broker ran, or after it crashed)."""

    start: int  # commit log offsets
    end: int
    records: int
    queue_units: int
    index_keys: int


class StoreLifecycle:
    @classmethod
    def open(cls, root: str | os.PathLike, config: StoreConfig | None = None, *, read_only: bool = False,
             clock: Clock | None = None) -> Self:
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
        # A copy of a running or crashed broker's store: its queues and index may lag the log.
        # The tail is projected into private memory (never written), like the replay after a crash.
        self._queues = ConsumeQueues(self.paths, self.geometry.cq_file_size, writable=False, private=True)
        for cq in self._queues:
            cq.drop_before_phys(self.commitlog.min_offset)
        self._index = IndexService(self.paths.index, self.geometry.index_slots, self.geometry.index_entries,
                                   self.clock, writable=False, private=True)
        self._choose_delay_levels()
        self.dead_letter_index = DeadLetterIndex(self.paths, writable=False)
        self.dispatcher = Dispatcher(self.commitlog, self._queues, self._index, self.delay_levels,
                                     self.dead_letter_index)
        start = self.dispatcher.dispatched_to = self._replay_start(None)
        before = self._projected_sizes()
        self.dispatcher.dead_letter_reasons = trace_log.dead_letter_reasons
        records = self.dispatcher.dispatch_pending()
        self._open_dead_letter_index()
        units, keys = (after - earlier for after, earlier in zip(self._projected_sizes(), before, strict=True))
        if units or keys:
            self.projected_in_memory = ProjectedInMemory(start, self.commitlog.end, records, units, keys)
        self._open_config(writable=False)

    def _choose_delay_levels(self) -> None:
        """The delay level table: the store's own (config/delayLevels.json), else the one given,
        else the one the queued scheduled messages imply (a store another broker wrote, whose
        table is in its broker.conf), else RocketMQ's default."""
        saved = read_delay_levels(self.paths.config)
        if saved is not None:
            self.delay_levels, self.delay_levels_source = saved, DelayTableSource("file", FILE_TABLE_TEXT)
            return
        if self.config.delay_levels is not None:
            self.delay_levels = DelayLevels(self.config.delay_levels)
            self.delay_levels_source = DelayTableSource("given", GIVEN_TABLE_TEXT)
            return
        inferred = infer_delay_table(schedule_queues_of(self._queues),
                                     store_time_reader(self.commitlog))
        if inferred is not None:
            self.delay_levels, self.delay_levels_source = DelayLevels(inferred.spec), inferred.source
        else:
            self.delay_levels = DelayLevels(DEFAULT_DELAY_LEVELS)
            self.delay_levels_source = DelayTableSource("default", DEFAULT_TABLE_TEXT)

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
        remove_leftover_temps(self.paths.config)  # unfinished changes: their owners redo them
        if not self.paths.checkpoint.exists():  # its page is taken now, while there is room (RocketMQ does so too)
            Checkpoint().write(self.paths.checkpoint)
        self._disk_guard = DiskGuard(root, self.config.disk_max_used_ratio, self.config.min_free_bytes())
        self.commitlog = CommitLog(self.paths.commitlog, self.geometry.commitlog_file_size, writable=True)
        self.recovery = self.commitlog.recover(count_tail=self.abnormal_shutdown)
        if self.recovery.truncated_bytes or self.commitlog.has_segments_past(self.recovery.end):
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
        self._choose_delay_levels()
        self.dead_letter_index = DeadLetterIndex(self.paths, writable=True)
        self.dispatcher = Dispatcher(self.commitlog, self._queues, self._index, self.delay_levels,
                                     self.dead_letter_index)
        self.dispatcher.dead_letter_reasons = trace_log.dead_letter_reasons
        self.dispatcher.dispatched_to = self._replay_start(index_rebuild_from)
        self.dispatcher.dispatch_pending()
        self._open_dead_letter_index()
        self._open_config(writable=True)
        self._builder = RecordBuilder(
            self.store_host, self.config.cluster, self.delay_levels, self.metadata.topic_for_send,
            self.config.max_message_bytes, self.commitlog.max_record_size(),
            ids.UniqueKeyFactory(self.store_host, self.clock))
        self._builder.timer_floor_ms = self.timer.floor_ms
        self._fit_schedule_topic()
        self._open_halves = self._find_open_halves()
        if self._recent is not None:
            now = self.clock.now_ms()
            self._recent.add_many(self._index.key_hashes_since(now - self._recent.window_ms), now)
        self._dispatch_thread = threading.Thread(target=self._dispatch_loop, name="mqlens-dispatch", daemon=True)
        self._dispatch_thread.start()
        if self.config.flush == "async":
            self._flusher = self._start_periodic("mqlens-flush", self.config.flush_interval_ms, self.flush)
        else:
            self._committer = GroupCommitter(self.commitlog, self._lock, self._flush_lock, held=self._tracer)
            self._committer.start()
        if self.config.retention_check_ms > 0:
            self._retention_thread = self._start_periodic("mqlens-retention", self.config.retention_check_ms,
                                                          self.delete_expired)
        if self.config.schedule_interval_ms > 0:
            self.dispatcher.on_due = self._note_due
            self._scheduler_thread = threading.Thread(target=self._schedule_loop, name="mqlens-schedule",
                                                      daemon=True)
            self._scheduler_thread.start()

    def _open_dead_letter_index(self) -> None:
        """Index the dead letters the index lacks (all of them, the first time) and read the
        reasons of those whose records carry none from the trace records written after them."""
        index = self.dead_letter_index
        index.catch_up(self._queues, self.commitlog)
        since, index.unexplained_from, index.opening = index.unexplained_from, None, False
        if since is None:
            return
        for cq in self._queues.topics().get(topics.TRACE_TOPIC, []):
            offsets = range(cq.min_offset, cq.max_offset)
            first = bisect.bisect_left(offsets, since, key=lambda offset: cq.get(offset).phys_offset)
            self.dispatcher.explain_dead_letters([cq.get(offset).phys_offset for offset in offsets[first:]])

    def _projected_sizes(self) -> tuple[int, int]:
        return (sum(cq.max_offset for cq in self._queues), sum(f.used_entries for f in self._index.files))

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

    def flush(self) -> None:
        """Make everything written so far durable and record it in the checkpoint."""
        if self.read_only:
            return
        with self._flush_lock:
            with self._reading():  # only to collect what to sync: writers go on during the syncs
                if self._closed:
                    return
                self._tracer.write()
                self._note_transaction_progress()
                reach, traced = self.commitlog.end, self._tracer.queued
                dispatched = self.dispatcher.dispatched_to
                files = self.commitlog.dirty_files() + self.queues.dirty_files() + self.index.dirty_files()
                ts = self.dispatcher.last_store_timestamp
                # before the syncs: the states name only messages the syncs make durable
                states = [(state_file, state_file.snapshot())
                          for state_file in (self.scheduler, self.timer, self.pop.state_file)]
            for f in files:
                f.sync()
            if self._committer is not None:
                self._committer.covered(reach, traced)
            Checkpoint(ts, ts, ts).write(self.paths.checkpoint)
            # Behind what the dispatcher has read too: under a burst it lags the writer by megabytes.
            self.commitlog.release_before(min(reach, dispatched) - RESIDENT_TAIL_BYTES,
                                          drop_cached=self.config.drop_flushed_pages)
            self.index.release_pages(RESIDENT_INDEX_TAIL_BYTES)
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
        failure: BaseException | None = None
        with self._flush_lock, self._reading():
            if not self.read_only:
                try:
                    self.flush()
                except Exception as exc:  # a full disk: the files are closed all the same, and the
                    failure = exc  # abort file stays, so the next open recovers from the log
            self._closed = True
            self.commitlog.close()
            self._queues.close()
            self._index.close()
            if not self.read_only and failure is None:
                self.paths.abort.unlink(missing_ok=True)
        self._release()
        if isinstance(failure, DiskFullError) or is_no_space(failure):
            raise DiskFullError(f"the store was closed without its final flush ({failure}): it recovers from "
                                "its log at the next open") from failure
        if failure is not None:
            raise failure

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
