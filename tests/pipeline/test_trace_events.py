"""Spark reads the trace topic as the store does: a packed record explodes into one row per event
with that event's own ids, an older one-event JSON record still gives its event, and RocketMQ's
own client message trace gives none."""

from __future__ import annotations

import json

from pyspark.sql import functions as F

from pipeline.options import SourceOptions
from pipeline.trace_events import EVENT_FIELDS, events_of, trace_events, trace_records, with_trace_bodies
from store.broker.trace import TraceEvent, TraceKind
from store.broker.trace_pack import is_packed, record_events
from store.clock import FakeClock
from store.format import topics
from store.message_store import MessageStore, NewMessage, StoreConfig
from tests.conftest import GOLDEN_GEOMETRY

ODD_CLIENT = "worker\t1@77@1@%41"  # a client id with text the packed layout escapes


def build_store(root) -> MessageStore:
    """Puts, deliveries, failures with awkward reasons, retries, dead letters; events naming
    clients; an older one-event record; a RocketMQ client trace record; events whose ids the
    record cannot shorten."""
    clock = FakeClock()
    store = MessageStore.open(root, StoreConfig(geometry=GOLDEN_GEOMETRY, flush="sync", trace=True), clock=clock)
    try:
        store.metadata.update_group("G", max_reconsume_times=1)
        puts = store.put_many([NewMessage("Orders", b"m%d" % i, keys=[f"k{i}"]) for i in range(12)])
        puts.append(store.put(NewMessage("Orders", b"spaced", properties={"UNIQ_KEY": "has space"})))
        puts.append(store.put(NewMessage("Orders", b"from a client", client="app-host@4242@1@2k4xq9ab")))
        for got in store.receive("P", "Orders", 2, 30_000, client=ODD_CLIENT):
            store.ack("P", got.receipt_handle, client=ODD_CLIENT)
        for queue_id in range(4):
            store.pull("G", "Orders", queue_id, 0, 32)
        clock.advance(500)
        for r in puts[::4]:
            store.send_back(r.phys_offset, "G", reason="tab\there, new\nline, 100% + \u00e9")
        clock.advance(10_000)
        for r in store.deliver_due().delivered:
            store.send_back(r.phys_offset, "G", reason=None)
        old = TraceEvent(TraceKind.ACKED, puts[1].unique_key, clock.now_ms(), "Orders", puts[1].queue_id,
                         puts[1].queue_offset, puts[1].offset_msg_id, group="H", attempt=1)
        store.put(NewMessage(topics.TRACE_TOPIC, json.dumps(old.to_json()).encode(), tags="acked",
                             keys=[old.unique_key, old.offset_msg_id]))
        store.put(NewMessage(topics.TRACE_TOPIC, f"Pub\u00011700000000000\u0001DefaultRegion\u0001PG\u0001Orders"
                             f"\u0001{puts[2].unique_key}\u0001\u0001\u0001127.0.0.1:10911\u00012\u00011\u00010"
                             f"\u0001{puts[2].offset_msg_id}\u0001true\u0002".encode(),
                             keys=[puts[2].unique_key, puts[2].offset_msg_id]))
        store.trace([TraceEvent(TraceKind.FAILED, puts[3].unique_key, clock.now_ms(), "Orders", 0, 1,
                                "C0A8000100002A9F00000000DEADBEEF", group="g2", attempt=2, reason="",
                                due_ms=clock.now_ms() - 1)])
    except BaseException:
        store.close()
        raise
    return store


def test_packed_and_older_records_give_the_stores_events(spark, tmp_path):
    store = build_store(tmp_path / "s")
    with store:
        records = []
        for queue_id, low, high in store.topics()[topics.TRACE_TOPIC]:
            records += [store.get_by_queue_offset(topics.TRACE_TOPIC, queue_id, o) for o in range(low, high)]
        assert any(is_packed(m) for m in records) and not all(is_packed(m) for m in records)
        expected = sorted((m.phys_offset, position, event) for m in records
                          for position, event in record_events(m))
        keyed = {(m.phys_offset, position): m.keys if not is_packed(m) else
                 list(dict.fromkeys(k for k in (event.unique_key, event.offset_msg_id) if k))
                 for m in records for position, event in record_events(m)}
        firsts = [store.get_by_queue_offset("Orders", queue_id, 0).unique_key for queue_id in range(4)]
        timelines = {key: store.timeline(key) for key in firsts}
    assert {TraceKind.ACKED, TraceKind.DEAD_LETTER, TraceKind.FAILED} <= {e.kind for t in timelines.values() for e in t}
    scanned = with_trace_bodies(SourceOptions(tmp_path / "s", GOLDEN_GEOMETRY)).read(spark)
    events = trace_events(trace_records(scanned)).persist()
    names = [name for name, _ in EVENT_FIELDS]
    rows = events.collect()
    got = sorted((row.trace_phys_offset, row.trace_position,
                  TraceEvent(**{**{n: row[n] for n in names}, "kind": TraceKind(row.kind)})) for row in rows)
    assert got == expected
    assert {"app-host@4242@1@2k4xq9ab", ODD_CLIENT} <= {row.client for row in rows}
    assert {(row.trace_phys_offset, row.trace_position): row["keys"] for row in rows} == keyed

    # A message's events, by its id, are the store's timeline of it (in the same order).
    for message_id, timeline in timelines.items():
        ids = spark.createDataFrame([(message_id,)], "message_id STRING")
        mine = events_of(events, ids).orderBy("at_ms", "trace_phys_offset", "trace_position").collect()
        assert [(r.kind, r.unique_key, r.offset_msg_id, r.reason) for r in mine] == [
            (e.kind.value, e.unique_key, e.offset_msg_id, e.reason) for e in timeline]
    assert events.where(F.col("unique_key") == "has space").count() > 1
    events.unpersist()
