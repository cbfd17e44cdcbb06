"""Stage one of the projections job, in a Spark task: one commit log split scanned by the store's
compiled scanner (store.projections.dispatch.BatchScanner, the code the store's own dispatch
runs) into what that dispatch makes of it, kept in two part files for stage two:

- `<split>.units.npy`: the consume queue units of the split (QUEUE_UNIT), grouped by queue in
  the order of the summary's queue table, each queue's units in commit log order;
- `<split>.keys.npy`: the index entries of the split in the order the dispatch puts them (commit
  log order, a record's unique key before its keys), as KEY_ROWS rows of int64 (each row
  contiguous, so the index writer takes them as they lie).

Records are verified as the data source verifies them: a compiled CRC walk vouches for a run
of records before they are scanned, and every scanned record must hold its own offset. A
record the compiled code leaves (damaged, torn, not UTF-8) is read by the Python walk's step,
which raises, skips and reports, or cuts a torn tail exactly as the data source does; a split
where a record names another offset is read again wholly by that Python walk."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.progress import write_task_progress
from pipeline.segments import Segment, WalkReport, ends_here, first_boundary, mapped, step, walk
from store.format import codec, topics
from store.format.codec import TRANSACTION_PREPARED, TRANSACTION_ROLLBACK, TRANSACTION_TYPE_MASK
from store.format.delay_levels import DelayLevels
from store.format.delivery_time import timer_deliver_ms
from store.format.layouts import BLANK
from store.format.recordio import SCAN_BLANK, SCAN_SLOW, crc_walk, record_layout
from store.projections.dispatch import BatchScanner, ScannedBatch, tags_codes

QUEUE_UNIT = np.dtype([("queue_offset", "<i8"), ("phys", "<i8"), ("size", "<i4"), ("tags_code", "<i8")])
KEY_ROWS = ("hash", "phys", "store_ts")  # the rows of a keys file, one int64 array each
WALK_WINDOW = 16 * 1024 * 1024  # bytes the CRC walk vouches for before they are scanned


@dataclass(frozen=True)
class SplitTask:
    """A split of a segment (records whose first byte lies in [start, end)) and where its part
    files go."""

    name: str
    segment: Segment
    start: int
    end: int
    is_tail: bool


@dataclass(frozen=True)
class PartSummary:
    name: str
    records: int
    scheduled: int  # records in SCHEDULE_TOPIC_XXXX (the delay table matters only if some)
    queues: tuple[tuple[str, int, int], ...]  # (topic, queue id, units) in the order of the units file
    keys: int

    @property
    def units(self) -> int:
        return sum(count for _, _, count in self.queues)


def part_path(parts_dir: Path, name: str, kind: str) -> Path:
    return Path(parts_dir) / f"{name}.{kind}.npy"


def _view_of(msg: codec.StoredMessage) -> codec.DispatchView:
    return codec.DispatchView(msg.size, msg.queue_id, msg.queue_offset, msg.phys_offset, msg.sys_flag,
                              msg.store_timestamp, msg.topic, msg.properties)


def _holds_own_offsets(found: np.ndarray, at: int) -> bool:
    """Whether records scanned one after another from log offset `at` each hold their own offset."""
    if not len(found):
        return True
    expected = at + np.concatenate(([0], np.cumsum(found["size"][:-1], dtype=np.int64)))
    return bool((found["phys"] == expected).all())


def scan_compiled(buf, task: SplitTask, skip_corrupt: bool, report: WalkReport) -> BatchScanner | None:
    """The split's records, or None when one of them names another offset than its own (the
    caller then reads the split with the Python walk, which reports it as the data source does)."""
    segment, size = task.segment, len(buf)
    stop = min(task.end, size)
    layout = record_layout()
    scanner = BatchScanner()
    pos = first_boundary(buf, segment, task.start, stop)
    verified = until = -1  # the CRC walk vouched for the records in [.., verified); it was asked up to `until`
    while pos is not None and pos < stop and pos + BLANK.size <= size and not ends_here(buf, pos):
        if pos >= verified:
            until = min(stop, pos + WALK_WINDOW)
            verified = crc_walk(buf, pos, size, layout, until)
        status = SCAN_SLOW
        if verified > pos:
            before = scanner.count
            status, reached = scanner.scan(buf, pos, verified, verified - pos)
            if not _holds_own_offsets(scanner.since(before), segment.base + pos):
                return None
            report.records += scanner.count - before
            pos = reached
        if status == SCAN_BLANK or pos >= stop or pos + BLANK.size > size or ends_here(buf, pos):
            break
        if status == SCAN_SLOW or (pos >= verified and verified < until):  # left to the Python walk
            msg, pos = step(buf, segment, pos, skip_corrupt=skip_corrupt, is_tail=task.is_tail, report=report)
            if msg is not None:
                scanner.add_decoded(_view_of(msg))
    return scanner


def scan_reference(task: SplitTask, skip_corrupt: bool, report: WalkReport) -> BatchScanner:
    """The split's records through the Python walk, one at a time."""
    scanner = BatchScanner()
    for msg in walk(task.segment, task.start, task.end, skip_corrupt=skip_corrupt, is_tail=task.is_tail,
                    report=report):
        scanner.add_decoded(_view_of(msg))
    return scanner


def queue_units(batch: ScannedBatch, delay_levels: DelayLevels, buf, base: int) -> tuple[np.ndarray, list]:
    """The units of the records that get one, grouped by queue (first seen first), and the queue
    table (topic, queue id, units)."""
    records = batch.records
    kind = records["sys_flag"] & TRANSACTION_TYPE_MASK
    rows = np.flatnonzero((kind != TRANSACTION_PREPARED) & (kind != TRANSACTION_ROLLBACK))
    queue_of = (records["topic_id"][rows].astype(np.int64) << 32) | (
        records["queue_id"][rows].astype(np.int64) & 0xFFFFFFFF)
    order = np.argsort(queue_of, kind="stable")
    rows, queue_of = rows[order], queue_of[order]

    def timer_at(phys: int) -> int:
        view = codec.decode_for_dispatch(buf, phys - base)
        return timer_deliver_ms(view.properties, view.store_timestamp)

    units = np.empty(len(rows), dtype=QUEUE_UNIT)
    units["queue_offset"], units["phys"], units["size"] = (
        records["queue_offset"][rows], records["phys"][rows], records["size"][rows])
    units["tags_code"] = tags_codes(batch, rows, delay_levels, timer_at)[0]
    starts = np.flatnonzero(np.r_[True, queue_of[1:] != queue_of[:-1]]) if len(rows) else np.array([], dtype=int)
    counts = np.diff(np.r_[starts, len(rows)])
    table = [(batch.topic(int(records["topic_id"][rows[s]])), int(records["queue_id"][rows[s]]), int(n))
             for s, n in zip(starts.tolist(), counts.tolist(), strict=True)]
    return units, table


def index_keys(batch: ScannedBatch) -> np.ndarray:
    """The index entries of the records the index takes (all but transaction rollbacks), as
    KEY_ROWS rows."""
    records, keys = batch.records, batch.keys
    rows = keys["record"]
    indexed = (records["sys_flag"][rows] & TRANSACTION_TYPE_MASK) != TRANSACTION_ROLLBACK
    rows = rows[indexed]
    entries = np.empty((len(KEY_ROWS), len(rows)), dtype=np.int64)
    entries[0], entries[1], entries[2] = keys["hash"][indexed], records["phys"][rows], records["store_ts"][rows]
    return entries


def _save(path: Path, array: np.ndarray) -> None:
    """Written whole or not at all: a task tried again replaces what an earlier attempt left."""
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with open(temporary, "wb") as file:
        np.save(file, array, allow_pickle=False)
    os.replace(temporary, path)


def project_split(task: SplitTask, parts_dir: str, delay_levels: DelayLevels, skip_corrupt: bool,
                  progress_dir: str | None) -> PartSummary:
    """Spark task body: scan the split, write its part files, return its summary."""
    report = WalkReport()
    if task.segment.size == 0:
        return PartSummary(task.name, 0, 0, (), 0)
    with mapped(task.segment) as buf:
        scanner = scan_compiled(buf, task, skip_corrupt, report)
        if scanner is None:
            report = WalkReport()
            scanner = scan_reference(task, skip_corrupt, report)
        batch = scanner.batch()
        units, table = queue_units(batch, delay_levels, buf, task.segment.base)
    keys = index_keys(batch)
    _save(part_path(Path(parts_dir), task.name, "units"), units)
    _save(part_path(Path(parts_dir), task.name, "keys"), keys)
    if progress_dir:
        write_task_progress(progress_dir, task.name, report, done=True)
    schedule_id = batch.topic_ids.get(topics.SCHEDULE_TOPIC.encode())
    scheduled = 0 if schedule_id is None else int((batch.records["topic_id"] == schedule_id).sum())
    return PartSummary(task.name, len(batch.records), scheduled, tuple(table), keys.shape[1])
