"""Retention: commit log segments whose file was last written more than the reserved time ago
are deleted, oldest first, never the live (last) one; consume queue and index files that only
point into deleted segments go with them (RocketMQ's fileReservedTime, default 72 hours)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DEFAULT_RESERVED_HOURS = 72
HOUR_MS = 3_600_000


@dataclass(frozen=True)
class RetentionPass:
    deleted: list[Path]  # commit log segments removed
    min_phys_offset: int  # the commit log's first offset afterwards


@dataclass(frozen=True)
class Expiry:
    at_ms: int  # when the record's segment may be deleted
    exact: bool  # False while the segment is still being written: it expires no earlier than at_ms


def modified_ms(path: Path) -> int:
    return path.stat().st_mtime_ns // 1_000_000


def expired_until(segments: list[tuple[int, Path]], file_size: int, now_ms: int, reserved_ms: int) -> int | None:
    """The commit log offset before which every segment has expired, or None when none has. The
    walk stops at the first segment still kept, so the log stays contiguous."""
    until = None
    for base, path in segments[:-1]:
        if modified_ms(path) + reserved_ms > now_ms:
            break
        until = base + file_size
    return until


def expiry_of(segments: list[tuple[int, Path]], file_size: int, phys_offset: int, now_ms: int,
              reserved_ms: int) -> Expiry | None:
    """When the segment holding `phys_offset` may be deleted, or None if no segment holds it."""
    for i, (base, path) in enumerate(segments):
        if base <= phys_offset < base + file_size:
            if i == len(segments) - 1:
                return Expiry(now_ms + reserved_ms, exact=False)
            return Expiry(modified_ms(path) + reserved_ms, exact=True)
    return None
