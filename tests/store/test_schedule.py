"""Delayed delivery with a fake clock: RocketMQ's retry schedule end to end, and restarts."""

from __future__ import annotations

import json

from store.clock import FakeClock
from store.delay_levels import DelayLevels
from store.message_store import MessageStore, NewMessage
from tests.store.helpers import small_config

START_MS = 1_700_000_000_000


def test_an_always_failing_consumer_sees_rocketmqs_retry_schedule(tmp_path):
    clock = FakeClock(START_MS)
    delays = DelayLevels().delays_ms
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        original = store.put(NewMessage(topic="Orders", body=b"pay", tags="TagA", keys=["o-1"]))
        current = original
        waits = []
        for attempt in range(1, 17):
            scheduled, route = store.send_back(current.phys_offset, "GID_pay")
            due_at = store.get_by_queue_offset(scheduled.topic, scheduled.queue_id, scheduled.queue_offset)
            wait = delays[route.delay_level - 1]
            clock.advance(wait - 1)
            assert store.deliver_due().delivered == []  # one millisecond early: nothing
            clock.advance(1)
            delivered = store.deliver_due().delivered
            assert [(d.topic, d.queue_id) for d in delivered] == [("%RETRY%GID_pay", 0)]
            retry = store.read(delivered[0].phys_offset)
            assert retry.reconsume_times == attempt and retry.unique_key == due_at.unique_key
            assert retry.properties["REAL_TOPIC"] == "%RETRY%GID_pay"  # RocketMQ copies the string as it is
            assert retry.store_timestamp == scheduled.store_timestamp + wait
            waits.append(wait // 1000)
            current = delivered[0]
        assert waits == [10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200]
        last, route = store.send_back(current.phys_offset, "GID_pay")
        dead = store.read(last.phys_offset)
        assert route.dead_letter and (dead.topic, dead.reconsume_times) == ("%DLQ%GID_pay", 17)
        assert dead.properties["ORIGIN_MESSAGE_ID"] == original.offset_msg_id
        clock.advance(10**9)
        assert store.deliver_due().delivered == []
        assert store.check().ok


def test_delivery_progress_survives_a_restart_and_reads_rocketmqs_form(tmp_path):
    clock = FakeClock(START_MS)
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        for i in range(3):
            store.put(NewMessage(topic="Orders", body=b"m%d" % i, delay_level=1, queue_id=i))
        clock.advance(1000)
        assert len(store.deliver_due().delivered) == 3
        store.put(NewMessage(topic="Orders", body=b"later", delay_level=2, queue_id=0))
    saved = json.loads((tmp_path / "config" / "delayOffset.json").read_text())
    assert saved == {"offsetTable": {"1": 3}}
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        assert store.deliver_due().delivered == []  # nothing delivered twice
        assert store.scheduler.pending() == {1: 0, 2: 1}
        clock.advance(5000)
        assert [r.topic for r in store.deliver_due().delivered] == ["Orders"]
    (tmp_path / "config" / "delayOffset.json").write_text('{"dataVersion":{"counter":0},"offsetTable":{1:3,2:0}}')
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        assert store.scheduler.progress() == {1: 3, 2: 0}
        assert [r.topic for r in store.deliver_due().delivered] == ["Orders"]  # level 2 again: at least once


def test_a_scheduled_message_without_a_real_topic_is_skipped_not_stuck(tmp_path):
    clock = FakeClock(START_MS)
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        store.put(NewMessage(topic="SCHEDULE_TOPIC_XXXX", body=b"odd", queue_id=0,
                             properties={"DELAY": "1"}))
        store.put(NewMessage(topic="Orders", body=b"fine", delay_level=1, queue_id=0))
        clock.advance(1000)
        result = store.deliver_due()
        assert [r.topic for r in result.delivered] == ["Orders"]
        assert len(result.skipped) == 1 and "undeliverable" in result.skipped[0][1]
        assert store.deliver_due().skipped == []
