"""Commit log segments walked record by record, from the start of a file or from any byte
position: a split that starts inside a segment resyncs to the first verified record boundary.

A position is a record boundary when its magic code is known, its size fits, the physical
offset the record holds is its own (segment base + position), its body CRC is right and the
next record begins where it ends. A body that happens to contain all of that is practically
impossible, so a split never starts inside a body."""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from store.errors import CorruptRecordError
from store.format import codec
from store.format.layouts import (
    BLANK,
    BLANK_MIN_LENGTH,
    INT32,
    MAGIC_BLANK,
    MAGIC_V1,
    MAGIC_V2,
    RECORD_HEAD,
    RECORD_HEAD_FIELDS,
    field_offset,
)
from store.format.recordio import WALK_BAD, WALK_END, WALK_ZEROS, record_layout, recover_walk
from store.log.paths import is_offset_name

PHYS_OFFSET_AT = field_offset(RECORD_HEAD_FIELDS, "phys_offset")
MAGIC_AT = field_offset(RECORD_HEAD_FIELDS, "magic")
RESYNC_WINDOW = 1 << 20  # bytes searched first for a record boundary; doubled while none is found
_MAGIC_PATTERNS = tuple(INT32.pack(m) for m in (MAGIC_V1, MAGIC_V2, MAGIC_BLANK))


@dataclass(frozen=True)
class Segment:
    path: Path
    base: int  # commit log offset of the file's first byte (its name)
    size: int


@dataclass
class SkippedRange:
    file: str
    position: int
    length: int
    reason: str


@dataclass
class WalkReport:
    """What a walk saw besides records: skipped corrupt ranges and a torn tail it cut."""

    records: int = 0
    skipped: list[SkippedRange] = field(default_factory=list)
    torn_tail_at: int | None = None  # commit log offset where an unfinished last record was cut

    def as_dict(self) -> dict:
        return {"records": self.records, "skipped": [vars(s) for s in self.skipped],
                "torn_tail_at": self.torn_tail_at}


def segment_files(store_dir: Path) -> list[Segment]:
    """The commit log segments of a store directory, oldest first."""
    directory = Path(store_dir) / "commitlog"
    if not directory.is_dir():
        raise FileNotFoundError(f"{store_dir} is not a store: it has no commitlog directory")
    return [Segment(directory / name, int(name), os.path.getsize(directory / name))
            for name in sorted(os.listdir(directory)) if is_offset_name(name)]


def _record_at(buf, base: int, pos: int, path: str) -> codec.StoredMessage | None:
    """The record at `pos` when it is a verified boundary, else None."""
    if pos + RECORD_HEAD.size > len(buf):
        return None
    total, magic = BLANK.unpack_from(buf, pos)
    if magic not in (MAGIC_V1, MAGIC_V2) or total <= RECORD_HEAD.size or pos + total > len(buf):
        return None
    if int.from_bytes(buf[pos + PHYS_OFFSET_AT: pos + PHYS_OFFSET_AT + 8], "big", signed=True) != base + pos:
        return None
    try:
        msg = codec.decode(buf, pos, path=path, check_crc=True)
    except CorruptRecordError:
        return None
    return msg if _is_boundary_after(buf, base, pos + total) else None


def _is_boundary_after(buf, base: int, pos: int) -> bool:
    """The end of a record: the end of the file, zeros, a filler to the end, or another header
    holding its own offset."""
    if pos + BLANK.size > len(buf):
        return True
    total, magic = BLANK.unpack_from(buf, pos)
    if total == 0 or (magic == MAGIC_BLANK and pos + total == len(buf)):
        return True
    if magic not in (MAGIC_V1, MAGIC_V2) or pos + RECORD_HEAD.size > len(buf):
        return False
    return int.from_bytes(buf[pos + PHYS_OFFSET_AT: pos + PHYS_OFFSET_AT + 8], "big", signed=True) == base + pos


def resync(buf, base: int, start: int, path: str, limit: int | None = None, window: int = RESYNC_WINDOW) -> int | None:
    """The first verified record boundary at or after `start` (and before `limit`, when given),
    or None when no record follows (only a filler, zeros or damage). The magic codes are looked
    for a window at a time, so a boundary near `start` is found without reading the rest of a
    mostly empty segment."""
    bound = len(buf) if limit is None else min(limit, len(buf))
    last_magic_end = bound - 1 + MAGIC_AT + INT32.size  # the magic of a record starting at bound - 1
    pos = start
    while pos + MAGIC_AT < last_magic_end:
        window_end = min(pos + MAGIC_AT + window, last_magic_end)
        found = [buf.find(pattern, pos + MAGIC_AT, window_end) for pattern in _MAGIC_PATTERNS]
        found = [f - MAGIC_AT for f in found if f >= 0]
        if not found:
            if window_end == last_magic_end:
                return None
            pos, window = window_end - MAGIC_AT - INT32.size + 1, window * 2  # a magic may straddle the edge
            continue
        candidate = min(found)
        total, magic = BLANK.unpack_from(buf, candidate)
        if magic == MAGIC_BLANK:
            if total >= BLANK_MIN_LENGTH and candidate + total == len(buf):
                return None
        elif _record_at(buf, base, candidate, path) is not None:
            return candidate
        pos = candidate + 1
    return None


@contextmanager
def mapped(segment: Segment) -> Iterator[mmap.mmap]:
    """The segment's bytes, mapped read-only."""
    with open(segment.path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        yield buf


def first_boundary(buf, segment: Segment, start: int, stop: int) -> int | None:
    """Where a walk of [start, stop) begins: `start` itself at a segment's start, else the first
    verified record boundary before `stop` (None: no record of this walk)."""
    if start == 0:
        return 0
    return resync(buf, segment.base, start, str(segment.path), limit=stop)


def ends_here(buf, pos: int) -> bool:
    """A filler or zeros at `pos`: the segment's records end there."""
    total, magic = BLANK.unpack_from(buf, pos)
    return magic == MAGIC_BLANK or total == 0


def step(buf, segment: Segment, pos: int, *, skip_corrupt: bool, is_tail: bool,
         report: WalkReport) -> tuple[codec.StoredMessage | None, int | None]:
    """The record at `pos` (counted in the report) and where the next one starts; for a corrupt
    record, None and the next verified record (skipped and reported), or an error raised, or a
    torn tail reported (see walk). A next position of None ends the walk."""
    path = str(segment.path)
    try:
        msg = codec.decode(buf, pos, path=path, check_crc=True)
        if msg.phys_offset != segment.base + pos:
            raise CorruptRecordError(path, pos, f"holds offset {msg.phys_offset}, not its own")
    except CorruptRecordError as exc:
        following = resync(buf, segment.base, pos + 1, path)
        if following is None and is_tail:
            report.torn_tail_at = segment.base + pos
            return None, None
        if not skip_corrupt:
            raise
        length = (following if following is not None else _data_end(buf, pos)) - pos
        report.skipped.append(SkippedRange(segment.path.name, pos, length, exc.reason))
        return None, following
    report.records += 1
    return msg, pos + msg.size


def walk(segment: Segment, start: int = 0, end: int | None = None, *, skip_corrupt: bool = False,
         is_tail: bool = False, report: WalkReport | None = None) -> Iterator[codec.StoredMessage]:
    """Every record whose first byte lies in [start, end) of the segment, in order.

    A corrupt record raises CorruptRecordError naming the file and position, unless
    `skip_corrupt`, when the range up to the next verified record is skipped and reported. In the
    newest segment (`is_tail`), damage with no record after it is a write cut short: the walk
    ends there and reports it as a torn tail instead of failing."""
    report = report if report is not None else WalkReport()
    if segment.size == 0:
        return
    with mapped(segment) as buf:
        size = len(buf)
        stop = size if end is None else min(end, size)
        pos = first_boundary(buf, segment, start, stop)  # only a record that starts before `stop` is this walk's
        while pos is not None and pos < stop and pos + BLANK.size <= size and not ends_here(buf, pos):
            msg, pos = step(buf, segment, pos, skip_corrupt=skip_corrupt, is_tail=is_tail, report=report)
            if msg is not None:
                yield msg


def _data_end(buf, pos: int, chunk: int = 1 << 20) -> int:
    """Where the written bytes after `pos` end: the file's end less its trailing zeros."""
    end = len(buf)
    while end > pos:
        begin = max(pos, end - chunk)
        kept = len(buf[begin:end].rstrip(b"\0"))
        if kept:
            return begin + kept
        end = begin
    return pos + 1


def records_end(segment: Segment, window: int = 64 * 1024 * 1024) -> int | None:
    """Where the segment's records give way to zeros (the unwritten rest of the newest segment),
    found by the store's compiled recovery walk; None when they do not (a filler, the file's
    end, or damage, which the readers walk into and report)."""
    if segment.size < BLANK.size:
        return None
    layout = record_layout()
    with mapped(segment) as buf:
        pos = 0
        while True:
            limit = min(pos + window, len(buf))
            with memoryview(buf) as whole, whole[:limit] as part:
                status, pos = recover_walk(part, pos, segment.base, layout)
            if status == WALK_ZEROS:
                return pos
            if status == WALK_BAD:  # refused, or running past the window: the Python decoder decides
                msg = _record_at(buf, segment.base, pos, str(segment.path))
                if msg is None:
                    return None
                pos += msg.size
            elif status != WALK_END or limit == len(buf):
                return None


def first_store_timestamp(segment: Segment) -> int | None:
    """The store time of a segment's first record, None for an empty or damaged start."""
    if segment.size < RECORD_HEAD.size:
        return None
    with mapped(segment) as buf:
        try:
            return codec.decode_for_dispatch(buf, 0, path=str(segment.path)).store_timestamp
        except CorruptRecordError:
            return None
