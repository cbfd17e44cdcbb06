"""The timelines job: for every message of a generated store, Spark's hops, verdicts and time to
DLQ are the console's timeline (app.services.timeline) of the same message; on the golden stores
they say what RocketMQ's own records and reports say."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual, assertSchemaEqual

from app.services.timeline import message_timeline
from pipeline.consumer_progress import read_progress
from pipeline.jobs import timelines
from pipeline.options import SourceOptions
from pipeline.records import SCHEMA_DDL
from store.broker.record_builder import NewMessage
from store.broker.retry import origin_topic
from store.clock import FakeClock
from store.format import ids, topics
from store.format.codec import StoredMessage
from store.format.delay_levels import DelayLevels
from store.message_store import MessageStore, StoreConfig
from tests.conftest import BROKER_DELAY_LEVELS, BROKER_GEOMETRY, GOLDEN_GEOMETRY
from tests.pipeline.stores import GEOMETRY, START_MS, build_retry_store, every_record

HOP_VIEW = ("kind STRING, time_ms BIGINT, `group` STRING, attempt INT, topic STRING, phys_offset BIGINT, "
            "delay_level INT, due_ms BIGINT, reason STRING")
COMPARED = ("message_id STRING, unique_key STRING, topic STRING, offset_msg_id STRING, store_timestamp BIGINT, "
            f"traced BOOLEAN, hops ARRAY<STRUCT<{HOP_VIEW}>>, `group` STRING, state STRING, next_attempt_ms BIGINT, "
            "attempts INT, time_to_dlq_ms BIGINT")
MARKERS = (topics.ORIGIN_MESSAGE_ID, topics.DLQ_ORIGIN_TOPIC, topics.DLQ_ORIGIN_MESSAGE_ID, topics.RESENT_FROM)


@pytest.fixture(scope="module")
def retry_store(tmp_path_factory) -> Path:
    return build_retry_store(tmp_path_factory.mktemp("timelines") / "store")


def run_job(spark, store: Path, geometry, out: Path, delay_levels: str | None = None) -> DataFrame:
    counts = timelines.main(spark, SourceOptions(store, geometry, delay_levels), out)
    written = spark.read.parquet(str(out))
    assertSchemaEqual(written.schema, spark.createDataFrame([], timelines.TIMELINE_DDL).schema)
    assert counts["messages"] == written.count()
    return written


def compared(result: DataFrame) -> DataFrame:
    """One row per message and group (a message no group has to do with: one row, group null)."""
    hop = F.transform("hops", lambda h: F.struct(
        h["kind"], h["time_ms"], h["group"], h["attempt"], h["topic"], h["phys_offset"], h["delay_level"],
        h["due_ms"], F.when(~h["derived"], h["reason"]).alias("reason")))
    message = ("message_id", "unique_key", "topic", "offset_msg_id", "store_timestamp", "traced")
    rows = result.select(*message, hop.alias("hops"), F.explode_outer("verdicts").alias("v"))
    return rows.select(*message, "hops", "v.group", "v.state", "v.next_attempt_ms", "v.attempts",
                       "v.time_to_dlq_ms")


def is_original(msg: StoredMessage) -> bool:
    return topics.message_copy_kind(msg.topic, msg.properties) == "original" and not any(
        name in msg.properties for name in MARKERS)


def console_rows(store_dir: Path, geometry, delay_levels: str | None = None) -> list[tuple]:
    """COMPARED rows of the console's timeline of every message (by unique key) of the store, as
    the copies and mqlens's events tell it (the job does not merge the RocketMQ clients' trace)."""
    rows = []
    config = StoreConfig(geometry=geometry, **({"delay_levels": delay_levels} if delay_levels else {}))
    with MessageStore.open(store_dir, config, read_only=True) as store:
        keys = sorted({m.unique_key for m in every_record(store)
                       if m.topic != topics.TRACE_TOPIC and m.unique_key is not None})
        for key in keys:
            line = message_timeline(store, key, with_client_trace=False)
            hops = [(h.kind, h.time_ms, h.group, h.attempt, h.topic,
                     ids.decode_offset_msg_id(h.offset_msg_id)[1] if h.offset_msg_id else None, h.delay_level,
                     h.due_ms, None if h.derived else h.reason) for h in line.hops]
            original = next((m for m in line.copies if is_original(m)), None)
            first = line.copies[0]
            message = (key, key, original.topic if original else origin_topic(first) or first.topic,
                       original.offset_msg_id if original else None,
                       original.store_timestamp if original else None, line.traced, hops)
            for verdict in line.verdicts or [None]:
                if verdict is None:
                    rows.append((*message, None, None, None, None, None))
                    continue
                dead = next((h.time_ms for h in line.hops if h.kind == "dead_lettered" and h.group == verdict.group),
                            None)
                ttd = dead - original.store_timestamp if dead is not None and original is not None else None
                rows.append((*message, verdict.group, verdict.state, verdict.next_attempt_ms, verdict.attempts, ttd))
    return rows


def test_every_message_of_a_generated_store_as_the_console_shows_it(spark, retry_store, tmp_path):
    result = run_job(spark, retry_store, GEOMETRY, tmp_path / "timelines")
    expected = console_rows(retry_store, GEOMETRY)
    assert {r[8] for r in expected} == {"consumed", "pending", "retry_pending", "dead_lettered", "unknown", None}
    assert {r[5] for r in expected} == {True, False}  # hops from trace events and from copies
    assert any(r[3] is None for r in expected)  # a message whose original is not in the store (yet)
    assertDataFrameEqual(compared(result), spark.createDataFrame(expected, COMPARED))


@pytest.mark.parametrize("golden", ["store", "broker"])
def test_every_message_of_the_golden_stores_as_the_console_shows_it(spark, golden, golden_store_dir,
                                                                   golden_broker_dir, tmp_path):
    store_dir, geometry, levels = ((golden_store_dir, GOLDEN_GEOMETRY, None) if golden == "store"
                                   else (golden_broker_dir, BROKER_GEOMETRY, BROKER_DELAY_LEVELS))
    result = run_job(spark, store_dir, geometry, tmp_path / "timelines", levels)
    expected = console_rows(store_dir, geometry, levels)
    assert any(r[8] == "dead_lettered" for r in expected)
    assertDataFrameEqual(compared(result), spark.createDataFrame(expected, COMPARED))
    halves = {r.unique_key for r in SourceOptions(store_dir, geometry).read(spark)
              .where(F.col("copy_kind") == "transaction_half").select("unique_key").collect()}
    assert len(halves) == (3 if golden == "broker" else 0)
    for line in result.where(F.col("message_id").isin(*halves)).collect() if halves else []:
        kinds = [h.kind for h in line.hops]  # the half message held (and put back by checks), then the commit
        assert line.topic == "Payments" and kinds[0] == "transaction" and set(kinds) <= {"transaction", "produced"}


def manifest_hops(record: dict) -> list[tuple]:
    """(kind, topic, phys offset, group, due) of the hops a golden record shows, its due time
    being the deliver time RocketMQ's dispatch gave a scheduled copy (its tagsCode)."""
    topic, phys, due = record["topic"], record["physicalOffset"], record["dispatch_tagsCode"]
    real = record["properties"].get(topics.REAL_TOPIC)
    if topic == topics.SCHEDULE_TOPIC and real.startswith(topics.RETRY_PREFIX):
        group = real[len(topics.RETRY_PREFIX):]
        return [("failed", topic, phys, group, None), ("retry_scheduled", topic, phys, group, due)]
    if topic == topics.SCHEDULE_TOPIC:
        return [("scheduled", topic, phys, None, due)]
    if topics.is_retry_topic(topic):
        return [("redelivered", topic, phys, topic[len(topics.RETRY_PREFIX):], None)]
    if topics.is_dlq_topic(topic):
        group = topic[len(topics.DLQ_PREFIX):]
        return [("failed", topic, phys, group, None), ("dead_lettered", topic, phys, group, None)]
    return [("released" if real else "produced", topic, phys, None, None)]


def test_the_golden_store_as_rocketmq_wrote_it(spark, golden_store_dir, golden_manifest, tmp_path):
    """Every message's hops are its records' (deliver times as RocketMQ's dispatch computed them);
    GID_golden's verdicts and times to DLQ follow from them, with no progress recorded."""
    result = run_job(spark, golden_store_dir, GOLDEN_GEOMETRY, tmp_path / "timelines")
    records = sorted((r for r in golden_manifest["commitlogRecords"] if r["kind"] == "MESSAGE"),
                     key=lambda r: (r["storeTimestamp"], r["physicalOffset"]))
    by_key: dict[str, list[dict]] = {}
    for record in records:
        by_key.setdefault(record["uniqKey"], []).append(record)
    hop = F.transform("hops", lambda h: F.struct(h["kind"], h["topic"], h["phys_offset"], h["group"], h["due_ms"]))
    got = {r.message_id: r for r in result.select("message_id", "topic", "offset_msg_id", hop.alias("hops"),
                                                     "verdicts").collect()}
    assert set(got) == set(by_key)
    for key, copies in by_key.items():
        assert [tuple(h) for h in got[key].hops] == [h for r in copies for h in manifest_hops(r)], key
    assert all(not r.traced for r in result.select("traced").collect())

    def only(keys: str) -> str:
        [key] = [k for k, copies in by_key.items() if copies[0]["keys"] == keys]
        return key

    def verdict(keys: str) -> tuple:
        [v] = got[only(keys)].verdicts
        return v.group, v.state, v.next_attempt_ms, v.time_to_dlq_ms

    dead, original = by_key[only("order-1003")][-1], by_key[only("order-1003")][0]
    assert verdict("order-1003") == ("GID_golden", "dead_lettered", None,
                                     dead["storeTimestamp"] - original["storeTimestamp"])
    assert verdict("order-9999") == ("GID_golden", "dead_lettered", None, None)  # its original is not here
    assert (got[only("order-9999")].topic, got[only("order-9999")].offset_msg_id) == ("TopicTest", None)
    assert verdict("order-1000") == ("GID_golden", "unknown", None, None)  # redelivered; no offsets recorded
    waiting = by_key[only("order-1002")][-1]
    assert verdict("order-1002") == ("GID_golden", "retry_pending", waiting["dispatch_tagsCode"], None)
    assert got[only("delay-0")].verdicts == [] and got[only("delay-0")].topic == "TopicDelay"


def store_timestamp(text: str) -> int:
    """mqadmin's UTC "2026-11-23 16:16:25,916" as epoch milliseconds."""
    from datetime import UTC, datetime

    return int(datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=UTC).timestamp() * 1000)


def test_the_broker_store_as_rocketmq_reported_it(spark, golden_broker_dir, golden_broker_manifest, tmp_path):
    """cg-fail's fail-* messages reach %DLQ%cg-fail after retries 1 and 2, the operator's resend of
    fail-3 is consumed, cg-flaky's messages succeed after one retry, and every message a group's
    listener consumed last with success has that group's verdict consumed."""
    result = run_job(spark, golden_broker_dir, BROKER_GEOMETRY, tmp_path / "timelines", BROKER_DELAY_LEVELS)
    got = {r.message_id: r for r in result.collect()}
    manifest = golden_broker_manifest
    stored = manifest["storedRecordsByOffsetMsgId"].values()

    def verdict_of(message_id: str, group: str):
        return next((v for v in got[message_id].verdicts if v.group == group), None)

    for letter in manifest["deadLetters"]:
        [dead] = letter["queryMsgByUniqueKey_a"][0]["messages"]
        message_id = dead["Properties"][topics.UNIQ_KEY]
        [original] = [r for r in stored if r["msgId"] == message_id and r["topic"] == "Orders"]
        tries = [d for d in manifest["consumption"]["cg-fail"] if d["msgId"] == message_id]
        assert [d["reconsumeTimes"] for d in tries] == [0, 1, 2]
        hops = [(h.kind, h.attempt, h.phys_offset) for h in got[message_id].hops if h.group == "cg-fail"]
        retries = [d["commitLogOffset"] for d in tries[1:]]
        assert [(kind, attempt) for kind, attempt, _ in hops] == [
            ("failed", 1), ("retry_scheduled", 2), ("redelivered", 2), ("failed", 2), ("retry_scheduled", 3),
            ("redelivered", 3), ("failed", 3), ("dead_lettered", 3)]
        assert [phys for kind, _, phys in hops if kind == "redelivered"] == retries
        assert hops[-1][2] == dead["CommitLog Offset"]
        verdict = verdict_of(message_id, "cg-fail")
        assert verdict.state == "dead_lettered"
        assert verdict.time_to_dlq_ms == store_timestamp(dead["Store Timestamp"]) - original["storeTimestamp"]

    [resend] = [d for d in manifest["consumption"]["cg-fail"]
                if d["copyTopic"] == "%RETRY%cg-fail" and d["reconsumeTimes"] == 0]
    assert resend["keys"] == "fail-3 ord-3"
    assert [(h.kind, h.topic, h.phys_offset) for h in got[resend["msgId"]].hops] == [
        ("redelivered", "%RETRY%cg-fail", resend["commitLogOffset"])]
    assert verdict_of(resend["msgId"], "cg-fail").state == "consumed"

    flaky = [d for d in manifest["consumption"]["cg-flaky"] if d["copyTopic"] == "%RETRY%cg-flaky"]
    assert len(flaky) == 3
    for delivery in flaky:
        hops = [(h.kind, h.phys_offset) for h in got[delivery["msgId"]].hops if h.group == "cg-flaky"]
        assert [phys for kind, phys in hops if kind == "redelivered"] == [delivery["commitLogOffset"]]
        assert "dead_lettered" not in [kind for kind, _ in hops]
        assert verdict_of(delivery["msgId"], "cg-flaky").state == "consumed"

    last_outcome = {}
    for group, deliveries in manifest["consumption"].items():
        for delivery in deliveries:
            last_outcome[(group, delivery["msgId"])] = delivery["outcome"]
    consumed = [(group, message_id) for (group, message_id), outcome in last_outcome.items()
                if outcome in ("CONSUME_SUCCESS", "SUCCESS") and group != "cg-bcast"]  # broadcast: no broker offsets
    assert len(consumed) > 100
    assert all(verdict_of(message_id, group).state == "consumed" for group, message_id in consumed)
    assert all(verdict_of(message_id, "cg-bcast") is None for _, message_id in consumed)


def test_copies_without_unique_keys_find_their_message_through_either_id(spark, tmp_path):
    """RocketMQ fills ORIGIN_MESSAGE_ID with the original's offset id (broker send-back) or its
    unique key (a client's own send-back); a copy without UNIQ_KEY joins its message either way."""

    def record(phys: int, topic: str, ts: int, props: dict[str, str], reconsume_times: int = 0,
               queue_id: int = 0) -> tuple:
        offset_id = f"7F00000100002A9F{phys:016X}"
        unique_key = props.get(topics.UNIQ_KEY)
        origin = props.get(topics.ORIGIN_MESSAGE_ID) or unique_key or offset_id
        return (phys, 100, offset_id, unique_key, topic, queue_id, 0, 0, 0, ts, "127.0.0.1:1", ts, "127.0.0.1:10911",
                reconsume_times, None, [], props, None, topics.message_copy_kind(topic, props), origin)

    keyless_id, keyed = "7F00000100002A9F0000000000000000", "7F0000010000AAAABBBBCCCC00000001"
    records = spark.createDataFrame([
        record(0, "Orders", 1_000, {}),
        record(200, topics.SCHEDULE_TOPIC, 2_000, {topics.REAL_TOPIC: "%RETRY%g", topics.RETRY_TOPIC: "Orders",
                                                   topics.ORIGIN_MESSAGE_ID: keyless_id}, 1, queue_id=2),
        record(400, "%DLQ%g", 5_000, {topics.RETRY_TOPIC: "Orders", topics.ORIGIN_MESSAGE_ID: keyless_id}, 2),
        record(600, "Payments", 1_500, {topics.UNIQ_KEY: keyed}),
        record(800, "%RETRY%h", 3_000, {topics.ORIGIN_MESSAGE_ID: keyed}, 1),
    ], SCHEMA_DDL)
    trace = records.where(F.col("topic") == topics.TRACE_TOPIC)
    result = timelines.timelines(records, trace, read_progress(spark, tmp_path, records), DelayLevels())
    got = {r.message_id: (r.topic, r.offset_msg_id, [(h.kind, h.group, h.phys_offset, h.due_ms) for h in r.hops],
                          [(v.group, v.state, v.time_to_dlq_ms) for v in r.verdicts]) for r in result.collect()}
    assert got == {
        keyless_id: ("Orders", keyless_id, [("produced", None, 0, None), ("failed", "g", 200, None),
                                            ("retry_scheduled", "g", 200, 12_000), ("failed", "g", 400, None),
                                            ("dead_lettered", "g", 400, None)], [("g", "dead_lettered", 4_000)]),
        keyed: ("Payments", "7F00000100002A9F0000000000000258", [("produced", None, 600, None),
                                                                 ("redelivered", "h", 800, None)],
                [("h", "unknown", None)]),
    }


def test_a_resend_to_one_groups_retry_topic_moves_that_groups_verdict_only(spark, tmp_path):
    """Shipping consumed the order; Billing dead-lettered it, got it resent to its retry topic
    and consumed it: both consumed, as the console says."""
    clock = FakeClock(START_MS)
    config = StoreConfig(geometry=GEOMETRY, flush="sync", schedule_interval_ms=0, trace=True)
    with MessageStore.open(tmp_path / "store", config, clock=clock) as store:
        store.metadata.update_group("Billing", max_reconsume_times=0)
        store.put(NewMessage("Orders", b"order 7", keys=["o-7"]))
        for group, settle in (("Shipping", store.ack), ("Billing", store.nack)):
            [got] = store.receive(group, "Orders", 1, 60_000)
            settle(group, got.receipt_handle)
            clock.advance(10)
        dead = store.get_by_queue_offset(topics.dlq_topic("Billing"), 0, 0)
        store.resend_dead_letter(dead.phys_offset, "ops", topic=topics.pop_retry_topic("Billing", "Orders"),
                                 marks={topics.RESENT_FROM: dead.offset_msg_id})
        clock.advance(10)
        [again] = store.receive("Billing", "Orders", 1, 60_000)
        store.ack("Billing", again.receipt_handle)
    result = run_job(spark, tmp_path / "store", GEOMETRY, tmp_path / "timelines")
    expected = console_rows(tmp_path / "store", GEOMETRY)
    assert [(r[7], r[8]) for r in expected] == [("Billing", "consumed"), ("Shipping", "consumed")]
    assertDataFrameEqual(compared(result), spark.createDataFrame(expected, COMPARED))


@pytest.mark.parametrize("trace", [False, True])
def test_transactions_committed_and_rolled_back_as_the_console_shows_them(spark, tmp_path, trace):
    """A committed transactional message shows its half message held, then its produced copy; a
    rolled-back one keeps its timeline (the half message) instead of being dropped."""
    clock = FakeClock(START_MS)
    config = StoreConfig(geometry=GEOMETRY, flush="sync", schedule_interval_ms=0, trace=trace)
    with MessageStore.open(tmp_path / "store", config, clock=clock) as store:
        for outcome in ("commit", "rollback"):
            half = store.put_half(NewMessage("Payments", f"pay {outcome}".encode(), keys=[outcome]), "pg")
            clock.advance(50)
            store.end_transaction(half.offset_msg_id, outcome == "commit")
            clock.advance(50)
        [got] = store.receive("Billing", "Payments", 1, 60_000)
        store.ack("Billing", got.receipt_handle)
    result = run_job(spark, tmp_path / "store", GEOMETRY, tmp_path / "timelines")
    expected = console_rows(tmp_path / "store", GEOMETRY)
    assert len(expected) == 2
    assertDataFrameEqual(compared(result), spark.createDataFrame(expected, COMPARED))
    if not trace:
        kinds = sorted([h.kind for h in r.hops] for r in result.collect())
        assert kinds == [["transaction"], ["transaction", "produced"]]
