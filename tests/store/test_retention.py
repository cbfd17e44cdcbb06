"""Retention deletes expired segments oldest first, never the live one, with the consume queue
and index files that point into them; a dead letter can tell when it expires."""

from __future__ import annotations

import os
import time

import pytest

from store.clock import FakeClock
from store.errors import MessageNotFoundError
from store.log.retention import HOUR_MS
from store.message_store import MessageStore, NewMessage
from tests.store.helpers import small_config

RESERVED_MS = 72 * HOUR_MS


def age(path, now_ms, hours):
    seconds = (now_ms - hours * HOUR_MS) / 1000
    os.utime(path, (seconds, seconds))


@pytest.fixture
def filled(tmp_path):
    """A store over four or more segments (the golden geometry's are 32 KiB), with the real time."""
    clock = FakeClock(time.time_ns() // 1_000_000)
    store = MessageStore.open(tmp_path, small_config(), clock=clock)
    results = store.put_many([NewMessage("Orders", b"x" * 900, queue_id=i % 2, keys=[f"k{i}"]) for i in range(300)])
    assert store.commitlog.segment_count >= 4
    yield store, clock, results
    store.close()


def test_expired_segments_go_oldest_first_and_stop_at_the_first_kept(filled):
    store, clock, results = filled
    segments = [path for _, path in store.commitlog.segments()]
    now = clock.now_ms()
    for path in segments:
        age(path, now, 1)
    age(segments[0], now, 73)
    age(segments[1], now, 80)
    age(segments[3], now, 90)  # behind a segment that is kept: stays
    expiry = store.expires_at(results[0].phys_offset)
    assert expiry.exact and abs(expiry.at_ms - (now - 73 * HOUR_MS + RESERVED_MS)) < 1000

    done = store.delete_expired()
    assert done.deleted == segments[:2]
    assert store.commitlog.min_offset == done.min_phys_offset == 2 * store.geometry.commitlog_file_size
    assert [p.exists() for p in segments] == [False, False, True, True] + [True] * (len(segments) - 4)
    gone = [r for r in results if r.phys_offset < done.min_phys_offset]
    kept = [r for r in results if r.phys_offset >= done.min_phys_offset]
    with pytest.raises(MessageNotFoundError):
        store.get_by_offset_id(gone[-1].offset_msg_id)
    assert store.get_by_offset_id(kept[0].offset_msg_id).keys == [f"k{results.index(kept[0])}"]
    assert store.query_by_key("Orders", "k0").messages == []
    for queue_id, low, _ in store.topics()["Orders"]:
        first_kept = min(r.queue_offset for r in kept if r.queue_id == queue_id)
        assert low == first_kept
        assert store.pull("G", "Orders", queue_id, 0, 1).messages[0].queue_offset == first_kept
    assert store.check().ok


def test_the_live_segment_is_never_deleted(tmp_path):
    clock = FakeClock(time.time_ns() // 1_000_000)
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        put = store.put(NewMessage("Orders", b"x"))
        [(_, path)] = store.commitlog.segments()
        age(path, clock.now_ms(), 1000)
        assert store.delete_expired().deleted == []
        assert store.read(put.phys_offset).body == b"x"
        expiry = store.expires_at(put.phys_offset)
        assert not expiry.exact and expiry.at_ms == clock.now_ms() + RESERVED_MS


def test_a_store_reopens_after_retention(filled, tmp_path):
    store, clock, results = filled
    segments = [path for _, path in store.commitlog.segments()]
    age(segments[0], clock.now_ms(), 100)
    store.delete_expired()
    last = results[-1]
    store.close()
    with MessageStore.open(tmp_path, small_config(), clock=clock) as again:
        assert again.commitlog.min_offset == again.geometry.commitlog_file_size
        assert again.get_by_offset_id(last.offset_msg_id).queue_offset == last.queue_offset
        after = again.put(NewMessage("Orders", b"new", queue_id=last.queue_id))
        assert after.queue_offset == last.queue_offset + 1
        assert again.check().ok
