"""A content search's walk over commit log segments: the segments its time window needs (store
time rises along the log), scanned a chunk at a time so the caller sees progress and the hits as
they are found, and can stop between chunks.

The walk maps each segment file itself, read-only: retention may delete a file under it (the
mapping keeps its bytes) and the store's own mappings are never touched."""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from store.errors import CorruptRecordError
from store.format import codec
from store.format.layouts import BLANK, MAGIC_BLANK
from store.search.matching import ContentQuery, Match, Matcher
from store.search.scan import SCAN_BLANK, SCAN_END, SCAN_FULL, SCAN_SLOW, scan_compiled

CHUNK_BYTES = 8 << 20


@dataclass(frozen=True)
class Segment:
    base: int  # physical offset of its first byte
    path: Path


@dataclass(frozen=True)
class Progress:
    scanned_bytes: int  # of records walked so far
    window_bytes: int  # of the segments the window needs, up to the log's end
    records: int
    reached_ms: int | None  # store time of the last record walked


@dataclass(frozen=True)
class Found:
    message: codec.StoredMessage
    match: Match


@dataclass(frozen=True)
class Problem:
    text: str


Event = Progress | Found | Problem


def _first_store_time(path: Path) -> int | None:
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
        size, magic = BLANK.unpack_from(head, 0)
        if magic == MAGIC_BLANK or size <= 0:
            return None
        return codec.decode_for_dispatch(head, 0).store_timestamp if size <= len(head) else _decoded_time(path)
    except (OSError, CorruptRecordError, ValueError):
        return None


def _decoded_time(path: Path) -> int | None:
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        return codec.decode(buf, 0, check_crc=False).store_timestamp


def segments_for_window(segments: list[Segment], begin_ms: int, end_ms: int) -> list[Segment]:
    """The segments that can hold records stored within [begin_ms, end_ms]: a segment whose next
    one starts before `begin_ms` ends before it too, and one starting after `end_ms` is past it."""
    firsts = [_first_store_time(s.path) for s in segments]
    kept = []
    for i, segment in enumerate(segments):
        following = firsts[i + 1] if i + 1 < len(segments) else None
        if following is not None and following < begin_ms:
            continue
        if firsts[i] is not None and firsts[i] > end_ms:
            break
        kept.append(segment)
    return kept


def _open(path: Path) -> mmap.mmap | None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)


def _store_time_at(buf, pos: int, end: int) -> int | None:
    if pos + BLANK.size > end or BLANK.unpack_from(buf, pos)[1] == MAGIC_BLANK:
        return None
    try:
        return codec.decode_for_dispatch(buf, pos).store_timestamp
    except CorruptRecordError:
        return None


def _why_unreadable(buf, pos: int, segment: Segment) -> str:
    try:
        codec.decode(buf, pos, path=str(segment.path), check_crc=False)
        reason = "its fields do not add up"
    except CorruptRecordError as exc:
        reason = exc.reason
    return (f"the record at commit log offset {segment.base + pos} does not parse ({reason}): "
            f"the rest of segment {segment.path.name} was not searched")


def walk(segments: list[Segment], file_size: int, log_end: int, query: ContentQuery, *, max_hits: int,
         max_bytes: int, chunk_bytes: int = CHUNK_BYTES) -> Iterator[Event]:
    """Progress after each chunk, each hit as found, a Problem for what was skipped or where the
    walk stopped early. Stops after `max_hits` hits or `max_bytes` bytes walked."""
    matcher = Matcher(query)
    chosen = [s for s in segments_for_window(segments, query.begin_ms, query.end_ms) if s.base < log_end]
    window = sum(min(file_size, log_end - s.base) for s in chosen)
    topics = tuple(t.encode("utf-8") for t in query.topics)
    scanned = records = hits = 0
    yield Progress(0, window, 0, None)
    for segment in chosen:
        buf = _open(segment.path)
        if buf is None:
            yield Problem(f"segment {segment.path.name} was deleted by retention before the search reached it")
            continue
        with buf:
            end = min(len(buf), log_end - segment.base)
            pos = 0
            while pos < end:
                if scanned >= max_bytes:
                    yield Problem(f"stopped after {scanned} bytes, the most one search walks: narrow the window "
                                  f"or the topics")
                    return
                limit = min(end, pos + chunk_bytes, pos + max_bytes - scanned)
                # Candidates may not match: the scan reports every one of the chunk, the hits are counted here.
                status, new_pos, walked, found = scan_compiled(buf, pos, limit, end, query.begin_ms, query.end_ms,
                                                               topics, query.needle, query.where, chunk_bytes)
                for hit in found:
                    record = buf[hit[0] : hit[0] + hit[5] + hit[6]]
                    match = matcher.match(record, hit)
                    if match is not None:
                        hits += 1
                        yield Found(codec.decode(record, 0, path=str(segment.path), check_crc=False), match)
                        if hits >= max_hits:
                            yield Progress(scanned + new_pos - pos, window, records + walked,
                                           _store_time_at(buf, new_pos, end))
                            return
                records += walked
                scanned += new_pos - pos
                pos = new_pos
                if status in (SCAN_BLANK, SCAN_SLOW):
                    scanned += end - pos
                yield Progress(scanned, window, records, _store_time_at(buf, pos, end))
                if status == SCAN_SLOW:
                    yield Problem(_why_unreadable(buf, pos, segment))
                if status in (SCAN_BLANK, SCAN_SLOW):
                    break


__all__ = ["Event", "Found", "Problem", "Progress", "Segment", "SCAN_END", "SCAN_FULL", "segments_for_window",
           "walk"]
