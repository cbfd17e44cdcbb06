"""Stage two of the projections job, in Spark tasks: consume queue and index files written from
the part files of stage one (pipeline.projection_scan) with the store's own writers
(store.projections.consume_queue.ConsumeQueue, store.projections.index.IndexFile), so every
byte follows the store's rules: unit layout, pre-blank filling, file names and sizes, slot
chains, header timestamps and offsets, entry numbering.

A task owns whole queue directories or one whole index file; it removes what an earlier attempt
of it may have left before writing (so a retried task starts clean)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path

import numpy as np

from pipeline.projection_scan import PartSummary, part_path
from store.log.geometry import StoreGeometry
from store.log.paths import StorePaths, index_name_for
from store.projections.consume_queue import ConsumeQueue
from store.projections.index import IndexFile


@dataclass(frozen=True)
class IndexFilePlan:
    """What one index file needs besides its entries: its name, and the end timestamp and
    offset of the file before it, which a new file's header starts from."""

    name: str
    prev_end_timestamp: int
    prev_end_phys: int


@dataclass(frozen=True)
class QueueWrite:
    """Write these queues (topic, queue id) from the parts."""

    queues: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class IndexWrite:
    """Write index file `number` with the keys numbered [first, stop) in commit log order."""

    number: int
    first: int
    stop: int
    plan: IndexFilePlan


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


class PartKeys:
    """The index keys of every part in commit log order, numbered from 0, read where they lie."""

    def __init__(self, parts_dir: Path, parts: list[PartSummary]):
        self.parts_dir = Path(parts_dir)
        self.parts = parts
        self.starts = [0, *accumulate(p.keys for p in parts)]

    @property
    def total(self) -> int:
        return self.starts[-1]

    def pieces(self, first: int, stop: int) -> Iterator[np.ndarray]:
        """Keys numbered [first, stop) as they lie in the parts, a (hash, phys, store_ts) rows
        array per part, in order."""
        for part, begin, end in zip(self.parts, self.starts, self.starts[1:], strict=False):
            if end <= first or begin >= stop or not part.keys:
                continue
            keys = np.load(part_path(self.parts_dir, part.name, "keys"), mmap_mode="r")
            yield keys[:, max(first, begin) - begin: min(stop, end) - begin]

    def key(self, number: int) -> tuple[int, int, int]:
        """(hash, phys, store_ts) of key `number`."""
        piece = next(self.pieces(number, number + 1))
        return int(piece[0, 0]), int(piece[1, 0]), int(piece[2, 0])


def plan_index_writes(keys: PartKeys, per_file: int) -> list[IndexWrite]:
    """One write per index file: the keys each gets (per_file each but the last) and its plan,
    from the store time of its first key and the offset and time of the key before it."""
    files = -(-keys.total // per_file)
    firsts, previous_ends = [], []
    for number in range(files):
        firsts.append(keys.key(number * per_file)[2])
        if number:
            previous_ends.append(keys.key(number * per_file - 1)[1:])
        else:
            previous_ends.append((0, 0))
    plans = plan_index_files(firsts, previous_ends)
    return [IndexWrite(n, n * per_file, min(keys.total, (n + 1) * per_file), plans[n]) for n in range(files)]


def plan_queue_writes(parts: list[PartSummary], tasks: int) -> list[QueueWrite]:
    """The queues spread over at most `tasks` writes, each about as many units (largest first)."""
    units: dict[tuple[str, int], int] = {}
    for part in parts:
        for topic, queue_id, count in part.queues:
            units[(topic, queue_id)] = units.get((topic, queue_id), 0) + count
    groups: list[list[tuple[str, int]]] = [[] for _ in range(max(1, min(tasks, len(units))))]
    loads = [0] * len(groups)
    for queue, count in sorted(units.items(), key=lambda item: (-item[1], item[0])):
        lightest = loads.index(min(loads))
        groups[lightest].append(queue)
        loads[lightest] += count
    return [QueueWrite(tuple(sorted(group))) for group in groups if group]


def write_queues(write: QueueWrite, parts_dir: str, parts: list[PartSummary], root: str,
                 cq_file_size: int) -> list[tuple[str, int, int]]:
    """Spark task body: each queue's units from every part in commit log order through
    ConsumeQueue.put_units, as the store's dispatch puts them. Returns (topic, queue id, units
    from the first to the last, pre-blank gaps included) per queue."""
    wanted = set(write.queues)
    gathered: dict[tuple[str, int], list[np.ndarray]] = {queue: [] for queue in write.queues}
    for part in parts:
        if not any((topic, queue_id) in wanted for topic, queue_id, _ in part.queues):
            continue
        units = np.load(part_path(Path(parts_dir), part.name, "units"), mmap_mode="r")
        at = 0
        for topic, queue_id, count in part.queues:
            if (topic, queue_id) in wanted:
                gathered[(topic, queue_id)].append(units[at: at + count])
            at += count
    paths = StorePaths(Path(root))
    written = []
    for (topic, queue_id), pieces in gathered.items():
        units = np.concatenate(pieces)
        directory = paths.queue_dir(topic, queue_id)
        shutil.rmtree(directory, ignore_errors=True)
        queue = ConsumeQueue(topic, queue_id, directory, cq_file_size, writable=True)
        try:
            queue.put_units(units["queue_offset"], units["phys"], units["size"], units["tags_code"])
        finally:
            queue.close()
        written.append((topic, queue_id, queue.max_offset - queue.min_offset))
    return written


def write_index_file(write: IndexWrite, parts_dir: str, parts: list[PartSummary], directory: str, slots: int,
                     entries: int) -> tuple[int, int]:
    """Spark task body: index file `write.number`, created as the store creates it after the
    file before it, given its keys through IndexFile.put_many in order. Returns (its number,
    the keys it took)."""
    path = Path(directory) / write.plan.name
    path.unlink(missing_ok=True)
    index = IndexFile(path, slots, entries, writable=True, create=True,
                      prev_end_timestamp=write.plan.prev_end_timestamp, prev_end_phys=write.plan.prev_end_phys)
    taken = wanted = 0
    try:
        for piece in PartKeys(Path(parts_dir), parts).pieces(write.first, write.stop):
            wanted += piece.shape[1]
            taken += index.put_many(piece[0], piece[1], piece[2])
    finally:
        index.close()
    if taken != wanted:
        raise RuntimeError(f"index file {path.name} filled up with {wanted - taken} keys still to put: "
                           "the keys were numbered for another geometry")
    return write.number, taken


def write_planned(write: QueueWrite | IndexWrite, parts_dir: str, parts: list[PartSummary], root: str,
                  geometry: StoreGeometry) -> tuple[str, object]:
    """Spark task body for either kind of write: ("index", (number, keys)) or ("queues", rows)."""
    if isinstance(write, IndexWrite):
        return "index", write_index_file(write, parts_dir, parts, str(StorePaths(Path(root)).index),
                                         geometry.index_slots, geometry.index_entries)
    return "queues", write_queues(write, parts_dir, parts, root, geometry.cq_file_size)
