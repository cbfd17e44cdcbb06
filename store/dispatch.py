"""Dispatch: project commit log records (bytes already on disk) into consume queues and index.

Live writes and crash recovery run this same code; every step is idempotent."""

from __future__ import annotations

from store import codec, topics
from store.codec import TRANSACTION_PREPARED, TRANSACTION_ROLLBACK, TRANSACTION_TYPE_MASK, split_keys
from store.commitlog import CommitLog
from store.consume_queue import ConsumeQueues
from store.delay_levels import DelayLevels
from store.index import IndexService
from store.javahash import tags_code
from store.layouts import BLANK, MAGIC_BLANK

DISPATCH_BATCH_BYTES = 4 * 1024 * 1024


def tags_code_of(msg, delay_levels: DelayLevels) -> int:
    """tagsCode of a record (StoredMessage or DispatchView): deliver time for scheduled ones."""
    if msg.topic == topics.SCHEDULE_TOPIC:
        level = msg.properties.get(topics.DELAY)
        if level is not None and level.lstrip("-").isdigit() and int(level) > 0:
            return delay_levels.deliver_time(int(level), msg.store_timestamp)
    return tags_code(msg.properties.get(topics.TAGS))


def index_keys_of(msg) -> list[str]:
    keys = []
    uniq = msg.properties.get(topics.UNIQ_KEY)
    if uniq:
        keys.append(uniq)
    keys.extend(split_keys(msg.properties.get(topics.KEYS)))
    return keys


class Dispatcher:
    def __init__(self, commitlog: CommitLog, queues: ConsumeQueues, index: IndexService,
                 delay_levels: DelayLevels):
        self.commitlog = commitlog
        self.queues = queues
        self.index = index
        self.delay_levels = delay_levels
        self.dispatched_to = commitlog.min_offset
        self.last_store_timestamp = 0

    def _read_batch(self, start: int, end: int) -> tuple[list[codec.DispatchView], int]:
        """DispatchViews of the records starting in [start, start + batch size), BLANK fillers
        skipped, and the offset reached."""
        log = self.commitlog
        stop = min(end, start + DISPATCH_BATCH_BYTES)
        views = []
        phys = start
        while phys < stop:
            seg, pos = log.view(phys)
            size, magic = BLANK.unpack_from(seg.buf, pos)
            if magic == MAGIC_BLANK:
                phys += log.file_size - pos
                continue
            view = codec.decode_for_dispatch(seg.buf, pos, path=str(seg.path))
            views.append(view)
            phys += view.size
        return views, phys

    def dispatch_pending(self) -> int:
        """Dispatch every record between the progress mark and the commit log's end."""
        end = self.commitlog.end
        count = 0
        while self.dispatched_to < end:
            views, reached = self._read_batch(self.dispatched_to, end)
            self._dispatch_batch(views)
            count += len(views)
            self.dispatched_to = reached
        return count

    def _dispatch_batch(self, views: list[codec.DispatchView]) -> None:
        runs: dict[tuple[str, int], tuple[int, list[tuple[int, int, int]]]] = {}
        indexed: list[tuple[str, list[str], int, int]] = []
        delay_levels = self.delay_levels
        for v in views:
            ttype = v.sys_flag & TRANSACTION_TYPE_MASK
            if ttype != TRANSACTION_PREPARED and ttype != TRANSACTION_ROLLBACK:
                unit = (v.phys_offset, v.size, tags_code_of(v, delay_levels))
                key = (v.topic, v.queue_id)
                run = runs.get(key)
                if run is not None and run[0] + len(run[1]) == v.queue_offset:
                    run[1].append(unit)
                else:
                    if run is not None:
                        self._write_run(key, run)
                    runs[key] = (v.queue_offset, [unit])
            if ttype != TRANSACTION_ROLLBACK:
                keys = index_keys_of(v)
                if keys:
                    indexed.append((v.topic, keys, v.phys_offset, v.store_timestamp))
        for key, run in runs.items():
            self._write_run(key, run)
        if indexed:
            self.index.put_batch(indexed)
        if views:
            self.last_store_timestamp = views[-1].store_timestamp

    def _write_run(self, key: tuple[str, int], run: tuple[int, list[tuple[int, int, int]]]) -> None:
        self.queues.get_or_create(*key).put_run(run[0], run[1])
