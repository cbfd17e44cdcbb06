"""A bulk load's write-behind (issue #25): with `drop_flushed_pages`, the log pages a flush made
durable leave the page cache (the kernel hands the same memory out again for the pages written
next, rather than memory touched for the first time); by default they stay cached."""

from __future__ import annotations

import ctypes
import mmap
from pathlib import Path

from store.engine.lifecycle import RESIDENT_TAIL_BYTES
from store.log.geometry import StoreGeometry
from store.message_store import MessageStore, NewMessage
from tests.store.helpers import small_config

GEOMETRY = StoreGeometry(64 * 1024 * 1024, 20 * 1000, 1000, 4000)
BODY = b"w" * 4000
MESSAGES = 10_000  # about 40 MiB of log
EDGE_BYTES = 2 * 1024 * 1024  # the kernel drops only whole folios: one across the flushed edge may stay


def cached_bytes(path: Path, start: int, end: int) -> int:
    """Bytes of [start, end) of the file that are in the page cache (mincore over a mapping of
    its own, which faults nothing in)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) as view:
        pages = (end - start) // mmap.PAGESIZE
        vec = ctypes.create_string_buffer(pages)
        address = ctypes.addressof(ctypes.c_char.from_buffer(view)) + start  # the export ends at once
        assert libc.mincore(address, pages * mmap.PAGESIZE, vec) == 0, ctypes.get_errno()
        return sum(b & 1 for b in vec.raw) * mmap.PAGESIZE


def write_and_flush(root: Path, **overrides) -> tuple[Path, int, list]:
    config = small_config(geometry=GEOMETRY, flush="async", flush_interval_ms=3_600_000, **overrides)
    with MessageStore.open(root, config) as store:
        results = store.put_many([NewMessage("Bulk", BODY, keys=[f"k{n}"]) for n in range(MESSAGES)])
        store.catch_up()
        store.flush()
        [segment] = [path for _, path in store.commitlog.segments()]
        behind = (store.commitlog.end - RESIDENT_TAIL_BYTES) // mmap.PAGESIZE * mmap.PAGESIZE
        return segment, behind, [cached_bytes(segment, 0, behind), store.get_by_offset_id(results[0].offset_msg_id)]


def test_flushed_log_pages_leave_the_page_cache_and_read_back_from_disk(tmp_path):
    segment, behind, (cached, first) = write_and_flush(tmp_path, drop_flushed_pages=True)
    assert behind > 32 * 1024 * 1024
    assert cached <= EDGE_BYTES
    assert first.body == BODY and first.keys == ["k0"]
    with MessageStore.open(tmp_path, small_config(geometry=GEOMETRY), read_only=True) as store:
        assert len(store.query_by_key("Bulk", f"k{MESSAGES - 1}").messages) == 1


def test_by_default_flushed_log_pages_stay_cached(tmp_path):
    segment, behind, (cached, first) = write_and_flush(tmp_path)
    assert cached >= behind // 2
    assert first.body == BODY
