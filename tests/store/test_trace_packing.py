"""Packed lifecycle trace: many events to a trace record, every timeline as it was, older
one-event records still read, RocketMQ's own trace records ignored, bounded records."""

from __future__ import annotations

import json
import os
import threading

import pytest

from store.broker.trace import TraceEvent, TraceKind
from store.broker.trace_pack import MAGIC, MAX_EVENTS, MAX_KEYS_BYTES, PACK_TAG, record_events
from store.clock import FakeClock
from store.format import topics
from store.log.geometry import StoreGeometry
from store.message_store import MessageStore, NewMessage, StoreConfig
from tests.store.helpers import small_config

PROPERTIES_LIMIT = 32767  # RocketMQ's limit on a record's properties, in bytes
# Large enough that a few thousand 1 KiB messages need no segment roll (no filler bytes).
ROOMY = StoreGeometry(commitlog_file_size=8 << 20, cq_file_size=20 * 20_000, index_slots=4096, index_entries=40_000)


def open_store(path, clock, **overrides) -> MessageStore:
    return MessageStore.open(path, small_config(**{"trace": True, **overrides}), clock=clock)


def trace_records(store: MessageStore) -> list:
    """Every record of the trace topic, in commit log order."""
    found = []
    for queue_id, low, high in store.topics().get(topics.TRACE_TOPIC, []):
        found += [store.get_by_queue_offset(topics.TRACE_TOPIC, queue_id, offset) for offset in range(low, high)]
    return sorted(found, key=lambda m: m.phys_offset)


def all_events(store: MessageStore) -> list[TraceEvent]:
    return [event for msg in trace_records(store) for _, event in record_events(msg)]


def old_trace_record(event: TraceEvent) -> NewMessage:
    """A trace record as stores wrote them before packing: one event, JSON, the kind as tag,
    keyed by the unique key and the offset id of the copy."""
    body = json.dumps(event.to_json(), separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    keys = [k for k in dict.fromkeys((event.unique_key, event.offset_msg_id)) if k and " " not in k]
    return NewMessage(topic=topics.TRACE_TOPIC, body=body, tags=event.kind.value, keys=keys)


@pytest.mark.parametrize("flush", ["sync", "async"])
def test_a_load_with_deliveries_failures_retries_and_dead_letters_keeps_every_timeline(tmp_path, flush):
    clock = FakeClock()
    with open_store(tmp_path, clock, flush=flush) as store:
        store.metadata.update_group("G", max_reconsume_times=1)
        batch = store.put_many([NewMessage("Orders", b"b%d" % i, tags="t", keys=[f"k{i}"]) for i in range(40)])
        single = [store.put(NewMessage("Orders", b"s%d" % i, keys=[f"s{i}"])) for i in range(20)]
        delayed = store.put(NewMessage("Orders", b"later", delay_level=2))
        client = store.put(NewMessage("Orders", b"c", unique_key="CLIENT-KEY-1"))
        clock.advance(10)
        assert store.put(NewMessage("Orders", b"c", unique_key="CLIENT-KEY-1")) == client
        puts = batch + single + [client]
        for queue_id in range(4):
            store.pull("G", "Orders", queue_id, 0, 64)
        clock.advance(1000)
        failing = puts[::3]
        for r in failing:
            store.send_back(r.phys_offset, "G", reason=f"no stock for {r.unique_key}\tline 2\n100% +")
        clock.advance(10_000)
        released = store.deliver_due().delivered
        retries = [r for r in released if r.topic == "%RETRY%G"]
        assert len(retries) == len(failing) and [r.topic for r in released].count("Orders") == 1
        dead = [store.send_back(r.phys_offset, "G", reason="still failing")[0] for r in retries]
        resent = store.resend_dead_letter(dead[0].phys_offset, actor="alice")

        store.flush()
        events = all_events(store)
        records = len(trace_records(store))
        if flush == "sync":  # a record per change: each returns with its events on disk
            changes = 1 + len(single) + 3 + 4 + len(failing) + 1 + len(retries) + 1
            assert records <= changes < len(events) / 3
        else:  # written in batches
            assert records == -(-len(events) // MAX_EVENTS)

        for r in puts:
            timeline = store.timeline(r.unique_key)
            kinds = [e.kind for e in timeline]
            expected = [TraceKind.STORED]
            if r is client:
                expected.append(TraceKind.DUPLICATE)
            expected.append(TraceKind.DELIVERED)
            if r in failing:
                expected += [TraceKind.FAILED, TraceKind.RETRY, TraceKind.RELEASED, TraceKind.FAILED,
                             TraceKind.DEAD_LETTER]
                if r.unique_key == dead[0].unique_key:
                    expected.append(TraceKind.RESENT)
            assert kinds == expected, r.unique_key
            assert timeline == sorted(timeline, key=lambda e: e.at_ms)
            stored, *_ = timeline
            assert (stored.topic, stored.queue_id, stored.queue_offset, stored.offset_msg_id) == (
                r.topic, r.queue_id, r.queue_offset, r.offset_msg_id)
            assert timeline == [e for e in events if e.unique_key == r.unique_key]  # commit log order
            if r in failing:
                after = kinds.index(TraceKind.DELIVERED) + 1
                failed, retry, release, failed_again, dead_letter = timeline[after:after + 5]
                assert failed.reason == f"no stock for {r.unique_key}\tline 2\n100% +" and failed.attempt == 1
                assert retry.topic == topics.SCHEDULE_TOPIC and retry.real_topic == "%RETRY%G"
                assert retry.due_ms == failed.at_ms + 10_000 and release.topic == "%RETRY%G"
                assert failed_again.reason == "still failing" and dead_letter.topic == "%DLQ%G"
                # The offset id of any copy leads to the same history.
                for copy_id in (r.offset_msg_id, retry.offset_msg_id, release.offset_msg_id,
                                dead_letter.offset_msg_id):
                    assert store.timeline(copy_id) == timeline
        assert [e.kind for e in store.timeline(delayed.unique_key)] == [TraceKind.SCHEDULED, TraceKind.RELEASED]
        assert store.timeline(resent.offset_msg_id)[-1].kind is TraceKind.RESENT

    with open_store(tmp_path, clock, flush=flush) as again:  # the same after a restart
        assert [e for e in all_events(again)] == events
        assert again.timeline(puts[0].unique_key) == [e for e in events if e.unique_key == puts[0].unique_key]


def test_every_field_of_an_event_reads_back_as_it_was_written(tmp_path):
    clock = FakeClock()
    with open_store(tmp_path, clock, flush="async") as store:
        put = store.put(NewMessage("Orders", b"x"))
        foreign = "C0A8000100002A9F00000000DEADBEEF"  # a copy written by another broker
        at = clock.now_ms()
        written = [
            TraceEvent(TraceKind.DELIVERED, put.unique_key, at, "Orders", 1, 7, put.offset_msg_id, group="G",
                       attempt=3),
            TraceEvent(TraceKind.FAILED, put.unique_key, at, "Orders", 1, 7, foreign, group="g|x", attempt=1,
                       reconsume_times=0, due_ms=at - 5,
                       reason="tab\there\r\nnew line %41 + plus \u00e9\u4e2d\U0001f600"),
            TraceEvent(TraceKind.INVISIBLE_TIMEOUT, put.unique_key, at - 3_000, reason=""),
            TraceEvent(TraceKind.RETRY, put.unique_key, at + 2**40, "%RETRY%G", 0, 2**40, "odd id", "G", None, 99,
                       due_ms=at + 2**41, real_topic="%RETRY%G"),
            TraceEvent(TraceKind.ACKED, put.unique_key, at),
        ]
        [stored] = store.timeline(put.unique_key)
        store.trace(written)
        expected = sorted([stored, *written], key=lambda e: e.at_ms)
        assert store.timeline(put.unique_key) == expected
        assert store.timeline(put.offset_msg_id) == expected


def test_bench_like_messages_spend_at_most_a_tenth_of_the_bytes_on_the_trace(tmp_path):
    """1 KiB random bodies with a tag, two keys (one shared by ten messages) and a unique key,
    put in batches with the default config (async flush, trace on), as bench/workload.py does."""
    count = 3000
    messages = [NewMessage("BenchTopic", os.urandom(1024), tags=f"Tag{'ABCD'[i % 4]}",
                           keys=[f"order-{i:010d}", f"customer-{i // 10:09d}"], queue_id=i % 4)
                for i in range(count)]
    with MessageStore.open(tmp_path, StoreConfig(geometry=ROOMY), clock=FakeClock()) as store:
        results = []
        for start in range(0, count, 100):
            results += store.put_many(messages[start:start + 100])
        store.flush()
        message_bytes = sum(r.size for r in results)
        records = trace_records(store)
        trace_bytes = sum(m.size for m in records)
        written = store.commitlog.end - store.commitlog.min_offset
        assert message_bytes + trace_bytes == written  # nothing else was written
        assert trace_bytes <= 0.10 * written, f"trace {trace_bytes} of {written} bytes"
        assert len(records) * 100 <= count
        assert len(all_events(store)) == count


def test_an_old_one_event_record_is_still_read(tmp_path):
    clock = FakeClock()
    with open_store(tmp_path, clock) as store:
        put = store.put(NewMessage("Orders", b"x"))
        clock.advance(5)
        old = TraceEvent(TraceKind.FAILED, put.unique_key, clock.now_ms(), "Orders", put.queue_id, put.queue_offset,
                         put.offset_msg_id, group="G", attempt=1, reason="written before packing")
        store.put(old_trace_record(old))
        clock.advance(5)
        store.trace([TraceEvent(TraceKind.ACKED, put.unique_key, clock.now_ms(), group="G")])
        assert [e.kind for e in store.timeline(put.unique_key)] == [TraceKind.STORED, TraceKind.FAILED,
                                                                     TraceKind.ACKED]
        assert store.timeline(put.unique_key)[1] == old
        assert store.timeline(put.offset_msg_id) == store.timeline(put.unique_key)


def test_an_old_record_keyed_by_the_offset_id_of_a_copy_that_is_gone(tmp_path):
    """Older records were keyed by the copy's offset id too: that id still leads to the message."""
    clock = FakeClock()
    with open_store(tmp_path, clock) as store:
        put = store.put(NewMessage("Orders", b"x"))
        gone = "7F00000100002A9F00000000FFFFFF00"
        store.put(old_trace_record(TraceEvent(TraceKind.RETRY, put.unique_key, clock.now_ms() + 1, "%RETRY%G", 0,
                                              0, gone, group="G")))
        assert [e.kind for e in store.timeline(gone)] == [TraceKind.STORED, TraceKind.RETRY]


def test_rocketmq_client_trace_records_and_strangers_are_ignored(tmp_path):
    clock = FakeClock()
    with open_store(tmp_path, clock) as store:
        put = store.put(NewMessage("Orders", b"x"))
        key = put.unique_key
        strangers = [
            NewMessage(topics.TRACE_TOPIC, f"Pub\u00011700000000000\u0001DefaultRegion\u0001PG\u0001Orders\u0001{key}"
                       f"\u0001\u0001\u0001127.0.0.1:10911\u000112\u00013\u00010\u0001{put.offset_msg_id}\u0001true"
                       "\u0002".encode(), keys=[key, put.offset_msg_id]),
            NewMessage(topics.TRACE_TOPIC, b"not the layout", tags=PACK_TAG, keys=[key]),
            NewMessage(topics.TRACE_TOPIC, f"{MAGIC}\t0\ns\t0".encode(), tags="other", keys=[key]),
            NewMessage(topics.TRACE_TOPIC, f"{MAGIC}\tnope\ns\t0".encode(), tags=PACK_TAG, keys=[key]),
            NewMessage(topics.TRACE_TOPIC, f"{MAGIC}\t0\nq\t0\ns\t9\ns\tx\ns\t0\t1\t7".encode(), tags=PACK_TAG,
                       keys=[key]),
        ]
        for stranger in strangers:
            store.put(stranger)
        [stored] = store.timeline(key)
        assert stored.kind is TraceKind.STORED and store.timeline(put.offset_msg_id) == [stored]


@pytest.mark.parametrize("key_chars", [32, 300])
def test_packed_records_are_bounded(tmp_path, key_chars):
    clock = FakeClock()
    with open_store(tmp_path, clock, flush="async", geometry=ROOMY) as store:
        at = clock.now_ms()
        keys = [f"{i:0{key_chars}d}" for i in range(1000)]
        store.trace([TraceEvent(TraceKind.ACKED, key, at + i, "Orders", 0, i, group="G") for i, key in enumerate(keys)])
        store.flush()
        records = trace_records(store)
        per_record = [len(record_events(m)) for m in records]
        assert sum(per_record) == 1000 and max(per_record) <= MAX_EVENTS
        assert len(records) >= (1000 * (key_chars + 1)) // MAX_KEYS_BYTES
        for m in records:
            assert len(m.properties[topics.KEYS].encode()) <= MAX_KEYS_BYTES
            assert len(m.properties_text().encode()) < PROPERTIES_LIMIT // 2
        for i in (0, 127, 128, 999):
            [event] = store.timeline(keys[i])
            assert event.queue_offset == i and event.at_ms == at + i


def test_max_events_counts_events_and_keeps_the_newest(tmp_path):
    clock = FakeClock()
    with open_store(tmp_path, clock, flush="async") as store:
        put = store.put(NewMessage("Orders", b"x"))
        at = clock.now_ms()
        store.trace([TraceEvent(TraceKind.DELIVERED, put.unique_key, at + i, attempt=i) for i in range(1, 10)])
        assert [e.attempt for e in store.timeline(put.unique_key, max_events=4)] == [6, 7, 8, 9]
        assert len(store.timeline(put.unique_key)) == 10


def test_a_unique_key_with_spaces_is_kept_in_the_body_and_found_by_the_offset_id(tmp_path):
    with open_store(tmp_path, FakeClock(), flush="async") as store:
        put = store.put(NewMessage("Orders", b"x", properties={"UNIQ_KEY": "has space"}))
        other = store.put(NewMessage("Orders", b"y"))
        store.flush()
        [record] = trace_records(store)
        assert record.keys == [put.offset_msg_id, other.unique_key]
        [event] = store.timeline(put.offset_msg_id)
        assert event.unique_key == "has space" and event.offset_msg_id == put.offset_msg_id


def test_concurrent_sync_puts_share_trace_records(tmp_path):
    clock = FakeClock()
    with open_store(tmp_path, clock, flush="sync", geometry=ROOMY) as store:
        results: list = []

        def produce(thread: int) -> None:
            for n in range(40):
                results.append(store.put(NewMessage("Orders", b"x" * 200, keys=[f"t{thread}-{n}"])))

        threads = [threading.Thread(target=produce, args=(t,)) for t in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(results) == 320
        assert len(trace_records(store)) < len(results)
        for r in results[::16]:
            [stored] = store.timeline(r.unique_key)
            assert stored.offset_msg_id == r.offset_msg_id
