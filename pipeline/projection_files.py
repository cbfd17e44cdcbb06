"""Consume queue and index files written from sorted Arrow batches inside Spark tasks, with the
store's own writers (store.consume_queue.ConsumeQueue, store.index.IndexFile), so every byte
follows the store's rules: unit layout, pre-blank filling, file names and sizes, slot chains,
header timestamps and offsets, entry numbering.

A task owns whole queue directories and whole index files; it removes what an earlier attempt
of it may have left before writing (so a retried task starts clean)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from store.log.paths import StorePaths, index_name_for
from store.projections.consume_queue import ConsumeQueue
from store.projections.index import IndexFile

QUEUE_SUMMARY_DDL = "topic STRING, queue_id INT, units BIGINT"
QUEUE_SUMMARY_SCHEMA = pa.schema([("topic", pa.string()), ("queue_id", pa.int32()), ("units", pa.int64())])
INDEX_SUMMARY_DDL = "file_no BIGINT, entries BIGINT"
INDEX_SUMMARY_SCHEMA = pa.schema([("file_no", pa.int64()), ("entries", pa.int64())])


def _runs(*keys: np.ndarray) -> Iterator[tuple[int, int]]:
    """[start, stop) of each run of equal key tuples in arrays sorted by those keys."""
    n = len(keys[0])
    if not n:
        return
    changed = np.zeros(n - 1, dtype=bool)
    for key in keys:
        changed |= key[1:] != key[:-1]
    starts = np.r_[0, np.flatnonzero(changed) + 1]
    yield from zip(starts.tolist(), np.r_[starts[1:], n].tolist(), strict=True)


def write_queue_files(batches: Iterator[pa.RecordBatch], root: str, cq_file_size: int) -> Iterator[pa.RecordBatch]:
    """mapInArrow function over units sorted by (topic, queue_id, phys_offset), a queue never split
    between tasks: each queue's units go to ConsumeQueue.put_units in commit log order, as the
    store's dispatch puts them. Yields one summary row per queue: its units from the first to
    the last (pre-blank gaps included)."""
    paths = StorePaths(Path(root))
    queue: ConsumeQueue | None = None
    done: list[ConsumeQueue] = []
    try:
        for batch in batches:
            topics = batch.column("topic").to_numpy(zero_copy_only=False)
            queue_ids = batch.column("queue_id").to_numpy()
            offsets, phys, sizes, codes = (batch.column(name).to_numpy() for name in (
                "queue_offset", "phys_offset", "size", "tags_code"))
            for start, stop in _runs(topics, queue_ids):
                topic, queue_id = str(topics[start]), int(queue_ids[start])
                if queue is None or (queue.topic, queue.queue_id) != (topic, queue_id):
                    if queue is not None:
                        queue.close()
                        done.append(queue)
                    directory = paths.queue_dir(topic, queue_id)
                    shutil.rmtree(directory, ignore_errors=True)
                    queue = ConsumeQueue(topic, queue_id, directory, cq_file_size, writable=True)
                queue.put_units(offsets[start:stop], phys[start:stop], sizes[start:stop], codes[start:stop])
    finally:
        if queue is not None:
            queue.close()
            done.append(queue)
    if done:
        yield pa.RecordBatch.from_pylist(
            [{"topic": q.topic, "queue_id": q.queue_id, "units": q.max_offset - q.min_offset} for q in done],
            schema=QUEUE_SUMMARY_SCHEMA)


@dataclass(frozen=True)
class IndexFilePlan:
    """What one index file needs besides its entries: its name, and the end timestamp and
    offset of the file before it, which a new file's header starts from."""

    name: str
    prev_end_timestamp: int
    prev_end_phys: int


def plan_index_files(first_timestamps: list[int], previous_ends: list[tuple[int, int]]) -> list[IndexFilePlan]:
    """Plans for files 0..n-1, given each file's first key store timestamp and the key before it
    as (phys_offset, store_timestamp), (0, 0) for the first file. A file is named after the store
    time of its first key, in the local time zone, as RocketMQ names a file by the time it creates
    it (when the first key that needs it arrives); a name that would not sort after the one before
    is moved a millisecond on until it does, as the store does with a clock that repeats or goes back."""
    plans = []
    previous_name, previous_ms = "", -1
    for first_ms, (end_phys, end_timestamp) in zip(first_timestamps, previous_ends, strict=True):
        ms = max(first_ms, previous_ms + 1)
        name = index_name_for(ms)
        while name <= previous_name:
            ms += 1
            name = index_name_for(ms)
        plans.append(IndexFilePlan(name, prev_end_timestamp=end_timestamp, prev_end_phys=end_phys))
        previous_name, previous_ms = name, ms
    return plans


def write_index_files(batches: Iterator[pa.RecordBatch], directory: str, slots: int, entries: int,
                      plans: list[IndexFilePlan]) -> Iterator[pa.RecordBatch]:
    """mapInArrow function over index entries sorted by (file_no, ordinal), a file never split
    between tasks: each file is created as the store creates it after the file before it, and
    gets its keys through IndexFile.put_many in order. Yields one summary row per file."""
    current: IndexFile | None = None
    current_no = -1
    written: dict[int, int] = {}
    try:
        for batch in batches:
            numbers = batch.column("file_no").to_numpy()
            hashes, phys, times = (batch.column(name).to_numpy().astype(np.int64) for name in (
                "key_hash", "phys_offset", "store_timestamp"))
            for start, stop in _runs(numbers):
                number = int(numbers[start])
                if number != current_no:
                    if current is not None:
                        current.close()
                    plan = plans[number]
                    path = Path(directory) / plan.name
                    path.unlink(missing_ok=True)
                    current = IndexFile(path, slots, entries, writable=True, create=True,
                                        prev_end_timestamp=plan.prev_end_timestamp, prev_end_phys=plan.prev_end_phys)
                    current_no = number
                    written[number] = 0
                taken = current.put_many(hashes[start:stop], phys[start:stop], times[start:stop])
                if taken != stop - start:
                    raise RuntimeError(f"index file {current.path.name} filled up with {stop - start - taken} "
                                       "keys still to put: the entries were numbered for another geometry")
                written[number] += taken
    finally:
        if current is not None:
            current.close()
    if written:
        yield pa.RecordBatch.from_pylist([{"file_no": n, "entries": c} for n, c in written.items()],
                                         schema=INDEX_SUMMARY_SCHEMA)
