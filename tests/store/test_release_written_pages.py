"""A long-running writer gives back the mapped pages of what it wrote and synced (issue #14:
the server's RSS grew with every byte written): the data stays, read back through the page
cache, and a private (copy-on-write) mapping never gives up its pages."""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np

from store.engine.lifecycle import RESIDENT_INDEX_TAIL_BYTES, RESIDENT_TAIL_BYTES
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


def test_a_private_mapping_keeps_the_pages_it_wrote_and_gives_back_the_others(tmp_path):
    path = tmp_path / "00000000000000000000"
    on_disk = bytes(range(256)) * (SIZE // 256)
    path.write_bytes(on_disk)
    private = MappedFile(path, SIZE, writable=False, private=True)
    page = mmap.PAGESIZE
    private.write(3 * page + 10, b"\1" * page)  # only in this process's memory, across two pages
    grid = np.frombuffer(private.buf, dtype=np.uint8)
    grid[7 * page : 8 * page] = 2  # through another view, as the index writes
    private.mark_dirty(7 * page, 8 * page)
    del grid
    assert bytes(private.buf) != on_disk and resident_kib(path) * 1024 >= SIZE  # every page read
    private.release_before(SIZE)
    assert resident_kib(path) * 1024 <= 5 * page  # the pages written, from the first to the last
    expected = bytearray(on_disk)
    expected[3 * page + 10 : 4 * page + 10] = b"\1" * page
    expected[7 * page : 8 * page] = b"\2" * page
    assert bytes(private.buf) == bytes(expected)  # the others read back from the file
    private.close()
    assert path.read_bytes() == on_disk


def test_a_private_file_created_in_memory_keeps_every_page(tmp_path):
    private = MappedFile(tmp_path / "00000000000000000000", SIZE, writable=False, create=True, private=True)
    private.buf[:4] = b"kept"  # no file behind it: memory the release must not zero
    private.release_before(SIZE)
    assert private.buf[:4] == b"kept" and not (tmp_path / "00000000000000000000").exists()
    private.close()


def flushed_by_hand(**overrides):
    """Asynchronous flushing with the periodic flusher held off (an hour): each test flushes when it means to."""
    return small_config(flush="async", flush_interval_ms=3_600_000, **overrides)


def test_a_flush_releases_the_log_behind_its_resident_tail(tmp_path):
    geometry = small_config().geometry.__class__(64 * 1024 * 1024, 20 * 1000, 1000, 4000)
    with MessageStore.open(tmp_path, flushed_by_hand(geometry=geometry)) as store:
        body = b"m" * 4000
        results = [store.put(NewMessage("Orders", body)) for _ in range(10_000)]  # about 40 MiB
        [segment] = [path for _, path in store.commitlog.segments()]
        # What may stay mapped: the resident tail, and what the warmer faulted in ahead of the writer.
        bound = geometry.commitlog_file_size - (store.commitlog.end - RESIDENT_TAIL_BYTES) + mmap.PAGESIZE
        assert resident_kib(segment) * 1024 > bound
        store.flush()
        assert resident_kib(segment) * 1024 <= bound
        assert store.get_by_offset_id(results[0].offset_msg_id).body == body


def test_records_behind_the_tail_are_read_without_mapping_them_and_pages_mapped_are_released(tmp_path):
    geometry = small_config().geometry.__class__(64 * 1024 * 1024, 20 * 1000, 1000, 4000)
    with MessageStore.open(tmp_path, flushed_by_hand(geometry=geometry)) as store:
        body = b"r" * 4000
        results = [store.put(NewMessage("Orders", body, keys=[f"k{n}"])) for n in range(10_000)]
        store.flush()
        [segment] = [path for _, path in store.commitlog.segments()]
        settled = resident_kib(segment)
        for n, result in enumerate(results[:2_000]):  # about 8 MiB from the oldest end, far behind the tail
            msg = store.get_by_offset_id(result.offset_msg_id)
            assert (msg.body, msg.keys, msg.phys_offset) == (body, [f"k{n}"], result.phys_offset)
        assert resident_kib(segment) <= settled + 8
        for result in results[:2_000]:  # read through the mapping, as the dispatcher reads
            mapped, pos = store.commitlog.view(result.phys_offset)
            assert bytes(mapped.buf[pos + 4000:pos + 4004])
        assert resident_kib(segment) >= settled + 7 * 1024
        store.flush()
        assert resident_kib(segment) <= settled + 4


def test_a_copy_read_with_pread_decodes_as_the_mapped_record(tmp_path):
    with MessageStore.open(tmp_path, flushed_by_hand()) as store:
        results = [store.put(NewMessage("Orders", bytes([n % 251]) * (n * 37 % 9000), keys=[f"k{n}"],
                                        properties={"n": str(n)})) for n in range(300)]
        store.flush()
        log = store.commitlog
        for result in results:
            mapped = log.read(result.phys_offset)
            log.release_before(log.end)
            copied = log.read_apart(result.phys_offset)
            assert copied == mapped
            log._released_to = 0


def test_a_flush_releases_the_index_entries_but_the_newest(tmp_path):
    geometry = small_config().geometry.__class__(64 * 1024 * 1024, 20 * 100_000, 100_000, 400_000)
    with MessageStore.open(tmp_path, flushed_by_hand(geometry=geometry)) as store:
        for n in range(60_000):  # two keys each, 20 bytes an entry: about 2.3 MiB of entries
            store.put(NewMessage("Orders", b"k", keys=[f"order-{n}", f"customer-{n % 97}"]))
        [index] = store.index.files
        assert index.used_entries * 20 > 2 * RESIDENT_INDEX_TAIL_BYTES
        store.flush()
        slot_table = 100_000 * 4
        assert resident_kib(index.path) * 1024 <= slot_table + RESIDENT_INDEX_TAIL_BYTES + 3 * mmap.PAGESIZE
        [found] = store.query_by_key("Orders", "order-7").messages
        assert found.keys == ["order-7", "customer-7"]
