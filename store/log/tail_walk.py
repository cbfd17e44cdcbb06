"""The record walk of commit log recovery: from a record boundary over every good record (it
decodes, its body CRC matches, it names its own offset), across BLANK fillers to the next
segment, up to zeros, a bad record or the end of the last segment.

The walk runs in compiled code (recover_walk in store/format/_recordio.c); the pure-Python walk
is the reference it must agree with exactly."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from store.errors import CorruptRecordError
from store.format import codec
from store.format.codec import StoredMessage
from store.format.layouts import BLANK, MAGIC_BLANK
from store.format.recordio import WALK_BAD, WALK_END, WALK_ZEROS, record_layout, recover_walk
from store.log.mapped_file import MappedFile

SegmentAt = Callable[[int], MappedFile | None]
WALK_WINDOW = 64 * 1024 * 1024  # bytes walked per compiled call; their pages are released after it


@dataclass(frozen=True)
class WalkEnd:
    end: int  # log offset just past the last good record
    bad: bool  # the walk stopped at a record that is not good (else at zeros or the end of the log)


def record_at(segment_at: SegmentAt, file_size: int, phys: int) -> StoredMessage | None:
    """The record at `phys` if it decodes cleanly and names `phys` as its offset, else None."""
    seg = segment_at(phys)
    if seg is None:
        return None
    pos = phys % file_size
    if pos + BLANK.size > file_size:
        return None
    try:
        msg = codec.decode(seg.buf, pos, path=str(seg.path))
    except CorruptRecordError:
        return None
    return msg if msg.phys_offset == phys else None


def walk_reference(segment_at: SegmentAt, file_size: int, phys: int) -> WalkEnd:
    """The walk, one record at a time through the Python decoder."""
    while (seg := segment_at(phys)) is not None:
        pos = phys % file_size
        if pos + BLANK.size > file_size:  # no record fits: the rest of the segment is unused
            phys += file_size - pos
            continue
        size, magic = BLANK.unpack_from(seg.buf, pos)
        if magic == MAGIC_BLANK:  # like RocketMQ, its declared size is not checked
            phys += file_size - pos
            continue
        if size == 0 and magic == 0:
            break
        msg = record_at(segment_at, file_size, phys)
        if msg is None:
            return WalkEnd(phys, True)
        phys += msg.size
    return WalkEnd(phys, False)


def walk_compiled(segment_at: SegmentAt, file_size: int, phys: int) -> WalkEnd:
    """The walk, a window of each segment per compiled call, releasing the pages it read (they
    stay in the page cache). A record the compiled check refuses, or one that runs past its
    window, is looked at again by the Python decoder, which has the last word."""
    layout = record_layout()
    while (seg := segment_at(phys)) is not None:
        pos = phys % file_size
        base = phys - pos
        limit = min(pos + WALK_WINDOW, file_size)
        with memoryview(seg.buf) as whole, whole[:limit] as window:
            status, pos = recover_walk(window, pos, base, layout)
        seg.release(phys - base, pos)
        phys = base + pos
        if status == WALK_ZEROS:
            break
        if status == WALK_BAD:
            msg = record_at(segment_at, file_size, phys)
            if msg is None:
                return WalkEnd(phys, True)
            phys += msg.size
            continue
        if status == WALK_END and limit < file_size:
            continue  # the window's end, not the segment's
        phys = base + file_size  # a BLANK filler, or no room for a record: the next segment
    return WalkEnd(phys, False)
