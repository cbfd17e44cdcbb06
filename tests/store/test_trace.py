"""Lifecycle trace records and producer duplicate suppression."""

from __future__ import annotations

import shutil

import pytest

from store.broker.trace import TraceKind
from store.clock import FakeClock
from store.format import topics
from store.message_store import MessageStore, NewMessage
from tests.store.helpers import small_config


def stored_count(store, topic):
    return sum(high - low for _, low, high in store.topics().get(topic, []))


def open_store(path, clock, **overrides):
    return MessageStore.open(path, small_config(**{"trace": True, **overrides}), clock=clock)


def test_timeline_follows_a_message_through_schedule_retry_and_dead_letter(tmp_path):
    clock = FakeClock()
    with open_store(tmp_path, clock) as store:
        store.metadata.update_group("G", max_reconsume_times=1)
        put = store.put(NewMessage("Orders", b"x", tags="created"))
        store.send_back(put.phys_offset, "G", reason="timeout talking to the bank")
        clock.advance(10_000)
        released = store.deliver_due().delivered
        assert [r.topic for r in released] == ["%RETRY%G"]
        retry_copy = released[0]
        store.send_back(retry_copy.phys_offset, "G", reason="still failing")

        events = store.timeline(put.unique_key)
        assert [e.kind for e in events] == [TraceKind.STORED, TraceKind.FAILED, TraceKind.RETRY, TraceKind.RELEASED,
                                            TraceKind.FAILED, TraceKind.DEAD_LETTER]
        stored, failed, retry, release, failed_again, dead = events
        assert (stored.topic, stored.offset_msg_id) == ("Orders", put.offset_msg_id)
        assert (failed.group, failed.attempt, failed.reason) == ("G", 1, "timeout talking to the bank")
        assert retry.topic == topics.SCHEDULE_TOPIC and retry.real_topic == "%RETRY%G"
        assert retry.due_ms == stored.at_ms + 10_000 and retry.reconsume_times == 1
        assert (release.topic, release.offset_msg_id) == ("%RETRY%G", retry_copy.offset_msg_id)
        assert failed_again.attempt == 2 and failed_again.reason == "still failing"
        assert dead.topic == "%DLQ%G" and dead.reconsume_times == 2 and "maximum" in dead.reason

        # Any copy's offset id leads to the same whole history.
        assert store.timeline(dead.offset_msg_id) == events
        assert store.timeline(retry_copy.offset_msg_id) == events
        assert store.timeline("0" * 32) == []


def test_delayed_put_is_traced_with_its_due_time(tmp_path):
    clock = FakeClock()
    with open_store(tmp_path, clock) as store:
        put = store.put(NewMessage("Orders", b"x", delay_level=4))
        [event] = store.timeline(put.unique_key)
        assert event.kind == TraceKind.SCHEDULED
        assert event.due_ms == clock.now_ms() + 30_000 and event.real_topic == "Orders"


def test_trace_off_writes_no_trace_records(tmp_path):
    with open_store(tmp_path, FakeClock(), trace=False) as store:
        put = store.put(NewMessage("Orders", b"x"))
        assert store.timeline(put.unique_key) == []
        assert topics.TRACE_TOPIC not in store.topics()


@pytest.mark.parametrize("flush", ["sync", "async"])
def test_a_unique_key_with_spaces_is_stored_and_traced_by_its_offset_id(tmp_path, flush):
    """A client may set any UNIQ_KEY: the put succeeds and its trace is keyed by the offset id."""
    with open_store(tmp_path, FakeClock(), flush=flush) as store:
        put = store.put(NewMessage("Orders", b"x", properties={"UNIQ_KEY": "has space"}))
        assert put.unique_key == "has space" and stored_count(store, "Orders") == 1
        [event] = store.timeline(put.offset_msg_id)
        assert event.kind is TraceKind.STORED and event.unique_key == "has space"
        assert store.put(NewMessage("Orders", b"y")).topic == "Orders"  # later puts are not held up


def test_a_resent_unique_key_is_stored_once(tmp_path):
    clock = FakeClock()
    with open_store(tmp_path, clock) as store:
        first = store.put(NewMessage("Orders", b"x", unique_key="CLIENT-KEY-1"))
        clock.advance(1000)
        again = store.put(NewMessage("Orders", b"x again", unique_key="CLIENT-KEY-1"))
        assert again == first
        batch = store.put_many([NewMessage("Orders", b"a", unique_key="K2"), NewMessage("Orders", b"b"),
                                NewMessage("Orders", b"a", unique_key="K2")])
        assert batch[0] == batch[2] and batch[1].unique_key != "K2"
        assert stored_count(store, "Orders") == 3
        kinds = [e.kind for e in store.timeline("CLIENT-KEY-1")]
        assert kinds == [TraceKind.STORED, TraceKind.DUPLICATE]


def test_duplicates_are_stored_again_after_the_window(tmp_path):
    clock = FakeClock()
    with open_store(tmp_path, clock, dedupe_window_ms=5000) as store:
        first = store.put(NewMessage("Orders", b"x", unique_key="K"))
        clock.advance(5001)
        later = store.put(NewMessage("Orders", b"x", unique_key="K"))
        assert later.phys_offset != first.phys_offset


def test_duplicate_suppression_survives_a_restart(tmp_path):
    clock = FakeClock()
    with open_store(tmp_path / "s", clock) as store:
        first = store.put(NewMessage("Orders", b"x", unique_key="K"))
        delayed = store.put(NewMessage("Orders", b"x", unique_key="D", delay_level=2))
    clock.advance(2000)
    with open_store(tmp_path / "s", clock) as store:
        assert store.put(NewMessage("Orders", b"x", unique_key="K")) == first
        assert store.put(NewMessage("Orders", b"x", unique_key="D", delay_level=2)) == delayed
        assert stored_count(store, "Orders") == 1 and stored_count(store, topics.SCHEDULE_TOPIC) == 1


def test_duplicate_suppression_after_a_crash(tmp_path):
    clock = FakeClock()
    store = open_store(tmp_path / "s", clock)
    first = store.put(NewMessage("Orders", b"x", unique_key="K"))
    shutil.copytree(tmp_path / "s", tmp_path / "crashed")  # sync flush: the record is on disk
    store.close()
    with open_store(tmp_path / "crashed", clock) as again:
        assert again.abnormal_shutdown
        assert again.put(NewMessage("Orders", b"x", unique_key="K")) == first


def test_a_resent_dead_letter_goes_back_to_its_topic_and_joins_the_timeline(tmp_path):
    clock = FakeClock()
    with open_store(tmp_path, clock) as store:
        store.metadata.update_group("G", max_reconsume_times=0)
        put = store.put(NewMessage("Orders", b"x", tags="t", keys=["order-1"]))
        dead, _ = store.send_back(put.phys_offset, "G", reason="bad payload")
        resent = store.resend_dead_letter(dead.phys_offset, actor="alice")
        copy = store.read(resent.phys_offset)
        assert (copy.topic, copy.reconsume_times, copy.body, copy.tags, copy.keys) == ("Orders", 0, b"x", "t",
                                                                                     ["order-1"])
        assert copy.unique_key == put.unique_key and topics.DELAY not in copy.properties
        kinds = [e.kind for e in store.timeline(put.unique_key)]
        assert kinds == [TraceKind.STORED, TraceKind.FAILED, TraceKind.DEAD_LETTER, TraceKind.RESENT]
        assert "alice" in store.timeline(put.unique_key)[-1].reason
        with pytest.raises(ValueError, match="not a dead-letter topic"):
            store.resend_dead_letter(put.phys_offset)
