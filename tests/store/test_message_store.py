"""Putting messages and reading them back by each of the four lookups."""

from __future__ import annotations

import pytest

from store.clock import FakeClock
from store.errors import InvalidIdError, InvalidMessageError, MessageNotFoundError, StoreLockedError
from store.message_store import MessageStore, NewMessage
from tests.store.helpers import fill, sample_message, small_config


@pytest.fixture
def store(tmp_path):
    s = MessageStore.open(tmp_path / "store", small_config(), clock=FakeClock())
    yield s
    s.close()
    with MessageStore.open(tmp_path / "store", small_config(), read_only=True) as again:
        assert again.check().ok


def test_put_returns_where_the_message_went(store):
    first = store.put(sample_message(0))
    second = store.put(sample_message(4))
    assert (first.topic, first.queue_id, first.queue_offset, first.phys_offset) == ("TopicA", 0, 0, 0)
    assert (second.queue_id, second.queue_offset, second.phys_offset) == (0, 1, first.size)
    assert len(first.offset_msg_id) == 32 and len(first.unique_key) == 32
    assert first.unique_key != second.unique_key


def test_four_lookups_find_the_same_message(store):
    results = fill(store, 40)
    target = results[17]
    by_id = store.get_by_offset_id(target.offset_msg_id)
    assert by_id.body.startswith(b"message 17 ")
    assert store.get_by_queue_offset("TopicA", target.queue_id, target.queue_offset).phys_offset == target.phys_offset
    [by_uniq] = store.query_by_unique_key("TopicA", target.unique_key).messages
    assert by_uniq.phys_offset == target.phys_offset
    [by_key] = store.query_by_key("TopicA", "key-17").messages
    assert by_key.phys_offset == target.phys_offset


def test_key_query_is_newest_first_and_says_when_cut_short(store):
    results = fill(store, 30)
    group = store.query_by_key("TopicA", "group-1", max_results=64)
    assert [m.phys_offset for m in group.messages] == [r.phys_offset for r in results[10:20]][::-1]
    assert not group.truncated
    cut = store.query_by_key("TopicA", "group-1", max_results=4)
    assert [m.phys_offset for m in cut.messages] == [r.phys_offset for r in results[16:20]][::-1]
    assert cut.truncated


def test_rolls_segments_with_blank_records(store):
    results = fill(store, 30, body_size=3000)
    assert store.commitlog.segment_count >= 3
    report = store.check()
    assert report.ok, report.problems
    assert report.blanks == store.commitlog.segment_count - 1
    for r in results:
        assert store.get_by_offset_id(r.offset_msg_id).queue_offset == r.queue_offset


def test_reopen_keeps_everything_and_continues_offsets(tmp_path):
    with MessageStore.open(tmp_path, small_config()) as s:
        before = fill(s, 25, body_size=2000)
    with MessageStore.open(tmp_path, small_config()) as s:
        after = s.put(sample_message(100))
        assert after.phys_offset > before[-1].phys_offset
        assert after.queue_offset == sum(1 for r in before if r.queue_id == after.queue_id)
        for r in before:
            assert s.get_by_offset_id(r.offset_msg_id).unique_key == r.unique_key
        assert s.check().ok


def test_second_writer_is_locked_out(store, tmp_path):
    with pytest.raises(StoreLockedError):
        MessageStore.open(tmp_path / "store", small_config())


def test_delayed_message_is_rewritten_to_the_schedule_topic(store):
    result = store.put(NewMessage(topic="TopicA", body=b"later", delay_level=3, queue_id=1))
    assert (result.topic, result.queue_id) == ("SCHEDULE_TOPIC_XXXX", 2)
    msg = store.get_by_offset_id(result.offset_msg_id)
    assert msg.properties["REAL_TOPIC"] == "TopicA" and msg.properties["REAL_QID"] == "1"
    unit = store.queues.get("SCHEDULE_TOPIC_XXXX", 2).get(0)
    assert unit.tags_code == msg.store_timestamp + 10_000


def test_delay_level_is_clamped_to_the_table(store):
    result = store.put(NewMessage(topic="TopicA", body=b"much later", delay_level=25))
    assert result.queue_id == 17
    assert store.get_by_offset_id(result.offset_msg_id).properties["DELAY"] == "18"


@pytest.mark.parametrize("bad", [
    NewMessage(topic="../etc", body=b"x"),
    NewMessage(topic="a b", body=b"x"),
    NewMessage(topic="x" * 128, body=b"x"),
    NewMessage(topic="", body=b"x"),
    NewMessage(topic="TopicA", body=b"x", keys=["has space"]),
    NewMessage(topic="TopicA", body=b"x", properties={"a\x01": "b"}),
    NewMessage(topic="TopicA", body=b"x", properties={"big": "v" * 40_000}),
    NewMessage(topic="TopicA", body=b"x" * 40_000),
    NewMessage(topic="TopicA", body=b"x", queue_id=-1),
])
def test_bad_messages_are_rejected_and_nothing_is_written(store, bad):
    with pytest.raises(InvalidMessageError):
        store.put(bad)
    assert store.commitlog.end == 0


@pytest.mark.parametrize("msg_id", ["", "123", "Z" * 32, "0A6C73D900002A9F000000000000000"])
def test_malformed_offset_ids_are_rejected(store, msg_id):
    with pytest.raises(InvalidIdError):
        store.get_by_offset_id(msg_id)


def test_unknown_places_are_not_found(store):
    fill(store, 3)
    with pytest.raises(MessageNotFoundError):
        store.get_by_offset_id("7F00000100002A9F0000000000100000")
    with pytest.raises(MessageNotFoundError):
        store.get_by_offset_id("7F00000100002A9F0000000000000003")
    with pytest.raises(MessageNotFoundError):
        store.get_by_queue_offset("TopicA", 0, 5)
    with pytest.raises(MessageNotFoundError):
        store.get_by_queue_offset("Nope", 0, 0)
    assert store.query_by_key("TopicA", "no-such-key").messages == []


def test_compressed_body_round_trips(store):
    body = b"compress me " * 500
    result = store.put(NewMessage(topic="TopicA", body=body, compress=True))
    msg = store.get_by_offset_id(result.offset_msg_id)
    assert msg.compressed and len(msg.stored_body) < len(body)
    assert msg.body == body


def test_ipv6_born_host(store):
    result = store.put(NewMessage(topic="TopicA", body=b"v6", born_host="[fd00::1:2]:40001"))
    msg = store.get_by_offset_id(result.offset_msg_id)
    assert str(msg.born_host) == "[fd00:0:0:0:0:0:1:2]:40001"
    assert msg.sys_flag & 0x10


def test_a_bad_message_rejects_the_whole_batch(store):
    good = sample_message(1)
    too_big = NewMessage(topic="TopicA", body=b"x", properties={"big": "v" * 40_000})
    with pytest.raises(InvalidMessageError):
        store.put_many([good, too_big])
    assert store.commitlog.end == 0
    assert store.put(good).queue_offset == 0


def test_put_many_numbers_each_queue_consecutively(store):
    results = store.put_many([sample_message(i) for i in range(40)])
    for queue_id in range(4):
        offsets = [r.queue_offset for r in results if r.queue_id == queue_id]
        assert offsets == list(range(10))
    assert store.check().ok


def test_dispatch_continues_past_a_window_holding_only_a_filler(store, monkeypatch):
    """Dispatch scans in batches; a batch that reaches a BLANK filler must move on to the next
    segment, not jump to the end."""
    monkeypatch.setattr("store.projections.dispatch.DISPATCH_BATCH_RECORDS", 1)
    results = store.put_many([sample_message(i, body_size=3000) for i in range(30)])
    assert store.commitlog.segment_count >= 3
    for r in results:
        assert store.get_by_queue_offset(r.topic, r.queue_id, r.queue_offset).phys_offset == r.phys_offset
    report = store.check()
    assert report.ok, report.problems


def test_queue_offset_by_store_time(tmp_path):
    clock = FakeClock(1_700_000_000_000)
    with MessageStore.open(tmp_path, small_config(), clock=clock) as s:
        times = []
        for i in range(8):
            times.append(clock.advance(1000))
            s.put(NewMessage(topic="TopicA", body=b"t%d" % i, queue_id=0))
        assert s.queue_offset_by_time("TopicA", 0, times[0] - 5000) == 0
        assert s.queue_offset_by_time("TopicA", 0, times[3]) == 3
        assert s.queue_offset_by_time("TopicA", 0, times[3] + 1) == 4
        assert s.queue_offset_by_time("TopicA", 0, times[-1] + 1) == 8
        with pytest.raises(MessageNotFoundError):
            s.queue_offset_by_time("TopicA", 3, times[0])
