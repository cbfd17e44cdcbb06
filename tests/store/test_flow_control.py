"""Sends fail fast with a flow-control error when the disk is (nearly) full or the store is busy;
reads go on and nothing is corrupted."""

from __future__ import annotations

import os
import threading

import pytest

from store.errors import DiskFullError, FlowControlError
from store.log.geometry import StoreGeometry
from store.message_store import MessageStore, NewMessage
from tests.conftest import GOLDEN_GEOMETRY
from tests.store.helpers import small_config


def test_a_nearly_full_disk_refuses_sends_and_keeps_reads(tmp_path):
    with MessageStore.open(tmp_path, small_config()) as store:
        kept = store.put(NewMessage("Orders", b"before"))
    with MessageStore.open(tmp_path, small_config(disk_max_used_ratio=1e-9)) as store:
        with pytest.raises(DiskFullError, match="writes are refused") as refused:
            store.put(NewMessage("Orders", b"after"))
        assert refused.value.retry_after_s > 0
        assert store.get_by_offset_id(kept.offset_msg_id).body == b"before"
        assert store.topics()["Orders"] == [(kept.queue_id, 0, 1)]
        assert store.check().ok


def test_too_little_free_space_refuses_sends(tmp_path):
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    with MessageStore.open(tmp_path, small_config(disk_min_free_bytes=free * 2)) as store, \
            pytest.raises(DiskFullError):
        store.put_many([NewMessage("Orders", b"x")])


def test_a_segment_the_disk_cannot_hold_refuses_the_batch_and_leaves_no_file(tmp_path):
    stats = os.statvfs(tmp_path)
    beyond_free = (stats.f_bavail * stats.f_frsize // 2**20 + 1024) * 2**20
    geometry = StoreGeometry(beyond_free, GOLDEN_GEOMETRY.cq_file_size, GOLDEN_GEOMETRY.index_slots,
                             GOLDEN_GEOMETRY.index_entries)
    config = small_config(geometry=geometry, disk_max_used_ratio=1.0, disk_min_free_bytes=0)
    with MessageStore.open(tmp_path, config) as store:
        with pytest.raises(DiskFullError, match="no space left"):
            store.put_many([NewMessage("Orders", b"x"), NewMessage("Orders", b"y")])
        assert os.listdir(store.paths.commitlog) == []
        assert store.topics() == {}
        assert store.check().ok
    with MessageStore.open(tmp_path, config) as again:
        assert not again.abnormal_shutdown and again.commitlog.end == 0


def test_a_busy_store_refuses_sends_after_the_wait_limit(tmp_path):
    with MessageStore.open(tmp_path, small_config(put_wait_ms=50)) as store:
        holding, release = threading.Event(), threading.Event()

        def hold_the_store():
            with store._lock:
                holding.set()
                release.wait(10)

        holder = threading.Thread(target=hold_the_store)
        holder.start()
        try:
            assert holding.wait(10)
            with pytest.raises(FlowControlError, match="busy"):
                store.put(NewMessage("Orders", b"x"))
        finally:
            release.set()
            holder.join()
        assert store.put(NewMessage("Orders", b"x")).queue_offset == 0


def test_a_crash_while_a_file_is_being_created_leaves_no_short_file(tmp_path, monkeypatch):
    """The file is named only once it has its full size: a writer killed while reserving its
    blocks (here: an interrupt inside the reservation) leaves nothing the next open would refuse."""
    from store.log import mapped_file

    def killed(fd, size):
        raise KeyboardInterrupt

    monkeypatch.setattr(mapped_file, "_reserve", killed)
    with pytest.raises(KeyboardInterrupt):
        mapped_file.MappedFile(tmp_path / "00000000000000000000", 4096, writable=True, create=True)
    assert os.listdir(tmp_path) == []
    monkeypatch.undo()
    created = mapped_file.MappedFile(tmp_path / "00000000000000000000", 4096, writable=True, create=True)
    try:
        assert os.path.getsize(tmp_path / "00000000000000000000") == 4096
        with pytest.raises(FileExistsError):
            mapped_file.MappedFile(tmp_path / "00000000000000000000", 4096, writable=True, create=True)
    finally:
        created.close()
