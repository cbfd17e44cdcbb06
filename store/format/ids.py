"""Message ids: the offset message id and the client unique key (MessageClientIDSetter)."""

from __future__ import annotations

import calendar
import itertools
import os
import threading
import time
from dataclasses import dataclass

from store.errors import InvalidIdError
from store.format.hosts import HostAddress
from store.format.layouts import OFFSET_ID_TAIL, UNIQ_KEY_FIXED, UNIQ_KEY_TAIL, UNIQ_KEY_VARYING

_HEX = frozenset("0123456789abcdefABCDEF")


def _hex_to_bytes(text: str, what: str) -> bytes:
    if not text or len(text) % 2 or not _HEX.issuperset(text):
        raise InvalidIdError(f"{what} must be an even-length hex string, got {text!r}")
    return bytes.fromhex(text)


def create_offset_msg_id(store_host: HostAddress, phys_offset: int) -> str:
    return (store_host.address + OFFSET_ID_TAIL.pack(store_host.port, phys_offset)).hex().upper()


def decode_offset_msg_id(msg_id: str) -> tuple[HostAddress, int]:
    """Store host and physical offset. 32 hex chars means IPv4, 56 means IPv6."""
    text = msg_id.strip()
    if len(text) not in (32, 56):
        raise InvalidIdError(f"an offset message id has 32 or 56 hex characters, got {len(text)}")
    raw = _hex_to_bytes(text, "offset message id")
    addr_len = 4 if len(raw) == 16 else 16
    port, phys_offset = OFFSET_ID_TAIL.unpack_from(raw, addr_len)
    if phys_offset < 0:
        raise InvalidIdError(f"offset message id {msg_id!r} has a negative commit log offset")
    return HostAddress(raw[:addr_len], port), phys_offset


@dataclass(frozen=True)
class UniqueKeyParts:
    ip: str
    pid: int
    class_loader_hash: int
    ms_since_month_start: int
    counter: int


def decode_unique_key(key: str) -> UniqueKeyParts:
    text = key.strip()
    if len(text) not in (32, 56):
        raise InvalidIdError(f"a unique key has 32 or 56 hex characters, got {len(text)}")
    raw = _hex_to_bytes(text, "unique key")
    addr_len = len(raw) - UNIQ_KEY_TAIL.size
    pid, loader_hash, ms, counter = UNIQ_KEY_TAIL.unpack_from(raw, addr_len)
    return UniqueKeyParts(
        ip=HostAddress(raw[:addr_len], 0).host_text(),
        pid=pid & 0xFFFF,
        class_loader_hash=loader_hash & 0xFFFFFFFF,
        ms_since_month_start=ms & 0xFFFFFFFF,  # written as a Java int, read back unsigned
        counter=counter & 0xFFFF,
    )


def month_start_ms(now_ms: int, utc: bool = False) -> int:
    """Start of the month containing `now_ms`, in local time (or UTC)."""
    seconds = now_ms // 1000
    t = time.gmtime(seconds) if utc else time.localtime(seconds)
    start = (t.tm_year, t.tm_mon, 1, 0, 0, 0, 0, 0, -1)
    return (calendar.timegm(start) if utc else int(time.mktime(start))) * 1000


def nearly_time_ms(key: str, now_ms: int, utc: bool = False) -> int:
    """getNearlyTimeFromID: the id's month offset added to this month's start, or last month's
    when that lands at or after `now_ms`."""
    ms = decode_unique_key(key).ms_since_month_start
    this_month = month_start_ms(now_ms, utc)
    candidate = this_month + ms
    if candidate >= now_ms:
        candidate = month_start_ms(this_month - 1, utc) + ms  # the previous month
    return candidate


class UniqueKeyFactory:
    """Creates unique keys in RocketMQ's layout for one producing process."""

    def __init__(self, host: HostAddress, clock, pid: int | None = None,
                 class_loader_hash: int | None = None, utc: bool = False):
        pid = os.getpid() if pid is None else pid
        loader = (id(self) * 2654435761) & 0xFFFFFFFF if class_loader_hash is None else class_loader_hash
        self._fixed = host.address + UNIQ_KEY_FIXED.pack(_int16(pid), _int32(loader))
        self._clock = clock
        self._utc = utc
        self._counter = itertools.count()
        self._lock = threading.Lock()
        self._month_start = -1
        self._next_month_start = -1

    def _month_offset(self, now_ms: int) -> int:
        if not self._month_start <= now_ms < self._next_month_start:
            self._month_start = month_start_ms(now_ms, self._utc)
            self._next_month_start = month_start_ms(self._month_start + 32 * 86_400_000, self._utc)
        return max(0, now_ms - self._month_start)

    def create(self) -> str:
        with self._lock:
            now = self._clock.now_ms()
            offset = self._month_offset(now)
            counter = next(self._counter) & 0xFFFF
        return (self._fixed + UNIQ_KEY_VARYING.pack(_int32(offset), _int16(counter))).hex().upper()


def _int16(value: int) -> int:
    value &= 0xFFFF
    return value - 0x10000 if value & 0x8000 else value


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - 0x1_0000_0000 if value & 0x8000_0000 else value
