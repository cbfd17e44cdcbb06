"""Delayed delivery with a fake clock: RocketMQ's retry schedule end to end, and restarts."""

from __future__ import annotations

import json
import shutil

import pytest

from store.clock import FakeClock
from store.errors import InvalidConfigError, StoreError
from store.format import topics
from store.format.delay_levels import DEFAULT_DELAY_LEVELS, DelayLevels
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


def put_delayed(store, level, body=b"x"):
    return store.put(NewMessage(topic="Orders", body=body, delay_level=level, queue_id=0))


def delivered_bodies(store):
    return [store.read(r.phys_offset).body for r in store.deliver_due().delivered]


def test_a_table_change_applies_to_new_messages_while_scheduled_ones_keep_their_time(tmp_path):
    clock = FakeClock(START_MS)
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        old = put_delayed(store, 3, b"old")  # 10 s
        clock.advance(1_000)
        store.set_delay_levels("1s 5s 2s")
        assert store.delay_level_table() == "1s 5s 2s"
        new = put_delayed(store, 3, b"new")  # 2 s: due before the old one, in the same queue
        cq = store.queues.get(topics.SCHEDULE_TOPIC, 2)
        assert [cq.get(p.queue_offset).tags_code for p in (old, new)] == [START_MS + 10_000, START_MS + 3_000]
        clock.set(START_MS + 2_999)
        assert delivered_bodies(store) == []
        clock.set(START_MS + 3_000)
        assert delivered_bodies(store) == [b"new"]
        clock.set(START_MS + 9_999)
        assert delivered_bodies(store) == []
        clock.set(START_MS + 10_000)
        assert delivered_bodies(store) == [b"old"]
        assert store.scheduler.pending()[3] == 0
        assert store.check().ok


def test_messages_split_by_a_table_change_are_delivered_once_across_a_restart(tmp_path):
    clock = FakeClock(START_MS)
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        put_delayed(store, 3, b"old")
        store.set_delay_levels("1s 5s 2s")
        put_delayed(store, 3, b"new")
        clock.set(START_MS + 2_000)
        assert delivered_bodies(store) == [b"new"]
    saved = json.loads((tmp_path / "config" / "delayOffset.json").read_text())
    assert saved == {"offsetTable": {"3": 0}, "laterRuns": {"3": [[1, 2]]}}
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        assert store.scheduler.pending()[3] == 1
        clock.set(START_MS + 10_000)
        assert delivered_bodies(store) == [b"old"]
        clock.set(START_MS + 10**9)
        assert delivered_bodies(store) == []
    saved = json.loads((tmp_path / "config" / "delayOffset.json").read_text())
    assert saved == {"offsetTable": {"3": 2}}


def test_shrinking_the_table_delivers_nothing_early_and_still_delivers_dropped_levels(tmp_path):
    clock = FakeClock(START_MS)
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        put_delayed(store, 18, b"2h")
        store.set_delay_levels("1s")
        clamped = put_delayed(store, 5, b"clamped")
        assert (clamped.queue_id, store.read(clamped.phys_offset).properties["DELAY"]) == (0, "1")
        clock.advance(1_000)
        assert delivered_bodies(store) == [b"clamped"]
        clock.set(START_MS + 7_200_000 - 1)
        assert delivered_bodies(store) == []
        assert store.scheduler.pending()[18] == 1
        clock.set(START_MS + 7_200_000)
        assert delivered_bodies(store) == [b"2h"]


@pytest.mark.parametrize("bad", ["", " ", "1x", "1s  2s", "1s ", "0s", "-1s", "s", "41d", " ".join(["1s"] * 1025),
                                 None, 5])
def test_a_bad_delay_table_is_refused_and_changes_nothing(tmp_path, bad):
    with MessageStore.open(tmp_path, small_config(), clock=FakeClock(START_MS)) as store:
        with pytest.raises(InvalidConfigError):
            store.set_delay_levels(bad)
        assert store.delay_level_table() == DEFAULT_DELAY_LEVELS
        assert not (tmp_path / "config" / "delayLevels.json").exists()


def test_the_table_persists_and_wins_over_the_configured_one(tmp_path):
    clock = FakeClock(START_MS)
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        old = put_delayed(store, 2, b"old")  # 5 s
        store.set_delay_levels("2s 4s")
    assert json.loads((tmp_path / "config" / "delayLevels.json").read_text())["delayLevels"] == "2s 4s"
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        assert store.delay_level_table() == "2s 4s"
        new = put_delayed(store, 2, b"new")  # 4 s
        clock.set(START_MS + 4_000)
        assert delivered_bodies(store) == [b"new"]
        clock.set(START_MS + 4_999)
        assert delivered_bodies(store) == []
        clock.set(START_MS + 5_000)
        assert delivered_bodies(store) == [b"old"]
    shutil.rmtree(tmp_path / "consumequeue")  # rebuilt from the commit log on open
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        cq = store.queues.get(topics.SCHEDULE_TOPIC, 1)
        assert [cq.get(p.queue_offset).tags_code for p in (old, new)] == [START_MS + 5_000, START_MS + 4_000]
        assert store.check().ok


def test_a_longer_table_adds_levels(tmp_path):
    clock = FakeClock(START_MS)
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        put_delayed(store, 1)
        assert store.metadata.topic(topics.SCHEDULE_TOPIC).queues == 18
        store.set_delay_levels(DEFAULT_DELAY_LEVELS + " 3h 4h")
        put = put_delayed(store, 25, b"4h")
        assert (put.topic, put.queue_id) == (topics.SCHEDULE_TOPIC, 19)
        clock.set(START_MS + 4 * 3_600_000 - 1)
        assert delivered_bodies(store) == [b"x"]
        clock.advance(1)
        assert delivered_bodies(store) == [b"4h"]
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        assert store.metadata.topic(topics.SCHEDULE_TOPIC).queues == 20


@pytest.mark.parametrize("later", ['{"3": [[1, 0]]}', '{"3": [[5, 6], [4, 7]]}', '{"3": "x"}', '{"x": [[1, 2]]}'])
def test_unreadable_later_runs_are_reported(tmp_path, later):
    MessageStore.open(tmp_path, small_config(), clock=FakeClock(START_MS)).close()
    (tmp_path / "config").mkdir(exist_ok=True)
    (tmp_path / "config" / "delayOffset.json").write_text('{"offsetTable": {"3": 0}, "laterRuns": ' + later + "}")
    with pytest.raises(StoreError, match="delayOffset.json"):
        MessageStore.open(tmp_path, small_config(), clock=FakeClock(START_MS))
