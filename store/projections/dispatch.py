"""Dispatch: project commit log records (bytes already on disk) into consume queues and index.

Live writes and crash recovery run this same code; every step is idempotent. Records are
scanned in batches by the compiled scanner; a record it declines (a topic or properties that
are not UTF-8, or a malformed record) goes through the Python decoder, which raises on
corruption."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from store.errors import StoreError
from store.format import codec, topics
from store.format.codec import TRANSACTION_PREPARED, TRANSACTION_ROLLBACK, TRANSACTION_TYPE_MASK, split_keys
from store.format.delay_levels import DelayLevels
from store.format.delivery_time import timer_deliver_ms
from store.format.javahash import index_key_hash, tags_code
from store.format.layouts import BLANK
from store.format.recordio import (
    NO_DELAY_LEVEL,
    SCAN_BLANK,
    SCAN_SLOW,
    SCANNED_KEY,
    SCANNED_RECORD,
    record_layout,
    scan_records,
)
from store.log.commitlog import CommitLog
from store.projections.consume_queue import ConsumeQueues
from store.projections.dead_letters import DeadLetterIndex, Reasons
from store.projections.index import IndexService, index_key

DISPATCH_BATCH_RECORDS = 16_384
DLQ_PREFIX = topics.DLQ_PREFIX.encode()
TRACE_TOPIC = topics.TRACE_TOPIC.encode()
_DELAY_LEVEL_TEXT = re.compile(r"[+-]?[0-9]{1,9}")  # Integer.parseInt, kept to int range


def delay_level_of(msg) -> int | None:
    """The DELAY property as RocketMQ parses it, None when absent or not a number."""
    level = msg.properties.get(topics.DELAY)
    if level is None or not _DELAY_LEVEL_TEXT.fullmatch(level):
        return None
    return int(level)


def tags_code_of(msg, delay_levels: DelayLevels) -> int:
    """tagsCode of a record (StoredMessage or DispatchView): deliver time for scheduled ones."""
    if msg.topic == topics.SCHEDULE_TOPIC:
        level = delay_level_of(msg)
        if level is not None and level > 0:
            return delay_levels.deliver_time(level, msg.store_timestamp, msg.phys_offset)
    elif msg.topic == topics.TIMER_TOPIC:
        return timer_deliver_ms(msg.properties, msg.store_timestamp)
    return tags_code(msg.properties.get(topics.TAGS))


def index_keys_of(msg) -> list[str]:
    keys = []
    uniq = msg.properties.get(topics.UNIQ_KEY)
    if uniq:
        keys.append(uniq)
    keys.extend(split_keys(msg.properties.get(topics.KEYS)))
    return keys


@dataclass
class ScannedBatch:
    """Records scanned from the commit log: fields, index keys and the topic table they share."""

    records: np.ndarray  # SCANNED_RECORD
    keys: np.ndarray  # SCANNED_KEY, `record` numbering rows of `records`
    topic_ids: dict[bytes, int]
    topic_names: list[bytes]

    def topic(self, topic_id: int) -> str:
        return self.topic_names[topic_id].decode("utf-8")


class BatchScanner:
    """Collects scanned records, by the compiled scanner or one at a time from the Python decoder."""

    def __init__(self):
        self.topic_ids: dict[bytes, int] = {}
        self.topic_names: list[bytes] = []
        self._records: list[np.ndarray] = []
        self._keys: list[np.ndarray] = []
        self.count = 0

    def scan(self, buf, pos: int, limit: int, max_records: int) -> tuple[int, int]:
        status, reached, records, keys = scan_records(buf, pos, limit, record_layout(), max_records,
                                                      self.topic_ids, self.topic_names)
        found = np.frombuffer(records, dtype=SCANNED_RECORD)
        if len(found):
            keyed = np.frombuffer(keys, dtype=SCANNED_KEY).copy()
            keyed["record"] += self.count
            self._records.append(found)
            self._keys.append(keyed)
            self.count += len(found)
        return status, reached

    def since(self, count: int) -> np.ndarray:
        """The records scanned after the first `count`, in order (a view when one scan found them all)."""
        parts, held = [], self.count
        for part in reversed(self._records):
            if held <= count:
                break
            parts.append(part[max(0, count - (held - len(part))):])
            held -= len(part)
        return parts[0] if len(parts) == 1 else _joined(parts[::-1], SCANNED_RECORD)

    def add_decoded(self, view: codec.DispatchView) -> None:
        """One record read by the Python decoder: the reference for what the scanner computes."""
        topic = view.topic.encode("utf-8")
        topic_id = self.topic_ids.get(topic)
        if topic_id is None:
            topic_id = self.topic_ids[topic] = len(self.topic_names)
            self.topic_names.append(topic)
        level = delay_level_of(view)
        record = np.array([(view.phys_offset, view.queue_offset, view.store_timestamp, view.size, view.queue_id,
                            view.sys_flag, topic_id, tags_code(view.properties.get(topics.TAGS)),
                            NO_DELAY_LEVEL if level is None else level)], dtype=SCANNED_RECORD)
        hashes = [index_key_hash(index_key(view.topic, k)) for k in index_keys_of(view)]
        keyed = np.array([(self.count, h) for h in hashes], dtype=SCANNED_KEY)
        self._records.append(record)
        self._keys.append(keyed)
        self.count += 1

    def batch(self) -> ScannedBatch:
        """Everything scanned, handed over: the scanner is left without its parts."""
        records, keys = _joined(self._records, SCANNED_RECORD), _joined(self._keys, SCANNED_KEY)
        return ScannedBatch(records, keys, self.topic_ids, self.topic_names)


def _joined(parts: list[np.ndarray], dtype: np.dtype, group_bytes: int = 4 << 20) -> np.ndarray:
    """The parts in one array, let go a group of about `group_bytes` at a time once copied: a
    long scan's memory is not held twice."""
    joined = np.empty(sum(len(part) for part in parts), dtype=dtype)
    at = len(joined)
    while parts:  # from the last group back, so that each one copied leaves the list
        taken = size = 0
        while taken < len(parts) and size < group_bytes:
            taken += 1
            size += parts[-taken].nbytes
        some = parts[-taken:]
        del parts[-taken:]
        count = sum(len(part) for part in some)
        np.concatenate(some, out=joined[at - count : at])
        at -= count
    return joined


def tags_codes(batch: ScannedBatch, rows: np.ndarray, delay_levels: DelayLevels,
               timer_deliver_ms: Callable[[int], int]) -> tuple[np.ndarray, list[np.ndarray]]:
    """The tagsCode of each of `rows`: the tags hash, or the deliver time of a scheduled or timer
    record (timer_deliver_ms reads it from the record at a physical offset). Also the masks of
    the rows that wait for a deliver time."""
    records = batch.records
    codes = records["tags_hash"][rows].astype(np.int64)
    waiting = []
    schedule_id = batch.topic_ids.get(topics.SCHEDULE_TOPIC.encode())
    if schedule_id is not None:
        levels = records["delay_level"][rows]
        scheduled = (records["topic_id"][rows] == schedule_id) & (levels > 0)
        if scheduled.any():
            codes[scheduled] = delay_levels.deliver_times(levels[scheduled], records["store_ts"][rows][scheduled],
                                                          records["phys"][rows][scheduled])
            waiting.append(scheduled)
    timer_id = batch.topic_ids.get(topics.TIMER_TOPIC.encode())
    if timer_id is not None:
        timed = records["topic_id"][rows] == timer_id
        if timed.any():
            codes[timed] = [timer_deliver_ms(phys) for phys in records["phys"][rows][timed].tolist()]
            waiting.append(timed)
    return codes, waiting


class Dispatcher:
    def __init__(self, commitlog: CommitLog, queues: ConsumeQueues, index: IndexService,
                 delay_levels: DelayLevels, dead_letters: DeadLetterIndex | None = None):
        self.commitlog = commitlog
        self.queues = queues
        self.index = index
        self.dead_letters = dead_letters
        self.dead_letter_reasons: Reasons | None = None  # read from trace records (the broker's format)
        self.delay_levels = delay_levels
        self.dispatched_to = commitlog.min_offset
        self.last_store_timestamp = 0
        self.on_due: Callable[[int], None] | None = None  # told the earliest deliver time of each batch

    def scan(self, start: int, end: int, max_records: int = DISPATCH_BATCH_RECORDS) -> tuple[ScannedBatch, int]:
        """Up to `max_records` records from `start`, BLANK fillers skipped, and the offset reached."""
        log = self.commitlog
        scanner = BatchScanner()
        phys = start
        while phys < end and scanner.count < max_records:
            seg, pos = log.view(phys)
            base = phys - pos
            limit = min(log.file_size, end - base)
            status, reached = scanner.scan(seg.buf, pos, limit, max_records - scanner.count)
            phys = base + reached
            if status == SCAN_BLANK or (reached < limit and limit - reached < BLANK.size):
                phys = base + log.file_size
            elif status == SCAN_SLOW:
                view = codec.decode_for_dispatch(seg.buf, reached, path=str(seg.path))
                scanner.add_decoded(view)
                phys += view.size
        return scanner.batch(), phys

    def dispatch_pending(self) -> int:
        """Dispatch every record between the progress mark and the commit log's end."""
        end = self.commitlog.end
        count = 0
        dead_letters = False
        traces: list[int] = []
        while self.dispatched_to < end:
            batch, reached = self.scan(self.dispatched_to, end)
            self.dispatch(batch)
            count += len(batch.records)
            if self.dead_letters is not None:
                dead_letters = dead_letters or any(name.startswith(DLQ_PREFIX) for name in batch.topic_names)
                trace_id = batch.topic_ids.get(TRACE_TOPIC)
                if trace_id is not None:
                    traces += batch.records["phys"][batch.records["topic_id"] == trace_id].tolist()
            self.dispatched_to = reached
        if dead_letters:
            self.dead_letters.catch_up(self.queues, self.commitlog)
        if traces and self.dead_letter_reasons is not None:
            self.explain_dead_letters(traces)
        return count

    def explain_dead_letters(self, trace_records: list[int]) -> None:
        """Give the dead-letter index the reasons these trace records tell."""
        for phys in trace_records:
            try:
                reasons = self.dead_letter_reasons(self.commitlog.read_apart(phys))
            except StoreError:
                continue  # gone with retention, or not a record the trace can read
            if reasons:
                self.dead_letters.explain(reasons)

    def dispatch(self, batch: ScannedBatch) -> None:
        records = batch.records
        if not len(records):
            return
        ttype = records["sys_flag"] & TRANSACTION_TYPE_MASK
        in_queue = (ttype != TRANSACTION_PREPARED) & (ttype != TRANSACTION_ROLLBACK)
        self._write_queues(batch, np.flatnonzero(in_queue))
        keys = batch.keys
        if len(keys):
            rows = keys["record"]
            phys = records["phys"][rows]
            indexed = ttype[rows] != TRANSACTION_ROLLBACK
            self.index.put_hashes(keys["hash"][indexed].astype(np.int64), phys[indexed],
                                  records["store_ts"][rows][indexed])
        self.last_store_timestamp = int(records["store_ts"][-1])

    def _tags_codes(self, batch: ScannedBatch, rows: np.ndarray) -> np.ndarray:
        codes, waiting = tags_codes(batch, rows, self.delay_levels, self._timer_deliver_ms)
        if waiting and self.on_due is not None:
            self.on_due(int(min(codes[mask].min() for mask in waiting)))
        return codes

    def _timer_deliver_ms(self, phys: int) -> int:
        """The scanner does not read TIMER_DELIVER_MS: the Python decoder reads the record."""
        seg, pos = self.commitlog.view(phys)
        view = codec.decode_for_dispatch(seg.buf, pos, path=str(seg.path))
        return timer_deliver_ms(view.properties, view.store_timestamp)

    def _write_queues(self, batch: ScannedBatch, rows: np.ndarray) -> None:
        if not len(rows):
            return
        records = batch.records
        queue_of = (records["topic_id"][rows].astype(np.int64) << 32) | (
            records["queue_id"][rows].astype(np.int64) & 0xFFFFFFFF)
        order = np.argsort(queue_of, kind="stable")
        rows = rows[order]
        queue_of = queue_of[order]
        codes = self._tags_codes(batch, rows)
        starts = np.flatnonzero(np.r_[True, queue_of[1:] != queue_of[:-1]])
        ends = np.r_[starts[1:], len(rows)]
        for first, stop in zip(starts.tolist(), ends.tolist(), strict=True):
            group = rows[first:stop]
            cq = self.queues.get_or_create(batch.topic(int(records["topic_id"][group[0]])),
                                           int(records["queue_id"][group[0]]))
            cq.put_units(records["queue_offset"][group], records["phys"][group], records["size"][group],
                         codes[first:stop])
