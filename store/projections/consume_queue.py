"""Consume queues: per (topic, queue) arrays of 20-byte units pointing into the commit log."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from store.errors import ReadOnlyStoreError, StoreError
from store.format.layouts import CQ_UNIT
from store.log.mapped_file import MappedFile
from store.log.paths import StorePaths, is_offset_name, offset_to_name

UNIT = CQ_UNIT.size
PRE_BLANK = CQ_UNIT.pack(0, 0x7FFFFFFF, 0)  # fills units before a queue's first real one
UNIT_DTYPE = np.dtype([("phys", ">i8"), ("size", ">i4"), ("tags", ">i8")])


@dataclass(frozen=True, slots=True)
class QueueUnit:
    queue_offset: int
    phys_offset: int
    size: int
    tags_code: int


class ConsumeQueue:
    def __init__(self, topic: str, queue_id: int, directory: Path, file_size: int, *, writable: bool,
                 private: bool = False):
        self.topic = topic
        self.queue_id = queue_id
        self.directory = Path(directory)
        self.file_size = file_size
        self.units_per_file = file_size // UNIT
        self.writable = writable
        self.private = private  # read-only, units added in memory only (store.log.mapped_file)
        self._files: list[MappedFile] = []
        self._first_unit = 0  # queue offset of the first unit of the first file
        self.max_offset = 0
        self.min_offset = 0
        self._load()

    def _load(self) -> None:
        if not self.directory.is_dir():
            return
        names = sorted(n for n in os.listdir(self.directory))
        for name in names:
            if not is_offset_name(name):
                raise StoreError(f"unexpected file {name!r} in consume queue {self.directory}")
        for name in names:
            self._files.append(MappedFile(self.directory / name, self.file_size, writable=self.writable,
                                          private=self.private))
        if not self._files:
            return
        self._first_unit = int(names[0]) // UNIT
        self.max_offset = self._scan_max()
        self.min_offset = self._scan_min()

    def _units(self, f: MappedFile) -> np.ndarray:
        return np.frombuffer(f.buf, dtype=UNIT_DTYPE)

    def _scan_max(self) -> int:
        """Units count up to the first unwritten one (RocketMQ stops at the first empty unit).
        The pages read are released: a large queue is not held in memory for being opened."""
        for i, f in enumerate(self._files):
            units = self._units(f)
            bad = np.flatnonzero((units["size"] <= 0) | (units["phys"] < 0))
            f.release(0, f.size)
            if len(bad):
                return self._first_unit + i * self.units_per_file + int(bad[0])
        return self._first_unit + len(self._files) * self.units_per_file

    def _scan_min(self) -> int:
        offset = self._first_unit
        while offset < self.max_offset:
            unit = self.get(offset)
            if unit is None or unit.size != 0x7FFFFFFF:
                break
            offset += 1
        return offset

    def _file_for(self, queue_offset: int, create: bool) -> tuple[MappedFile, int] | None:
        if queue_offset < self._first_unit:
            return None
        index, within = divmod(queue_offset - self._first_unit, self.units_per_file)
        while create and index >= len(self._files):
            if not self.writable and not self.private:
                raise ReadOnlyStoreError("the store is open read-only")
            if self.writable:
                self.directory.mkdir(parents=True, exist_ok=True)
            base = (self._first_unit + len(self._files) * self.units_per_file) * UNIT
            self._files.append(MappedFile(self.directory / offset_to_name(base), self.file_size,
                                          writable=self.writable, create=True, private=self.private))
        if index >= len(self._files):
            return None
        return self._files[index], within * UNIT

    def get(self, queue_offset: int) -> QueueUnit | None:
        if not self._first_unit <= queue_offset < self.max_offset:
            return None
        located = self._file_for(queue_offset, create=False)
        if located is None:
            return None
        f, pos = located
        phys, size, tags = CQ_UNIT.unpack_from(f.buf, pos)
        return QueueUnit(queue_offset, phys, size, tags)

    def units(self, start: int, count: int) -> Iterator[QueueUnit]:
        offset = max(start, self.min_offset)
        stop = min(self.max_offset, offset + max(0, count))
        while offset < stop:
            unit = self.get(offset)
            if unit is None:
                return
            yield unit
            offset += 1

    def unit_arrays(self) -> Iterator[tuple[int, np.ndarray]]:
        """The units from min_offset to max_offset, as `units` reads them, one array (UNIT_DTYPE,
        a view of the file) per file: (queue offset of its first unit, units). A file's pages are
        released once the caller asks for the next file: its array is not to be kept."""
        offset = self.min_offset
        while offset < self.max_offset:
            located = self._file_for(offset, create=False)
            if located is None:
                return
            f, pos = located
            first = pos // UNIT
            units = self._units(f)[first : first + self.max_offset - offset]
            yield offset, units
            offset += len(units)
            f.release(0, f.size)

    def put(self, queue_offset: int, phys: int, size: int, tags_code: int) -> bool:
        """Write a unit; idempotent: a unit already written at that offset is left alone."""
        if queue_offset < self.max_offset:
            return False
        if not self._files:
            self._first_unit = queue_offset - queue_offset % self.units_per_file
            self.max_offset = self._first_unit
            self.min_offset = queue_offset
        while self.max_offset < queue_offset:  # a gap: fill so later units stay reachable
            f, pos = self._file_for(self.max_offset, create=True)
            f.write(pos, PRE_BLANK)
            self.max_offset += 1
        f, pos = self._file_for(queue_offset, create=True)
        f.write(pos, CQ_UNIT.pack(phys, size, tags_code))
        self.max_offset = queue_offset + 1
        return True

    def put_units(self, offsets: np.ndarray, phys: np.ndarray, sizes: np.ndarray, tags: np.ndarray) -> None:
        """Units for the given queue offsets, as put() one after another would write them (an
        offset already written is left alone, so replaying a batch changes nothing), each run
        of consecutive offsets written at once."""
        if not len(offsets):
            return
        starts = np.flatnonzero(np.r_[True, np.diff(offsets) != 1])
        for a, b in zip(starts.tolist(), np.r_[starts[1:], len(offsets)].tolist(), strict=True):
            self._put_run(offsets[a:b], phys[a:b], sizes[a:b], tags[a:b])

    def _put_run(self, offsets: np.ndarray, phys: np.ndarray, sizes: np.ndarray, tags: np.ndarray) -> None:
        """Units for consecutive queue offsets."""
        written = max(0, min(len(offsets), self.max_offset - int(offsets[0])))
        offsets, phys, sizes, tags = offsets[written:], phys[written:], sizes[written:], tags[written:]
        if not len(offsets):
            return
        if not self._files or int(offsets[0]) != self.max_offset:  # the first file placed, or a gap filled
            self.put(int(offsets[0]), int(phys[0]), int(sizes[0]), int(tags[0]))
            offsets, phys, sizes, tags = offsets[1:], phys[1:], sizes[1:], tags[1:]
            if not len(offsets):
                return
        first = int(offsets[0])
        packed = np.empty(len(offsets), dtype=UNIT_DTYPE)
        packed["phys"], packed["size"], packed["tags"] = phys, sizes, tags
        data = packed.tobytes()
        offset, pos_in_data = first, 0
        while pos_in_data < len(data):
            f, pos = self._file_for(offset, create=True)
            n = min(len(data) - pos_in_data, self.file_size - pos)
            f.write(pos, data[pos_in_data : pos_in_data + n])
            pos_in_data += n
            offset += n // UNIT
        self.max_offset = first + len(offsets)

    def last_unit(self) -> QueueUnit | None:
        return self.get(self.max_offset - 1) if self.max_offset > self.min_offset else None

    def truncate_after_phys(self, end: int) -> int:
        """Drop units that point at or past commit log offset `end`; returns how many."""
        new_max = self.max_offset
        while new_max > self.min_offset:
            unit = self.get(new_max - 1)
            if unit is not None and unit.size != 0x7FFFFFFF and unit.phys_offset + unit.size <= end:
                break
            if unit is not None and unit.size == 0x7FFFFFFF:
                break
            new_max -= 1
        dropped = self.max_offset - new_max
        if dropped:
            if not self.writable:
                raise ReadOnlyStoreError("the store is open read-only")
            for offset in range(new_max, self.max_offset):
                f, pos = self._file_for(offset, create=False)
                f.write(pos, bytes(UNIT))
            self.max_offset = new_max
        return dropped

    def drop_before_phys(self, min_phys: int) -> int:
        """Forget units whose records lie before commit log offset `min_phys` (deleted by
        retention): whole files go, except the last, when the queue is writable. Returns the new
        min offset."""
        while self.writable and len(self._files) > 1:
            last_of_file = self.get(self._first_unit + self.units_per_file - 1)
            if last_of_file is None or last_of_file.phys_offset + last_of_file.size > min_phys:
                break
            f = self._files.pop(0)
            f.close()
            f.path.unlink()
            self._first_unit += self.units_per_file
        self.min_offset = max(self.min_offset, self._first_unit)
        while self.min_offset < self.max_offset:
            unit = self.get(self.min_offset)
            if unit is not None and unit.phys_offset >= min_phys:
                break
            self.min_offset += 1
        return self.min_offset

    def offset_by_time(self, timestamp_ms: int, store_time_of: Callable[[int], int]) -> int:
        """The first queue offset whose record was stored at or after `timestamp_ms`."""
        lo, hi = self.min_offset, self.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            unit = self.get(mid)
            if store_time_of(unit.phys_offset) < timestamp_ms:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def dirty_files(self) -> list[MappedFile]:
        return [f for f in self._files if f.take_dirty()]

    def close(self) -> None:
        for f in self._files:
            f.close()
        self._files.clear()

    def files(self) -> list[Path]:
        return [f.path for f in self._files]


class ConsumeQueues:
    """All consume queues of a store, loaded from disk and created on demand."""

    def __init__(self, paths: StorePaths, file_size: int, *, writable: bool, private: bool = False):
        self._paths = paths
        self._file_size = file_size
        self._writable = writable
        self._private = private
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        root = paths.consumequeue
        if root.is_dir():
            for topic in sorted(os.listdir(root)):
                topic_dir = root / topic
                if not topic_dir.is_dir():
                    continue
                for queue in sorted(os.listdir(topic_dir)):
                    if queue.isdigit():
                        self._open(topic, int(queue))

    def _open(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = ConsumeQueue(topic, queue_id, self._paths.queue_dir(topic, queue_id), self._file_size,
                          writable=self._writable, private=self._private)
        self._queues[(topic, queue_id)] = cq
        return cq

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self._queues.get((topic, queue_id))

    def get_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self._queues.get((topic, queue_id))
        return cq if cq is not None else self._open(topic, queue_id)

    def __iter__(self) -> Iterator[ConsumeQueue]:
        return iter(list(self._queues.values()))

    def topics(self) -> dict[str, list[ConsumeQueue]]:
        result: dict[str, list[ConsumeQueue]] = {}
        for (topic, _), cq in sorted(self._queues.items()):
            result.setdefault(topic, []).append(cq)
        return result

    def dirty_files(self) -> list[MappedFile]:
        """Files of every queue written since the last call, their dirty marks taken."""
        return [f for cq in self._queues.values() for f in cq.dirty_files()]

    def close(self) -> None:
        for cq in self._queues.values():
            cq.close()
        self._queues.clear()
