"""The commit log: fixed-size segments named by the offset of their first byte."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from store.errors import CorruptRecordError, ReadOnlyStoreError, StoreError
from store.format import codec
from store.format.codec import StoredMessage
from store.format.hosts import HostAddress
from store.format.layouts import BLANK, BLANK_MIN_LENGTH, MAGIC_BLANK
from store.format.recordio import encode_one, encode_run, record_layout
from store.log.mapped_file import MappedFile
from store.log.paths import is_offset_name, offset_to_name
from store.log.segment_warmer import SegmentWarmer
from store.log.tail_walk import record_at, walk_compiled, walk_reference


@dataclass(frozen=True)
class RecoveryResult:
    end: int  # physical offset just past the last good record
    truncated_bytes: int  # nonzero bytes dropped from the tail (torn or corrupt records)
    reason: str | None  # why the scan stopped before the zero area, if it did


class CommitLog:
    def __init__(self, directory: Path, file_size: int, *, writable: bool):
        self.directory = Path(directory)
        self.file_size = file_size
        self.writable = writable
        self._segments: list[MappedFile] = []
        self._base = 0  # physical offset of the first segment
        self.end = 0
        # Lookups read records before it with pread, not through the mapping (see read_apart).
        self._released_to = 0
        self._dropped_to = 0
        self._warmer = SegmentWarmer(self._segment_for, file_size)
        self._load_segments()

    # -- files --------------------------------------------------------------------------------
    def _load_segments(self) -> None:
        if not self.directory.is_dir():
            if not self.writable:
                return
            self.directory.mkdir(parents=True, exist_ok=True)
        names = sorted(os.listdir(self.directory))
        for name in names:
            if not is_offset_name(name):
                raise StoreError(f"unexpected file {name!r} in {self.directory}: RocketMQ would refuse it")
        expected = None
        for name in names:
            offset = int(name)
            if offset % self.file_size:
                raise StoreError(f"commit log file {name} is not aligned to the file size {self.file_size}")
            if expected is not None and offset != expected:
                raise StoreError(f"commit log files are not contiguous: missing {offset_to_name(expected)}")
            self._segments.append(MappedFile(self.directory / name, self.file_size, writable=self.writable))
            expected = offset + self.file_size
        if self._segments:
            self._base = int(self._segments[0].path.name)
        self.end = self._base

    @property
    def min_offset(self) -> int:
        return self._base

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    def segments(self) -> list[tuple[int, Path]]:
        return [(self._base + i * self.file_size, seg.path) for i, seg in enumerate(self._segments)]

    def delete_segments_before(self, phys: int) -> list[Path]:
        """Delete the segments that end at or before `phys`, never the last one."""
        deleted = []
        while len(self._segments) > 1 and self._base + self.file_size <= phys:
            seg = self._segments.pop(0)
            seg.close()
            seg.path.unlink()
            deleted.append(seg.path)
            self._base += self.file_size
        return deleted

    def _segment_for(self, phys: int) -> MappedFile | None:
        if phys < self._base:
            return None
        i = (phys - self._base) // self.file_size
        return self._segments[i] if i < len(self._segments) else None

    def _new_segment(self, base: int) -> MappedFile:
        if not self.writable:
            raise ReadOnlyStoreError("the store is open read-only")
        if not self._segments:
            self._base = base
        seg = MappedFile(self.directory / offset_to_name(base), self.file_size, writable=True, create=True)
        self._segments.append(seg)
        return seg

    # -- writing -----------------------------------------------------------------------------
    def max_record_size(self) -> int:
        return self.file_size - BLANK_MIN_LENGTH

    def append_records(self, items: list[tuple], queue_offsets: np.ndarray, store_timestamp: int,
                       store_host: HostAddress) -> np.ndarray:
        """Encode record items (see store.recordio) at the tail and return their physical offsets.

        Whenever the next record plus a BLANK would not fit in the current segment, the BLANK
        filler is written and the tail moves to the start of the next segment. Callers check that
        every record fits in an empty segment."""
        n = len(items)
        phys = np.empty(n, dtype=np.int64)
        layout = record_layout()
        self._reserve([item[0] for item in items])
        done = 0
        while done < n:
            seg = self._segment_for(self.end) or self._new_segment(self.end)
            pos = self.end % self.file_size
            count, written = encode_run(memoryview(seg.buf)[pos:], pos, self.file_size, layout, items, done,
                                        queue_offsets, phys, self.end - pos, store_timestamp, store_host.address,
                                        store_host.port)
            if written:
                seg.mark_dirty(pos, pos + written)
            self.end += written
            done += count
            if count == 0:  # the next record needs the next segment
                if pos == 0:
                    raise StoreError(f"record of {items[done][0]} bytes does not fit in a {self.file_size}-byte "
                                     f"segment")
                self._write(self.end, codec.encode_blank(self.file_size - pos))
                self.end += self.file_size - pos
        self._warmer.advance(self.end)
        return phys

    def append_one(self, item: tuple, queue_offset: int, store_timestamp: int, store_host: HostAddress) -> int:
        """append_records for a single record: its physical offset."""
        end = self.end
        seg = self._segment_for(end)
        if seg is not None:
            pos = end % self.file_size
            written = encode_one(seg.buf, pos, self.file_size, record_layout(), item, queue_offset, end,
                                 store_timestamp, store_host.address, store_host.port)
            if written:
                seg.mark_dirty(pos, pos + written)
                self.end = end + written
                self._warmer.advance(self.end)
                return end
        offsets = np.array([queue_offset], dtype=np.int64)
        return int(self.append_records([item], offsets, store_timestamp, store_host)[0])

    def _reserve(self, sizes: list[int]) -> None:
        """Create every segment the records will reach before a byte is written, so running out
        of disk refuses the whole batch instead of stopping it midway."""
        pos = self.end % self.file_size
        if self._segment_for(self.end) is not None and pos + sum(sizes) + BLANK_MIN_LENGTH <= self.file_size:
            return
        base = self.end - pos
        needed = [base]
        for size in sizes:
            fits = size <= self.file_size if pos == 0 else size + BLANK_MIN_LENGTH <= self.file_size - pos
            if not fits:
                base += self.file_size
                needed.append(base)
                pos = 0
            pos += size
        created = []
        try:
            for segment_base in needed:
                if self._segment_for(segment_base) is None:
                    created.append(self._new_segment(segment_base))
        except BaseException:
            for seg in reversed(created):  # empty: leave the log as it was
                self._segments.remove(seg)
                seg.close()
                seg.path.unlink(missing_ok=True)
            raise

    def _write(self, phys: int, data: bytes) -> None:
        seg = self._segment_for(phys)
        if seg is None:
            raise StoreError(f"no segment holds offset {phys}")
        pos = phys % self.file_size
        seg.write(pos, data)

    def dirty_files(self) -> list[MappedFile]:
        """Segments written since the last call, their dirty marks taken."""
        return [seg for seg in self._segments if seg.take_dirty()]

    def flush(self) -> None:
        for seg in self.dirty_files():
            seg.sync()

    def release_before(self, phys: int, *, drop_cached: bool = False) -> None:
        """Unmap the pages of the log before `phys` (see MappedFile.release), those read back
        since the last call too; later reads of records there do not map them again. With
        `drop_cached` (only for bytes already synced), the pages written since the last drop
        also leave the page cache (MappedFile.drop_cached)."""
        dropped_to = self._dropped_to
        if drop_cached:
            self._dropped_to = max(dropped_to, phys)
        self._released_to = max(self._released_to, phys)
        for i, seg in enumerate(self._segments):
            start = self._base + i * self.file_size
            if start >= phys:
                break
            seg.release_before(phys - start)
            if drop_cached and start + self.file_size > dropped_to:
                seg.drop_cached(max(0, dropped_to - start), phys - start)

    # -- reading -----------------------------------------------------------------------------
    def view(self, phys: int) -> tuple[MappedFile, int]:
        seg = self._segment_for(phys)
        if seg is None or phys >= self.end:
            raise StoreError(f"commit log offset {phys} is outside [{self._base}, {self.end})")
        return seg, phys % self.file_size

    def read_apart(self, phys: int) -> StoredMessage:
        """`read` for a lookup: a record behind the released pages is copied with pread. Through
        the mapping, each of a lookup's scattered reads would map the record's neighbours too (the
        kernel maps up to 16 pages per fault) and the server's memory would grow with what was
        looked up. Not for consuming: a system call lets other threads take the interpreter, and
        the reader then waits for it back, which halves the throughput of receives."""
        if phys < self._released_to:
            seg, pos = self.view(phys)
            record = seg.read_record(pos)
            if record is not None:
                msg = codec.decode(record, 0, path=str(seg.path))
                if msg.phys_offset == phys and phys + msg.size <= self.end:
                    return msg
        return self.read(phys)

    def read(self, phys: int, check_crc: bool = True) -> StoredMessage:
        seg, pos = self.view(phys)
        size, magic = BLANK.unpack_from(seg.buf, pos)
        if magic == MAGIC_BLANK:
            raise CorruptRecordError(str(seg.path), pos, "offset points at the end-of-file filler")
        msg = codec.decode(seg.buf, pos, path=str(seg.path), check_crc=check_crc)
        if phys + msg.size > self.end:
            raise CorruptRecordError(str(seg.path), pos, "record runs past the end of the commit log")
        return msg

    # -- recovery ----------------------------------------------------------------------------
    def _record_at(self, phys: int) -> StoredMessage | None:
        return record_at(self._segment_for, self.file_size, phys)

    def _recovery_start(self) -> int:
        """The start of the third-last segment holding data (RocketMQ walks the last three).
        Segments past the data are skipped: a batch creates every segment it will reach before
        writing to them (see _reserve), so a writer killed midway leaves empty ones behind, and
        a walk starting in them would miss where the data ends."""
        used = len(self._segments)
        while used > 1 and BLANK.unpack_from(self._segments[used - 1].buf, 0) == (0, 0):
            used -= 1
        return self._base + max(0, used - 3) * self.file_size

    def has_segments_past(self, end: int) -> bool:
        """Whether a segment starts at or after `end` (only empty ones can: see _recovery_start)."""
        return self._base + len(self._segments) * self.file_size > end + -end % self.file_size

    def recover(self, start: int | None = None, *, count_tail: bool = False, compiled: bool = True) -> RecoveryResult:
        """Find the end of valid data, walking with CRC checks from `start` (default: the start
        of the third-last segment holding data, as RocketMQ does). Nothing is changed on disk here.
        `compiled=False` walks with the pure-Python reference (store.log.tail_walk).

        Bytes left behind the end are counted when the walk stopped at a bad record or when
        `count_tail` asks (after a crash); a clean tail is zero by construction."""
        if not self._segments:
            self.end = self._base
            return RecoveryResult(self._base, 0, None)
        walk = walk_compiled if compiled else walk_reference
        stop = walk(self._segment_for, self.file_size, self._recovery_start() if start is None else start)
        phys = stop.end
        reason = None
        if stop.bad:
            seg = self._segment_for(phys)
            size = BLANK.unpack_from(seg.buf, phys % self.file_size)[0]
            try:
                codec.decode(seg.buf, phys % self.file_size, path=str(seg.path))
                reason = f"record at offset {phys} claims offset field of another position"
            except CorruptRecordError as exc:
                reason = exc.reason
            self._raise_if_data_follows(phys, size, reason)
        self.end = phys
        leftover = self._nonzero_bytes_after(phys) if reason is not None or count_tail else 0
        return RecoveryResult(phys, leftover, reason)

    def _raise_if_data_follows(self, phys: int, claimed_size: int, reason: str) -> None:
        """A bad record followed by good ones is corruption in the middle: report, never skip."""
        seg = self._segment_for(phys)
        evidence = None
        if 0 < claimed_size <= self.file_size - phys % self.file_size and self._record_at(phys + claimed_size):
            evidence = phys + claimed_size
        else:
            i = (phys - self._base) // self.file_size
            for later in range(i + 1, len(self._segments)):
                base = self._base + later * self.file_size
                if self._record_at(base):
                    evidence = base
                    break
        if evidence is not None:
            raise CorruptRecordError(
                str(seg.path), phys % self.file_size,
                f"{reason}; valid records follow at offset {evidence}, so this is not a torn tail",
            )

    def _nonzero_bytes_after(self, phys: int) -> int:
        seg = self._segment_for(phys)
        if seg is None:
            return 0
        i = (phys - self._base) // self.file_size
        count = seg.nonzero_bytes(phys % self.file_size)
        return count + sum(later.nonzero_bytes(0) for later in self._segments[i + 1 :])

    def truncate_after(self, end: int) -> None:
        """Zero everything after `end` in its segment and delete the segments past it."""
        if not self.writable:
            raise ReadOnlyStoreError("the store is open read-only")
        seg = self._segment_for(end)
        if seg is not None:
            pos = end % self.file_size
            keep = (end - self._base) // self.file_size + (1 if pos else 0)
            if pos and seg.nonzero_bytes(pos):
                seg.zero_from(pos)
                seg.flush()
            while len(self._segments) > keep:  # newest first: stopped midway, the files stay contiguous
                dropped = self._segments.pop()
                dropped.close()
                dropped.path.unlink()
        self.end = end

    def close(self) -> None:
        self._warmer.stop()
        for seg in self._segments:
            seg.close()
        self._segments.clear()
