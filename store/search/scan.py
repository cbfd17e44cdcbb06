"""One buffer of commit log records scanned for a text: the compiled loop (content_scan in
_recordio.c) and the pure-Python reference it must agree with exactly.

A hit is a tuple (pos, kind, at, body_at, body_len, props_at, props_len, sys_flag): where the
record starts, what matched (KIND_*), where the text starts within the body or the properties, and
where the body and the properties sit within the record."""

from __future__ import annotations

import numpy as np

from store.format.codec import BORNHOST_V6_FLAG, COMPRESSED_FLAG, STOREHOST_V6_FLAG
from store.format.layouts import (
    BLANK,
    BODY_LENGTH,
    HOST_V4,
    HOST_V6,
    MAGIC_BLANK,
    MAGIC_V1,
    MAGIC_V2,
    PROPERTIES_LEN,
    RECORD_HEAD,
    RECORD_TAIL,
    STORE_TIMESTAMP,
    TOPIC_LEN_V1,
    TOPIC_LEN_V2,
)
from store.format.properties import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR
from store.format.recordio import SCAN_BLANK, SCAN_END, SCAN_FULL, SCAN_SLOW, content_scan, record_layout

KIND_CANDIDATE, KIND_BODY, KIND_PROPERTY = 0, 1, 2  # a candidate: the caller matches it (regex, compressed body)
WHERE_BODY, WHERE_PROPERTIES = 1, 2
MAX_TOPICS = 64

# One hit as content_scan packs it (ContentHit in _recordio.c), native byte order.
CONTENT_HIT = np.dtype([
    ("pos", "=i8"), ("kind", "=i4"), ("at", "=i4"), ("body_at", "=i4"), ("body_len", "=i4"), ("props_at", "=i4"),
    ("props_len", "=i4"), ("sys_flag", "=i4"), ("unused", "=i4"),
])

Hit = tuple[int, int, int, int, int, int, int, int]
ScanResult = tuple[int, int, int, list[Hit]]  # status, pos, records walked, hits

_MIN_RECORD = RECORD_HEAD.size + 2 * HOST_V4.size + STORE_TIMESTAMP.size + RECORD_TAIL.size
_SYS_FLAG_AT = RECORD_HEAD.size - 12  # SYSFLAG, then BORNTIMESTAMP (8 bytes)
_PROPERTY_SEPARATOR = PROPERTY_SEPARATOR.encode()
_NAME_VALUE_SEPARATOR = NAME_VALUE_SEPARATOR.encode()


def scan_compiled(buf, pos: int, limit: int, end: int, begin_ms: int, end_ms: int, topics: tuple[bytes, ...],
                  needle: bytes | None, where: int, max_hits: int) -> ScanResult:
    status, pos, records, packed = content_scan(buf, pos, limit, end, record_layout(), begin_ms, end_ms, topics,
                                                needle, where, max_hits)
    hits = np.frombuffer(packed, dtype=CONTENT_HIT)
    return status, pos, records, [row[:8] for row in hits.tolist()]


def property_value_find(props: bytes, needle: bytes) -> int:
    """Where `needle` first occurs within a property value (as parse_properties splits them), or -1."""
    chunk = 0
    while chunk <= len(props):
        chunk_end = props.find(_PROPERTY_SEPARATOR, chunk)
        if chunk_end < 0:
            chunk_end = len(props)
        length = chunk_end - chunk
        if length >= 3:
            sep = props.find(_NAME_VALUE_SEPARATOR, chunk, chunk_end)
            at = sep - chunk if sep >= 0 else -1
            if 0 < at < length - 1:
                found = props.find(needle, sep + 1, chunk_end)
                if found >= 0:
                    return found
        chunk = chunk_end + 1
    return -1


def _parse(buf, pos: int, end: int) -> tuple[int, int, int, int, int, int, bytes] | None:
    """(total, sys_flag, store_ts, body_at, body_len, props_at, topic) of a well-formed record at `pos`."""
    total, magic = BLANK.unpack_from(buf, pos)
    if magic not in (MAGIC_V1, MAGIC_V2) or total < _MIN_RECORD or total > end - pos:
        return None
    (sys_flag,) = BODY_LENGTH.unpack_from(buf, pos + _SYS_FLAG_AT)
    cursor = RECORD_HEAD.size + (HOST_V6.size if sys_flag & BORNHOST_V6_FLAG else HOST_V4.size)
    (store_ts,) = STORE_TIMESTAMP.unpack_from(buf, pos + cursor)
    cursor += STORE_TIMESTAMP.size + (HOST_V6.size if sys_flag & STOREHOST_V6_FLAG else HOST_V4.size)
    if cursor + RECORD_TAIL.size > total:
        return None
    (body_len,) = BODY_LENGTH.unpack_from(buf, pos + cursor + RECORD_TAIL.size - BODY_LENGTH.size)
    cursor += RECORD_TAIL.size
    if body_len < 0 or body_len > total - cursor:
        return None
    body_at = cursor
    cursor += body_len
    topic_struct = TOPIC_LEN_V2 if magic == MAGIC_V2 else TOPIC_LEN_V1
    if cursor + topic_struct.size > total:
        return None
    (topic_len,) = topic_struct.unpack_from(buf, pos + cursor)
    cursor += topic_struct.size
    if topic_len <= 0 or topic_len > total - cursor - PROPERTIES_LEN.size:
        return None
    topic = bytes(buf[pos + cursor : pos + cursor + topic_len])
    cursor += topic_len
    (props_len,) = PROPERTIES_LEN.unpack_from(buf, pos + cursor)
    cursor += PROPERTIES_LEN.size
    if props_len < 0 or cursor + props_len != total:
        return None
    return total, sys_flag, store_ts, body_at, body_len, cursor, topic


def scan_reference(buf, pos: int, limit: int, end: int, begin_ms: int, end_ms: int, topics: tuple[bytes, ...],
                   needle: bytes | None, where: int, max_hits: int) -> ScanResult:
    """What scan_compiled returns, one record at a time in Python."""
    end = min(end, len(buf))
    records, hits, status = 0, [], SCAN_END
    while pos < limit and pos + BLANK.size <= end:
        if BLANK.unpack_from(buf, pos)[1] == MAGIC_BLANK:
            status = SCAN_BLANK
            break
        parsed = _parse(buf, pos, end)
        if parsed is None:
            status = SCAN_SLOW
            break
        total, sys_flag, store_ts, body_at, body_len, props_at, topic = parsed
        props_len = total - props_at
        records += 1
        if not begin_ms <= store_ts <= end_ms or (topics and topic not in topics):
            pos += total
            continue
        kind, at = None, 0
        if needle is None or (where & WHERE_BODY and sys_flag & COMPRESSED_FLAG):
            kind = KIND_CANDIDATE
        else:
            if where & WHERE_BODY:
                at = bytes(buf[pos + body_at : pos + body_at + body_len]).find(needle)
                kind = KIND_BODY if at >= 0 else None
            if kind is None and where & WHERE_PROPERTIES:
                at = property_value_find(bytes(buf[pos + props_at : pos + total]), needle)
                kind = KIND_PROPERTY if at >= 0 else None
        if kind is not None:
            hits.append((pos, kind, at, body_at, body_len, props_at, props_len, sys_flag))
        pos += total
        if len(hits) >= max_hits:
            status = SCAN_FULL
            break
    return status, pos, records, hits


__all__ = ["SCAN_BLANK", "SCAN_END", "SCAN_FULL", "SCAN_SLOW", "scan_compiled", "scan_reference",
           "property_value_find", "KIND_CANDIDATE", "KIND_BODY", "KIND_PROPERTY", "WHERE_BODY", "WHERE_PROPERTIES"]
