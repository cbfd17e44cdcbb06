"""Index files in RocketMQ's layout: a hash slot table chaining entries for topic#key."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from store.errors import ReadOnlyStoreError, StoreError
from store.format.javahash import index_key_hash
from store.format.layouts import INDEX_ENTRY, INDEX_ENTRY_FIELDS, INDEX_HEADER, INDEX_SLOT, field_offset
from store.format.recordio import index_put, index_reachable
from store.log.mapped_file import MappedFile
from store.log.paths import index_name_for, is_index_name

ENTRY_DTYPE = np.dtype([(name, ">" + code) for name, code in INDEX_ENTRY_FIELDS])


def index_key(topic: str, key: str) -> str:
    return f"{topic}#{key}"


class IndexFile:
    def __init__(self, path: Path, slots: int, entries: int, *, writable: bool, create: bool = False,
                 prev_end_timestamp: int = 0, prev_end_phys: int = 0, private: bool = False):
        self.slots = slots
        self.entries = entries
        size = INDEX_HEADER.size + slots * INDEX_SLOT.size + entries * INDEX_ENTRY.size
        self.file = MappedFile(path, size, writable=writable, create=create, private=private)
        self._entries_at = INDEX_HEADER.size + slots * INDEX_SLOT.size
        self._layout = (INDEX_HEADER.size, INDEX_SLOT.size, self._entries_at, INDEX_ENTRY.size,
                        *(field_offset(INDEX_ENTRY_FIELDS, name)
                          for name in ("key_hash", "phys_offset", "time_diff", "prev_index")))
        (self.begin_timestamp, self.end_timestamp, self.begin_phys, self.end_phys,
         self.slot_count, self.index_count) = INDEX_HEADER.unpack_from(self.file.buf, 0)
        if self.index_count <= 0:
            self.index_count = 1
        if writable and not create and self.index_count > entries:
            raise StoreError(f"index file {path.name} is damaged: its header counts {self.index_count} entries, "
                             f"the file holds at most {entries}. `mqlens store check` lists the damage, and "
                             "`mqlens pipeline run projections` rebuilds the index files from the commit log")
        if create:
            self.begin_timestamp = self.end_timestamp = prev_end_timestamp
            self.begin_phys = self.end_phys = prev_end_phys
            self._write_header()

    @property
    def path(self) -> Path:
        return self.file.path

    @property
    def is_full(self) -> bool:
        return self.index_count >= self.entries

    @property
    def used_entries(self) -> int:
        return self.index_count - 1

    def _write_header(self) -> None:
        self.file.write(0, INDEX_HEADER.pack(self.begin_timestamp, self.end_timestamp, self.begin_phys,
                                             self.end_phys, self.slot_count, self.index_count))

    def put_many(self, hashes: np.ndarray, phys: np.ndarray, times: np.ndarray) -> int:
        """putKey for many keys in order. Returns how many fit in this file."""
        count, self.index_count, new_slots, self.begin_timestamp, self.begin_phys = index_put(
            self.file.buf, self._layout, self.slots, self.entries, self.index_count, self.begin_timestamp,
            self.begin_phys, np.ascontiguousarray(hashes, dtype=np.int64),
            np.ascontiguousarray(phys, dtype=np.int64), np.ascontiguousarray(times, dtype=np.int64))
        if count:
            self.slot_count += new_slots
            self.end_phys = int(phys[count - 1])
            self.end_timestamp = int(times[count - 1])
            self.file.mark_dirty(INDEX_HEADER.size, self._entries_at + self.index_count * INDEX_ENTRY.size)
            self._write_header()
        return count

    def entry(self, number: int) -> tuple[int, int, int, int]:
        return INDEX_ENTRY.unpack_from(self.file.buf, self._entries_at + number * INDEX_ENTRY.size)

    def slot(self, slot: int) -> int:
        return INDEX_SLOT.unpack_from(self.file.buf, INDEX_HEADER.size + slot * INDEX_SLOT.size)[0]

    def used(self) -> np.ndarray:
        """The used entries (ENTRY_DTYPE), entry 1 first."""
        return np.frombuffer(self.file.buf, dtype=ENTRY_DTYPE, count=self.used_entries,
                             offset=self._entries_at + INDEX_ENTRY.size)

    def rebuild_slots(self) -> None:
        """Point every slot at its newest counted entry. A writer killed in the middle of a batch
        leaves entries and slot heads its header never counted; the next keys overwrite those
        entries, and a slot still naming one would lead its chain into another key's (RocketMQ
        deletes such a file and rebuilds it; counted entries are intact, so only the heads go)."""
        found = self.used()
        heads = np.zeros(self.slots, dtype=np.int64)
        np.maximum.at(heads, found["key_hash"].astype(np.int64) % self.slots,
                      np.arange(1, len(found) + 1, dtype=np.int64))
        table = np.frombuffer(self.file.buf, dtype=">i4", count=self.slots, offset=INDEX_HEADER.size)
        if not np.array_equal(table, heads):
            table[:] = heads
            self.file.mark_dirty(INDEX_HEADER.size, self._entries_at)
            self.slot_count = int(np.count_nonzero(heads))
            self._write_header()

    def numbered_from(self, first: int, stop: int) -> np.ndarray:
        """The entries (ENTRY_DTYPE) numbered `first` to `stop` (excluded), a view of the file; all inside it."""
        return np.frombuffer(self.file.buf, dtype=ENTRY_DTYPE, count=max(0, stop - first),
                             offset=self._entries_at + first * INDEX_ENTRY.size)

    def reachable_flags(self) -> np.ndarray:
        """One byte per entry number, from 0 on: 1 for an entry `select` can yield for a query
        from time 0 on, one on the chain from the slot of its own hash, by select's rules. Entry
        `index_count`, just past the counted ones, is among them when a slot's chain leads to it,
        as select finds it."""
        reachable = index_reachable(self.file.buf, self._layout, self.slots, self.index_count, self.begin_timestamp)
        return np.frombuffer(reachable, dtype=np.uint8)

    def reachable(self) -> np.ndarray:
        """The numbers of the entries reachable_flags marks."""
        return np.flatnonzero(self.reachable_flags())

    def chains_as_put(self, window: int) -> bool:
        """Whether the chains are those put_many builds: each counted entry inside the file
        chains to the one before it of the same slot (0 for the first), each slot with entries
        heads its last one, and no entry is dated before time 0. Then `select` from time 0 on
        reaches every counted entry. Read in order, `window` entries or slots at a time, each
        window's pages released: not the random reads of reachable_flags' walk."""
        used = self.used_entries
        if used > self.entries - 1:
            return False
        last = np.zeros(self.slots, dtype=np.int32)  # each slot's latest entry so far
        for first in range(1, used + 1, window):
            entries = self.numbered_from(first, min(first + window, used + 1))
            earliest = int(entries["time_diff"].min())
            if earliest < 0 or self.begin_timestamp + earliest * 1000 < 0:
                return False
            slots = entries["key_hash"].astype(np.int64) % self.slots
            order = np.argsort(slots, kind="stable")
            slots = slots[order]
            numbers = order.astype(np.int32) + first
            opens = np.r_[True, slots[1:] != slots[:-1]]  # the first of its slot in the window
            if not np.array_equal(entries["prev_index"][order], np.where(opens, last[slots], np.r_[0, numbers[:-1]])):
                return False
            closes = np.r_[opens[1:], True]
            last[slots[closes]] = numbers[closes]
            self.file.release(0, self._entries_at + (first + len(entries)) * INDEX_ENTRY.size)
        table = np.frombuffer(self.file.buf, dtype=">i4", count=self.slots, offset=INDEX_HEADER.size)
        for first in range(0, self.slots, window):
            heads, latest = table[first : first + window], last[first : first + window]
            if not np.array_equal(heads[latest != 0], latest[latest != 0]):
                return False
            self.file.release(0, INDEX_HEADER.size + (first + len(heads)) * INDEX_SLOT.size)
        return True

    def entries_numbered(self, numbers: np.ndarray) -> np.ndarray:
        """The entries (ENTRY_DTYPE) of these numbers, each inside the file."""
        count = int(numbers.max()) + 1 if len(numbers) else 0
        return np.frombuffer(self.file.buf, dtype=ENTRY_DTYPE, count=count, offset=self._entries_at)[numbers]

    def time_matches(self, begin: int, end: int) -> bool:
        fb, fe = self.begin_timestamp, self.end_timestamp
        return (begin < fb and end > fe) or fb <= begin <= fe or fb <= end <= fe

    def select(self, key_hash: int, begin: int, end: int) -> Iterator[int]:
        """Physical offsets whose entry hash equals `key_hash` inside [begin, end], newest first."""
        count = self.index_count
        number = self.slot(key_hash % self.slots)
        if number <= 0 or number > count or count <= 1:
            return
        seen = set()
        while True:
            entry_hash, phys, diff, prev = self.entry(number)
            if diff < 0:
                return
            t = self.begin_timestamp + diff * 1000
            if entry_hash == key_hash and begin <= t <= end:
                yield phys
            seen.add(number)
            if prev <= 0 or prev > count or prev in seen or t < begin:
                return
            number = prev

    def release_entries(self, keep_bytes: int) -> None:
        """Unmap this process's pages of the entries, but the newest `keep_bytes` of them (see
        MappedFile.release). The slot table stays: every new key and every lookup reads it."""
        written = self._entries_at + self.index_count * INDEX_ENTRY.size
        self.file.release(self._entries_at, written - keep_bytes)

    def close(self) -> None:
        self.file.close()


class IndexService:
    """The index directory: files oldest to newest, the newest one taking new keys."""

    def __init__(self, directory: Path, slots: int, entries: int, clock, *, writable: bool, private: bool = False):
        self.directory = Path(directory)
        self.slots = slots
        self.entries = entries
        self.clock = clock
        self.writable = writable
        self.private = private  # read-only, keys added in memory only (store.log.mapped_file)
        self.files: list[IndexFile] = []
        if self.directory.is_dir():
            for name in sorted(os.listdir(self.directory)):
                if is_index_name(name):  # RocketMQ skips non-numeric names
                    self.files.append(IndexFile(self.directory / name, slots, entries, writable=writable,
                                                private=private))

    @property
    def end_phys(self) -> int:
        return self.files[-1].end_phys if self.files else 0

    def _writable_file(self) -> IndexFile:
        if not self.writable and not self.private:
            raise ReadOnlyStoreError("the store is open read-only")
        last = self.files[-1] if self.files else None
        if last is not None and not last.is_full:
            return last
        if self.writable:
            self.directory.mkdir(parents=True, exist_ok=True)
        now = self.clock.now_ms()
        name = index_name_for(now)
        while (self.directory / name).exists() or (last is not None and name <= last.path.name):
            now += 1
            name = index_name_for(now)
        new = IndexFile(self.directory / name, self.slots, self.entries, writable=self.writable, create=True,
                        prev_end_timestamp=last.end_timestamp if last else 0,
                        prev_end_phys=last.end_phys if last else 0, private=self.private)
        self.files.append(new)
        return new

    def put_keys(self, topic: str, keys: list[str], phys: int, store_timestamp: int) -> None:
        """Index one record under topic#key for each key (IndexService.buildIndex)."""
        self.put_hashes(np.array([index_key_hash(index_key(topic, key)) for key in keys], dtype=np.int64),
                        np.full(len(keys), phys, dtype=np.int64), np.full(len(keys), store_timestamp, dtype=np.int64))

    def put_hashes(self, hashes: np.ndarray, phys: np.ndarray, times: np.ndarray) -> None:
        """Index keys given by their hash, in commit log order; keys of records the index
        already covers are skipped, so replaying a batch changes nothing."""
        end = self.end_phys
        fresh = phys >= end
        if len(phys) and phys[0] <= end <= phys[-1]:  # the newest record indexed may be anywhere in the batch
            fresh &= self._not_yet_indexed_at(end, hashes, phys)
        if not fresh.all():
            hashes, phys, times = hashes[fresh], phys[fresh], times[fresh]
        done = 0
        while done < len(hashes):
            done += self._writable_file().put_many(hashes[done:], phys[done:], times[done:])

    def _not_yet_indexed_at(self, end: int, hashes: np.ndarray, phys: np.ndarray) -> np.ndarray:
        """False for the keys of the record at `end` (the newest one indexed) that are already in:
        a replay offers that record again, and a file may have filled in the middle of its keys."""
        present = Counter(self._hashes_at(end))
        keep = np.ones(len(phys), dtype=bool)
        for row in np.flatnonzero(phys == end).tolist():
            h = int(hashes[row])
            if present[h]:
                present[h] -= 1
                keep[row] = False
        return keep

    def _hashes_at(self, phys: int) -> list[int]:
        """Hashes of the newest entries pointing at `phys`, through every file they span."""
        found = []
        for f in reversed(self.files):
            for number in range(f.used_entries, 0, -1):
                entry_hash, entry_phys, _, _ = f.entry(number)
                if entry_phys != phys:
                    return found
                found.append(entry_hash)
            if f.begin_phys != phys:
                break
        return found

    def key_hashes_since(self, since_ms: int) -> np.ndarray:
        """Hashes of the keys indexed at or after `since_ms` (entry times are whole seconds: a
        second earlier too)."""
        parts = [np.zeros(0, dtype=np.int64)]
        for f in self.files:
            if f.used_entries and f.end_timestamp >= since_ms - 1000:
                found = f.used()
                times = f.begin_timestamp + found["time_diff"].astype(np.int64) * 1000
                parts.append(found["key_hash"][times >= since_ms - 1000].astype(np.int64))
        return np.concatenate(parts)

    def query(self, topic: str, key: str, begin: int = 0, end: int = 2**63 - 1) -> Iterator[int]:
        """Candidate physical offsets for topic#key, newest first. Only the hash is compared:
        callers re-check the records' real keys."""
        h = index_key_hash(index_key(topic, key))
        seen: set[int] = set()
        for f in reversed(self.files):
            if f.time_matches(begin, end):
                for phys in f.select(h, begin, end):
                    if phys not in seen:
                        seen.add(phys)
                        yield phys
            if f.begin_timestamp < begin:
                return

    def truncate_after_phys(self, end: int) -> int | None:
        """Delete index files holding entries at or past `end`. Returns the commit log offset
        from which the index must be rebuilt, or None when nothing was removed."""
        rebuild_from = None
        while self.files and self.files[-1].end_phys >= end and self.files[-1].used_entries > 0:
            if not self.writable:
                raise ReadOnlyStoreError("the store is open read-only")
            dropped = self.files.pop()
            dropped.close()
            dropped.path.unlink()
            rebuild_from = self.files[-1].end_phys if self.files else 0
        return rebuild_from

    def repair_after_crash(self) -> None:
        """After an abnormal shutdown: the newest file may hold a killed batch's slot heads."""
        if self.files and self.writable:
            self.files[-1].rebuild_slots()

    def drop_before_phys(self, min_phys: int) -> int:
        """Delete index files whose entries all point before `min_phys`, never the newest."""
        dropped = 0
        while len(self.files) > 1 and self.files[0].end_phys < min_phys:
            f = self.files.pop(0)
            f.close()
            f.path.unlink()
            dropped += 1
        return dropped

    def release_pages(self, keep_bytes: int) -> None:
        """Unmap this process's pages of the index files (MappedFile.release): those of the entries
        but the newest `keep_bytes`, and every page of a full file."""
        *full, newest = self.files or [None]
        for f in full:
            f.file.release(0, f.file.size)
        if newest is not None:
            newest.release_entries(keep_bytes)

    def dirty_files(self) -> list[MappedFile]:
        """Index files written since the last call (a full one too), their dirty marks taken."""
        return [f.file for f in self.files if f.file.take_dirty()]

    def close(self) -> None:
        for f in self.files:
            f.close()
        self.files.clear()

