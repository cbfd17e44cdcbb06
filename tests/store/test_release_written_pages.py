"""A long-running writer gives back the mapped pages of what it wrote and synced (issue #14:
the server's RSS grew with every byte written): the data stays, read back through the page
cache, and a private (copy-on-write) mapping never gives up its pages."""

from __future__ import annotations

import mmap
from pathlib import Path

from store.engine.lifecycle import RESIDENT_TAIL_BYTES
from store.log.mapped_file import MappedFile
from store.message_store import MessageStore, NewMessage
from tests.store.helpers import small_config

SIZE = 8 * 1024 * 1024


def resident_kib(path: Path) -> int:
    """Resident KiB of this process's mappings of `path` (from /proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if "-" in line.split(" ", 1)[0] and len(line.split()) >= 5:
            inside = line.endswith(str(path))
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


def test_released_pages_leave_the_process_and_keep_their_bytes(tmp_path):
    f = MappedFile(tmp_path / "00000000000000000000", SIZE, writable=True, create=True)
    data = bytes(range(256)) * (SIZE // 256)
    f.write(0, data)
    f.flush()
    assert resident_kib(f.path) >= SIZE // 1024 - 4
    f.release_before(SIZE - 1000)  # not a whole page at the end: that page stays
    assert resident_kib(f.path) <= 8
    assert bytes(f.buf[:SIZE]) == data  # read back through the page cache
    f.close()
    assert (tmp_path / "00000000000000000000").read_bytes() == data


def test_a_private_mapping_keeps_its_pages(tmp_path):
    path = tmp_path / "00000000000000000000"
    MappedFile(path, SIZE, writable=True, create=True).close()
    private = MappedFile(path, SIZE, writable=False, private=True)
    private.buf[:mmap.PAGESIZE] = b"\1" * mmap.PAGESIZE  # only in this process's memory
    private.release_before(SIZE)
    assert private.buf[:mmap.PAGESIZE] == b"\1" * mmap.PAGESIZE
    private.close()


def test_a_flush_releases_the_log_behind_its_resident_tail(tmp_path):
    geometry = small_config().geometry.__class__(64 * 1024 * 1024, 20 * 1000, 1000, 4000)
    with MessageStore.open(tmp_path, small_config(geometry=geometry, flush="async")) as store:
        body = b"m" * 4000
        results = [store.put(NewMessage("Orders", body)) for _ in range(10_000)]  # about 40 MiB
        [segment] = [path for _, path in store.commitlog.segments()]
        # What may stay mapped: the resident tail, and what the warmer faulted in ahead of the writer.
        bound = geometry.commitlog_file_size - (store.commitlog.end - RESIDENT_TAIL_BYTES) + mmap.PAGESIZE
        assert resident_kib(segment) * 1024 > bound
        store.flush()
        assert resident_kib(segment) * 1024 <= bound
        assert store.get_by_offset_id(results[0].offset_msg_id).body == body
