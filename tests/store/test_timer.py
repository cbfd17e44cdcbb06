"""Arbitrary delivery times (TIMER_DELIVER_MS): exact delivery with a fake clock, restarts,
crashes, and the background scheduler on the real clock."""

from __future__ import annotations

import json
import shutil

import pytest

from store.broker.timer import TIMER_PROGRESS_FILE
from store.broker.trace import TraceKind
from store.clock import FakeClock, SystemClock
from store.errors import InvalidMessageError, StoreError
from store.format import topics
from store.format.delay_levels import MAX_DELAY_MS
from store.message_store import MessageStore, NewMessage
from store.projections.consume_queue import ConsumeQueue
from tests.live_server import wait_until
from tests.store.helpers import small_config

START_MS = 1_700_000_000_000


def timed(at_ms: int, body: bytes = b"pay", topic: str = "Orders", **kwargs) -> NewMessage:
    return NewMessage(topic=topic, body=body, properties={topics.TIMER_DELIVER_MS: str(at_ms)}, **kwargs)


def copies(store: MessageStore, topic: str = "Orders") -> list:
    """Every record of `topic`, queue by queue."""
    found = []
    for queue_id, low, high in store.topics().get(topic, []):
        found += [store.get_by_queue_offset(topic, queue_id, offset) for offset in range(low, high)]
    return found


def test_a_timed_message_is_delivered_at_its_time_and_not_a_millisecond_before(tmp_path):
    clock = FakeClock(START_MS)
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        at = START_MS + 5_000
        put = store.put(timed(at, tags="TagA", keys=["o-1"], queue_id=2))
        assert (put.topic, put.queue_id) == (topics.TIMER_TOPIC, 0)
        assert store.queues.get(topics.TIMER_TOPIC, 0).get(put.queue_offset).tags_code == at
        waiting = store.read(put.phys_offset)
        assert (waiting.properties["REAL_TOPIC"], waiting.properties["REAL_QID"]) == ("Orders", "2")
        assert store.timer.pending() == 1

        clock.advance(4_999)
        assert store.deliver_due().delivered == []
        clock.advance(1)
        delivered = store.deliver_due().delivered
        assert [(d.topic, d.queue_id) for d in delivered] == [("Orders", 2)]
        copy = store.read(delivered[0].phys_offset)
        assert copy.unique_key == put.unique_key == delivered[0].unique_key
        assert (copy.body, copy.tags, copy.keys, copy.store_timestamp) == (b"pay", "TagA", ["o-1"], at)
        assert store.deliver_due().delivered == []
        assert store.timer.pending() == 0
        assert store.check().ok


def test_times_put_out_of_order_are_delivered_in_time_order(tmp_path):
    clock = FakeClock(START_MS)
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        offsets_ms = [700, 100, 900, 100, 300]
        for i, offset in enumerate(offsets_ms):
            store.put(timed(START_MS + offset, body=b"m%d" % i, queue_id=0))
        delivered = []
        for step in range(1, 10):
            clock.set(START_MS + step * 100)
            batch = store.deliver_due().delivered
            assert all(store.read(r.phys_offset).store_timestamp == START_MS + step * 100 for r in batch)
            delivered += [store.read(r.phys_offset).body for r in batch]
        assert delivered == [b"m1", b"m3", b"m4", b"m0", b"m2"]


@pytest.mark.parametrize("offset_ms", [-60_000, 0])
def test_a_time_in_the_past_or_now_is_delivered_at_once(tmp_path, offset_ms):
    clock = FakeClock(START_MS)
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        put = store.put(timed(START_MS + offset_ms, queue_id=1))
        assert (put.topic, put.queue_id) == ("Orders", 1)
        assert store.read(put.phys_offset).properties[topics.TIMER_DELIVER_MS] == str(START_MS + offset_ms)
        assert store.timer.pending() == 0 and store.deliver_due().delivered == []


def test_a_time_too_far_ahead_or_malformed_is_refused_with_the_whole_batch(tmp_path):
    clock = FakeClock(START_MS)
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        assert store.put(timed(START_MS + MAX_DELAY_MS)).topic == topics.TIMER_TOPIC  # 40 days: the longest
        for bad in (START_MS + MAX_DELAY_MS + 1, "soon", "-5", "1.5", "", " 1700000000000", "9" * 19):
            batch = [NewMessage("Orders", b"fine"), timed(bad)]
            with pytest.raises(InvalidMessageError, match="TIMER_DELIVER_MS|days ahead|empty"):
                store.put_many(batch)
        assert "Orders" not in store.topics()
        assert store.timer.pending() == 1


def test_a_delay_level_wins_over_a_delivery_time(tmp_path):
    clock = FakeClock(START_MS)
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        message = timed(START_MS + 60_000, delay_level=1)
        put = store.put(message)
        assert put.topic == topics.SCHEDULE_TOPIC
        assert topics.TIMER_DELIVER_MS not in store.read(put.phys_offset).properties
        assert message.properties == {topics.TIMER_DELIVER_MS: str(START_MS + 60_000)}  # the caller's is kept


def test_a_timed_record_without_a_real_topic_is_skipped_not_stuck(tmp_path):
    clock = FakeClock(START_MS)
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        store.put(NewMessage(topics.TIMER_TOPIC, b"odd", properties={"REAL_TOPIC": topics.TIMER_TOPIC,
                                                                      "REAL_QID": "0"}))
        store.put(timed(START_MS + 1))
        clock.advance(1)
        result = store.deliver_due()
        assert [r.topic for r in result.delivered] == ["Orders"]
        assert len(result.skipped) == 1 and "scheduling topic" in result.skipped[0][1]
        assert store.deliver_due() == type(result)()
        assert store.timer.pending() == 0


def test_restart_before_and_after_delivery_loses_nothing_and_delivers_nothing_twice(tmp_path):
    clock = FakeClock(START_MS)
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        first = store.put(timed(START_MS + 1_000, body=b"first"))
        store.put(timed(START_MS + 3_000, body=b"second"))
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        assert store.timer.pending() == 2
        clock.advance(1_000)
        assert [store.read(r.phys_offset).body for r in store.deliver_due().delivered] == [b"first"]
    progress = json.loads((tmp_path / "config" / TIMER_PROGRESS_FILE).read_text())
    assert progress == {"deliveredThrough": [START_MS + 1_000, first.queue_offset], "watermark": 1}
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        assert store.timer.pending() == 1
        assert store.deliver_due().delivered == []
        clock.advance(2_000)
        assert [store.read(r.phys_offset).body for r in store.deliver_due().delivered] == [b"second"]
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        clock.advance(10**9)
        assert store.deliver_due().delivered == []
        assert sorted(m.body for m in copies(store)) == [b"first", b"second"]


def test_a_time_at_or_before_the_last_delivered_goes_straight_to_its_topic(tmp_path):
    clock = FakeClock(START_MS)
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        store.put(timed(START_MS + 1_000))
        clock.advance(1_000)
        store.deliver_due()
        clock.set(START_MS)  # the clock went back: the timer has delivered up to START_MS + 1000
        assert store.put(timed(START_MS + 1_000, body=b"late")).topic == "Orders"
        assert store.put(timed(START_MS + 1_001, body=b"later")).topic == topics.TIMER_TOPIC


def test_after_a_crash_every_timed_message_is_delivered_at_least_once(tmp_path):
    clock = FakeClock(START_MS)
    store = MessageStore.open(tmp_path / "live", small_config(), clock=clock)
    try:
        store.put(timed(START_MS + 1_000, body=b"first"))
        store.put(timed(START_MS + 2_000, body=b"second"))
        store.flush()
        clock.advance(1_000)
        assert len(store.deliver_due().delivered) == 1
        shutil.copytree(tmp_path / "live", tmp_path / "unsaved")  # a crash before the progress was saved
        store.flush()
        shutil.copytree(tmp_path / "live", tmp_path / "saved")  # a crash after it was saved
    finally:
        store.close()
    for name, first_copies in (("unsaved", 2), ("saved", 1)):
        with MessageStore.open(tmp_path / name, small_config(), clock=clock) as crashed:
            assert crashed.abnormal_shutdown
            clock.set(START_MS + 2_000)
            crashed.deliver_due()
            bodies = [m.body for m in copies(crashed)]
            assert (bodies.count(b"first"), bodies.count(b"second")) == (first_copies, 1), name
            assert crashed.deliver_due().delivered == []


def test_a_producer_resending_a_timed_message_after_a_restart_is_not_stored_twice(tmp_path):
    clock = FakeClock(START_MS)
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        first = store.put(timed(START_MS + 60_000, unique_key="AC1F0000000000000000000000000001"))
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        again = store.put(timed(START_MS + 60_000, unique_key="AC1F0000000000000000000000000001"))
        assert (again.topic, again.phys_offset) == (topics.TIMER_TOPIC, first.phys_offset)
        assert store.timer.pending() == 1


def test_the_timeline_shows_when_a_timed_message_waits_and_is_released(tmp_path):
    clock = FakeClock(START_MS)
    with MessageStore.open(tmp_path, small_config(trace=True), clock=clock) as store:
        put = store.put(timed(START_MS + 5_000))
        clock.advance(5_000)
        released = store.deliver_due().delivered[0]
        scheduled, release = store.timeline(put.unique_key)
        assert (scheduled.kind, scheduled.topic, scheduled.due_ms, scheduled.real_topic) == (
            TraceKind.SCHEDULED, topics.TIMER_TOPIC, START_MS + 5_000, "Orders")
        assert (release.kind, release.topic, release.offset_msg_id, release.due_ms) == (
            TraceKind.RELEASED, "Orders", released.offset_msg_id, START_MS + 5_000)


def test_unreadable_timer_progress_is_reported(tmp_path):
    MessageStore.open(tmp_path, small_config(), clock=FakeClock(START_MS)).close()
    (tmp_path / "config").mkdir(exist_ok=True)
    for content in ('{"watermark": "x"}', '{"deliveredThrough": 5}', "not json"):
        (tmp_path / "config" / TIMER_PROGRESS_FILE).write_text(content)
        (tmp_path / "config" / (TIMER_PROGRESS_FILE + ".bak")).unlink(missing_ok=True)
        with pytest.raises(StoreError, match="timer progress"):
            MessageStore.open(tmp_path, small_config(), clock=FakeClock(START_MS))


def test_a_pass_with_nothing_due_reads_only_the_head_of_each_queue(tmp_path, monkeypatch):
    clock = FakeClock(START_MS)
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        store.put_many([NewMessage("Orders", b"x", delay_level=level) for level in (3, 18) for _ in range(200)])
        store.put_many([timed(START_MS + 60_000 + i) for i in range(400)])
        assert store.deliver_due().delivered == []  # the first pass loads the timer queue
        reads = []
        unit_at = ConsumeQueue.get
        monkeypatch.setattr(ConsumeQueue, "get", lambda cq, offset: reads.append(offset) or unit_at(cq, offset))
        assert store.deliver_due().delivered == []
        assert store.scheduler.next_due_ms(clock.now_ms()) == START_MS + 10_000
        assert store.timer.next_due_ms() == START_MS + 60_000
        assert len(reads) == 4  # the heads of levels 3 and 18, twice


def test_the_background_scheduler_delivers_at_the_time_without_waiting_for_its_interval(tmp_path):
    config = small_config(schedule_interval_ms=5_000)  # idle, it would look again only after 5 s
    with MessageStore.open(tmp_path, config, clock=SystemClock()) as store:
        assert wait_until(lambda: store._scheduler_thread is not None, 1, "the scheduler thread", poll_s=0.005)
        at = store.clock.now_ms() + 200
        put = store.put(timed(at))
        assert put.topic == topics.TIMER_TOPIC
        assert wait_until(lambda: copies(store), 3, "the delivery within 3 s", poll_s=0.005)
        copy = copies(store)[0]
        assert copy.unique_key == put.unique_key
        assert at <= copy.store_timestamp < at + 3_000
