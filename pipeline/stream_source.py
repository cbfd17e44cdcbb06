"""The commit log as a stream: `spark.readStream.format("rocketmq_commitlog").load(store_dir)`.

An offset is a commit log physical offset, `{"phys": N, "retention_lost_bytes": B}`: a
micro-batch reads the records whose first byte lies in [start, end), across segment rolls, with
the batch reader's partitions and rows (pipeline.source). The end of a batch is where the
planner's walk (compiled: store.format.recordio.recover_walk) stops: zeros, or a record at the
write head that is not complete yet (it is the next batch's). Damage with good records after it
is not the write head: the batch reads over it, and the read fails or skips it as `skip_corrupt`
says, as a batch read does.

Retention may delete segments the stream has not read yet. The next batch then starts at the
oldest segment left, logs a warning, and adds the bytes it could not read to the offset's
`retention_lost_bytes` (a running total kept in the checkpoint, shown in the query's progress).
The records those bytes held cannot be counted: their files are gone.

Options, besides the batch reader's: `starting_offset` (`earliest`, the default: the oldest
record left; or `latest`: only records written after the query first starts) and
`max_bytes_per_trigger` (about this many commit log bytes per micro-batch: a batch ends at the end
of the record that crosses the limit, so it ends on a record boundary and reads at least one
record). With
`Trigger.AvailableNow` the query reads what was written when it started, in batches of that size
if set, and stops."""

from __future__ import annotations

import json
import logging
import mmap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxBytes, SupportsTriggerAvailableNow

from pipeline.segments import Segment, resync, segment_files
from pipeline.source import CommitLogReader, SegmentSplit
from store.format.layouts import BLANK, MAGIC_BLANK
from store.format.recordio import WALK_BAD, WALK_BLANK, WALK_ZEROS, record_layout, recover_walk
from store.log.tail_walk import record_at

PHYS, LOST = "phys", "retention_lost_bytes"
STARTS = ("earliest", "latest")
log = logging.getLogger("pipeline.stream")


@dataclass(frozen=True)
class StreamOffset:
    phys: int  # the next record to read
    lost_bytes: int = 0  # commit log bytes deleted by retention before the stream read them, so far

    @classmethod
    def of(cls, offset: dict) -> StreamOffset:
        try:
            found = cls(int(offset[PHYS]), int(offset.get(LOST, 0)))
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError):
            found = None
        if found is None or found.phys < 0 or found.lost_bytes < 0:
            raise ValueError(f"not a commit log stream offset: {offset!r}")
        return found

    def as_dict(self) -> dict:
        return {PHYS: self.phys, LOST: self.lost_bytes}


@dataclass(frozen=True)
class RetentionGap:
    """Bytes of the log deleted before the stream read them: [start, end)."""

    start: int
    end: int

    def __str__(self) -> str:
        return (f"retention deleted commit log offsets {self.start} to {self.end} ({self.end - self.start:,} "
                f"bytes) before the stream read them; it goes on from offset {self.end}")


def gap_in_batch(start: dict | str | None, end: dict | str | None) -> RetentionGap | None:
    """The retention gap a micro-batch from `start` to `end` stepped over, or None. The offsets
    are as a query's progress shows them: dicts, their JSON, or null for the first batch."""
    first, last = _offset_or_none(start), _offset_or_none(end)
    if first is None or last is None:
        return None
    lost = last.lost_bytes - first.lost_bytes
    return RetentionGap(first.phys, first.phys + lost) if lost > 0 else None


def _offset_or_none(value: dict | str | None) -> StreamOffset | None:
    if isinstance(value, str):
        value = json.loads(value)
    return None if value is None else StreamOffset.of(value)


class _MappedSegment:
    """A segment mapped read-only, shaped as store.log.tail_walk's record_at expects."""

    def __init__(self, segment: Segment, buf: mmap.mmap):
        self.path = segment.path
        self.buf = buf


def _holds_data(segment: Segment) -> bool:
    """Whether anything is written at the segment's start (a writer creates segments before it
    fills them)."""
    try:
        with open(segment.path, "rb") as file:
            return file.read(8).strip(b"\0") != b""
    except FileNotFoundError:
        return False


def readable_end(segments: list[Segment], begin: int) -> int:
    """The end of what can be read from `begin` (a record boundary) on. Segments before the last
    one holding data are complete (a writer moves on only past a BLANK filler) and are not walked;
    from that one on, the walk goes over good records and fillers and stops at zeros or at a
    record that is not good with no good one after it (a write under way, or cut short)."""
    layout = record_layout()
    phys = begin
    tail_from = next((i for i in range(len(segments) - 1, -1, -1) if _holds_data(segments[i])), 0)
    for i, segment in enumerate(segments):
        if segment.base + segment.size <= phys:
            continue
        if segment.base > phys:
            log.warning("the commit log has no segment at offset %d: the stream waits there", phys)
            return phys
        if i >= tail_from and segment.size:
            try:
                end = _tail_end(segment, phys - segment.base, layout)
            except FileNotFoundError:  # deleted under the walk: the next batch reports it
                return phys
            if end is not None:
                return segment.base + end
        phys = segment.base + segment.size
    return phys


def crossing_record_end(segments: list[Segment], begin: int, target: int, end: int) -> int:
    """Where a batch from `begin` capped at `target` bytes ends: the end of the record that holds
    byte `target - 1` (or `target` itself when a record starts there), so that a batch ends on a
    record boundary and reads at least one record; `end` (the readable end) when it comes first.
    Only the segment holding `target` is walked, from its start or `begin`: its base is a boundary.
    A batch starting at a segment's filler goes on to the next segment's first record."""
    try:
        return _crossing_record_end(segments, begin, target, end)
    except FileNotFoundError:  # deleted by retention under the walk: the next batch reports it
        return min(target, end)


def _crossing_record_end(segments: list[Segment], begin: int, target: int, end: int) -> int:
    holding = next((s for s in segments if s.base <= begin < s.base + s.size), None)
    if holding is not None and _at_filler(holding, begin - holding.base):
        target = max(target, holding.base + holding.size + 1)
    if target >= end:
        return end
    segment = next((s for s in segments if s.base <= target < s.base + s.size), None)
    if segment is None:
        return end
    with open(segment.path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        within = target - segment.base
        with memoryview(buf) as whole, whole[:within] as part:
            status, pos = recover_walk(part, max(begin, segment.base) - segment.base, segment.base, record_layout())
        if status == WALK_BLANK:
            return min(segment.base + segment.size, end)
        if pos >= within:
            return min(segment.base + pos, end)
        total, magic = BLANK.unpack_from(buf, pos)
        crossing = segment.base + segment.size if magic == MAGIC_BLANK else segment.base + pos + total
    return min(max(crossing, begin + 1), end)


def _at_filler(segment: Segment, pos: int) -> bool:
    """Whether the segment's records end at `pos`: a BLANK filler there, or no room for one."""
    with open(segment.path, "rb") as file:
        file.seek(pos)
        head = file.read(BLANK.size)
    return len(head) < BLANK.size or BLANK.unpack(head)[1] == MAGIC_BLANK


def _tail_end(segment: Segment, pos: int, layout) -> int | None:
    """Where the complete records of a segment at the write head end, from `pos`; None when the
    segment is finished (a BLANK filler or its last byte reached): the next segment goes on."""
    with open(segment.path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        mapped = _MappedSegment(segment, buf)
        while True:
            status, pos = recover_walk(buf, pos, segment.base, layout)
            if status == WALK_ZEROS:
                return pos
            if status != WALK_BAD:
                return None
            msg = record_at(lambda _phys: mapped, len(buf), segment.base + pos)  # the Python decoder's last word
            if msg is not None:
                pos += msg.size
                continue
            following = resync(buf, segment.base, pos + 1, str(segment.path))
            if following is None:
                return pos
            pos = following  # damage in the middle of the log: the read fails or skips it


def _max_bytes(options: dict) -> int | None:
    text = options.get("max_bytes_per_trigger")
    if text is None:
        return None
    text = str(text).strip()
    if not text.isdigit() or int(text) <= 0:
        raise ValueError(f"option max_bytes_per_trigger is a positive number of bytes, not {text[:40]!r}")
    return int(text)


class CommitLogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict, columns: tuple[str, ...] | None = None):
        self.batch = CommitLogReader(options, columns)  # plans splits and reads them: the batch source's rows
        self.store_dir: Path = self.batch.store_dir
        self.starting = str(options.get("starting_offset", "earliest")).strip().lower()
        if self.starting not in STARTS:
            raise ValueError(f"option starting_offset is earliest or latest, not {self.starting!r}")
        self.max_bytes = _max_bytes(options)
        self.target: int | None = None  # with Trigger.AvailableNow: the end of what was written at the start

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 (Spark's names)
        return ReadAllAvailable() if self.max_bytes is None else ReadMaxBytes(self.max_bytes)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        self.target = self._written_end()

    def _written_end(self) -> int:
        segments = segment_files(self.store_dir)
        if not segments:
            return 0
        with_data = [s for s in segments if _holds_data(s)] or segments[:1]
        return readable_end(segments, with_data[-1].base)

    def initialOffset(self) -> dict:  # noqa: N802 (Spark's names)
        segments = segment_files(self.store_dir)
        if not segments:
            return StreamOffset(0).as_dict()
        if self.starting == "earliest":
            return StreamOffset(segments[0].base).as_dict()
        return StreamOffset(self._written_end()).as_dict()

    def latestOffset(self, start: dict, limit: ReadLimit | None = None) -> dict:  # noqa: N802
        begin = StreamOffset.of(start)
        segments = segment_files(self.store_dir)
        phys, lost = self._resume_at(begin, segments)
        if lost:
            log.warning("%s", RetentionGap(begin.phys, phys))
        end = readable_end(segments, phys)
        if self.target is not None:
            end = min(end, max(self.target, phys))
        if isinstance(limit, ReadMaxBytes):
            end = crossing_record_end(segments, phys, phys + limit.max_bytes, end)
        stop = StreamOffset(end, begin.lost_bytes + lost)
        return start if stop.phys == begin.phys and not lost else stop.as_dict()

    @staticmethod
    def _resume_at(offset: StreamOffset, segments: list[Segment]) -> tuple[int, int]:
        """Where a batch from `offset` starts reading, and the bytes before it retention deleted."""
        oldest = segments[0].base if segments else offset.phys
        return (oldest, oldest - offset.phys) if offset.phys < oldest else (offset.phys, 0)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin, stop = StreamOffset.of(start), StreamOffset.of(end)
        first = begin.phys + (stop.lost_bytes - begin.lost_bytes)  # past the gap latestOffset reported
        splits = []
        for segment in segment_files(self.store_dir):
            low, high = max(first, segment.base), min(stop.phys, segment.base + segment.size)
            if low >= high:
                continue
            splits += [SegmentSplit(segment, pos - segment.base, min(pos + self.batch.split_bytes, high) - segment.base,
                                    is_tail=False)
                       for pos in range(low, high, self.batch.split_bytes)]
        return splits

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        try:
            yield from self.batch.read(partition)
        except FileNotFoundError:  # nothing was yielded: the file is opened before its first record
            log.warning("retention deleted %s before the stream read offsets %d to %d of it",
                        partition.segment.path.name, partition.segment.base + partition.start,
                        partition.segment.base + partition.end)
