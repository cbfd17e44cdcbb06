"""The dead-letter report: every table is what the store's Python API says of its %DLQ% and
%RETRY% queues (reasons as the console's inbox finds them), on a generated store and both
golden stores, in the exact Parquet layout the console's analytics page reads with pyarrow."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import Row
from pyspark.testing import assertDataFrameEqual, assertSchemaEqual

from app.services import lookup
from app.services.dead_letters import DeadLetterCache
from pipeline.dead_letters import DEAD_LETTER_DDL, dead_letters
from pipeline.jobs import dlq_report
from pipeline.options import SourceOptions
from pipeline.trace_events import trace_records
from store.broker.retry import origin_topic
from store.broker.trace import TraceKind
from store.format import topics
from store.format.codec import StoredMessage
from store.message_store import MessageStore, StoreConfig
from tests.conftest import BROKER_DELAY_LEVELS, BROKER_GEOMETRY, GOLDEN_GEOMETRY
from tests.pipeline.stores import GEOMETRY, build_retry_store

LAYOUT = {
    "summary": [("group", pa.string()), ("topic", pa.string()), ("dead_letters", pa.int64()),
                ("retries_avg", pa.float64()), ("ttd_p50_ms", pa.int64()), ("ttd_p90_ms", pa.int64()),
                ("ttd_p99_ms", pa.int64())],
    "daily": [("day", pa.date32()), ("group", pa.string()), ("topic", pa.string()), ("dead_letters", pa.int64())],
    "retries": [("group", pa.string()), ("retried_messages", pa.int64()), ("retry_records", pa.int64()),
                ("dead_letters", pa.int64())],
    "ttd_histogram": [("group", pa.string()), ("bucket", pa.string()), ("bucket_order", pa.int32()),
                      ("dead_letters", pa.int64())],
    **{name: [("group", pa.string()), ("value", pa.string()), ("dead_letters", pa.int64()), ("rank", pa.int32())]
       for name in ("top_keys", "top_tags", "top_reasons")},
}
BUCKETS = [("<1s", 1_000), ("1-10s", 10_000), ("10s-1m", 60_000), ("1-10m", 600_000), ("10m-1h", 3_600_000),
           ("1h-1d", 86_400_000), (">1d", None)]
MARKERS = (topics.ORIGIN_MESSAGE_ID, topics.DLQ_ORIGIN_TOPIC, topics.DLQ_ORIGIN_MESSAGE_ID, topics.RESENT_FROM)


@dataclass
class Dead:
    group: str
    topic: str | None
    day: object
    retries: int
    ttd_ms: int | None
    keys: set[str]
    tags: str | None
    reason: str | None


@dataclass
class StoreFacts:
    dead: list[Dead]
    # group -> unique key -> its retries: the most its records in %RETRY%group, its dead letters
    # (reconsume times less one) or its traced deliveries after the first tell
    retries: dict[str, Counter]


def queue_records(store: MessageStore, topic: str) -> list[StoredMessage]:
    return [store.get_by_queue_offset(topic, queue_id, offset)
            for queue_id, low, high in store.topics()[topic] for offset in range(low, high)]


def store_facts(store_dir: Path, geometry) -> StoreFacts:
    """What the store's API says of its dead-letter and retry queues."""
    facts = StoreFacts([], defaultdict(Counter))

    def at_least(group: str, unique_key: str, retries: int) -> None:
        facts.retries[group][unique_key] = max(facts.retries[group][unique_key], retries)

    reasons = DeadLetterCache()
    with MessageStore.open(store_dir, StoreConfig(geometry=geometry), read_only=True) as store:
        in_retry_topics: dict[str, Counter] = defaultdict(Counter)
        unique_keys = set()
        for name in store.topics():
            if name == topics.TRACE_TOPIC:
                continue
            records = queue_records(store, name)
            unique_keys |= {msg.unique_key for msg in records if msg.unique_key}
            if topics.is_retry_topic(name):
                for msg in records:
                    if topics.message_copy_kind(msg.topic, msg.properties) == "retry":
                        in_retry_topics[name[len(topics.RETRY_PREFIX):]][msg.unique_key] += 1
            if not topics.is_dlq_topic(name):
                continue
            for msg in records:
                at_least(name[len(topics.DLQ_PREFIX):], msg.unique_key, max(msg.reconsume_times - 1, 0))
                copies = lookup.all_copies(store, [msg.unique_key] if msg.unique_key else [], msg)
                original = next((m for m in copies if topics.message_copy_kind(m.topic, m.properties) == "original"
                                 and not any(p in m.properties for p in MARKERS)), None)
                facts.dead.append(Dead(
                    name[len(topics.DLQ_PREFIX):], origin_topic(msg) or (original.topic if original else None),
                    datetime.fromtimestamp(msg.store_timestamp / 1000, UTC).date(), max(msg.reconsume_times - 1, 0),
                    msg.store_timestamp - original.store_timestamp if original else None, set(msg.keys), msg.tags,
                    reasons.reason(store, msg) or None))
        for group, counted in in_retry_topics.items():
            for unique_key, records in counted.items():
                at_least(group, unique_key, records)
        for unique_key in unique_keys:
            for event in store.timeline(unique_key):
                if event.kind == TraceKind.DELIVERED and event.group and (event.attempt or 0) > 1:
                    at_least(event.group, unique_key, event.attempt - 1)
    return facts


def nearest_rank(values: list[int], share: float) -> int | None:
    ordered = sorted(values)
    return ordered[max(math.ceil(share * len(ordered)) - 1, 0)] if ordered else None


def expected_tables(facts: StoreFacts) -> dict[str, list[tuple]]:
    by_group_topic, by_group = defaultdict(list), defaultdict(list)
    for d in facts.dead:
        by_group_topic[(d.group, d.topic)].append(d)
        by_group[d.group].append(d)
    summary = []
    for (group, topic), dead in by_group_topic.items():
        times = [d.ttd_ms for d in dead if d.ttd_ms is not None]
        summary.append((group, topic, len(dead), sum(d.retries for d in dead) / len(dead),
                        *[nearest_rank(times, share) for share in (0.5, 0.9, 0.99)]))
    daily = Counter((d.day, d.group, d.topic) for d in facts.dead)
    retries = [(g, sum(1 for n in counted.values() if n > 0), sum(counted.values()), len(by_group.get(g, [])))
               for g, counted in facts.retries.items()]
    histogram = []
    for group, dead in by_group.items():
        for order, (label, below) in enumerate(BUCKETS):
            low = BUCKETS[order - 1][1] if order else None
            histogram.append((group, label, order, sum(
                1 for d in dead if d.ttd_ms is not None and (low is None or d.ttd_ms >= low)
                and (below is None or d.ttd_ms < below))))

    def top(values_of) -> list[tuple]:
        rows = []
        for group, dead in by_group.items():
            counted = Counter(value for d in dead for value in values_of(d) if value is not None)
            ranked = sorted(counted.items(), key=lambda item: (-item[1], item[0]))[:20]
            rows += [(group, value, count, rank) for rank, (value, count) in enumerate(ranked, start=1)]
        return rows

    return {"summary": summary, "daily": [(*key, n) for key, n in daily.items()], "retries": retries,
            "ttd_histogram": histogram, "top_keys": top(lambda d: d.keys), "top_tags": top(lambda d: [d.tags]),
            "top_reasons": top(lambda d: [d.reason])}


def check_report(spark, store: Path, geometry, out: Path, delay_levels: str | None = None) -> dict[str, list]:
    """Run the job; every table has the layout pyarrow is promised and the rows the store's API gives."""
    counts = dlq_report.main(spark, SourceOptions(store, geometry, delay_levels), out)
    facts = store_facts(store, geometry)
    assert counts == {"dead_letters": len(facts.dead), "groups": len({d.group for d in facts.dead})}
    assert sorted(p.name for p in out.iterdir()) == sorted(LAYOUT)
    expected = expected_tables(facts)
    for name, fields in LAYOUT.items():
        table = pq.read_table(out / name)  # as the console's analytics page reads it
        assert [(f.name, f.type) for f in table.schema] == fields, name
        names = [field for field, _ in fields]
        assertDataFrameEqual([Row(**row) for row in table.to_pylist()],
                             [Row(**dict(zip(names, row, strict=True))) for row in expected[name]])
    return expected


@pytest.fixture(scope="module")
def retry_store(tmp_path_factory) -> Path:
    return build_retry_store(tmp_path_factory.mktemp("dlq") / "store")


def test_a_generated_store(spark, retry_store, tmp_path):
    expected = check_report(spark, retry_store, GEOMETRY, tmp_path / "report")
    source = SourceOptions(retry_store, GEOMETRY)
    dead = dead_letters(source.read(spark), trace_records(replace(source, with_body=True).read(spark)))
    assertSchemaEqual(dead.schema, spark.createDataFrame([], DEAD_LETTER_DDL).schema)
    summary = {(row[0], row[1]): row for row in expected["summary"]}
    assert set(summary) == {("g-pop", "Orders"), ("g-push", "Payments"), ("g-push", "Audit"), ("g-bulk", "Bulk")}
    assert len({row[0] for row in expected["daily"]}) == 2
    assert {row[1] for row in expected["top_reasons"]} >= {"the consumer asked for no more retries",
                                                           "3 delivery attempts failed; last: card expired"}
    bulk_keys = [row for row in expected["top_keys"] if row[0] == "g-bulk"]
    assert bulk_keys[0][1:] == ("bulk", 24, 1) and len(bulk_keys) == 20 and bulk_keys[-1][1] == "b-18"
    histogram = {(row[0], row[1]): row[3] for row in expected["ttd_histogram"]}
    assert histogram[("g-bulk", "1-10s")] and histogram[("g-bulk", "10s-1m")] and histogram[("g-pop", "1h-1d")]
    # a group's retries count at least its dead letters' (the summary's average): also a group that
    # receives, retrying without copies in a retry topic
    retries = {row[0]: row[2] for row in expected["retries"]}
    for group in ("g-pop", "g-push"):
        before_death = sum(row[2] * row[3] for row in expected["summary"] if row[0] == group)
        assert retries[group] >= before_death > 0, group


def test_the_golden_store(spark, golden_store_dir, tmp_path):
    expected = check_report(spark, golden_store_dir, GOLDEN_GEOMETRY, tmp_path / "report")
    # order-1003 died at once (no retries; its original is here), order-9999 after 16 (its original is gone)
    [summary] = expected["summary"]
    assert summary[:4] == ("GID_golden", "TopicTest", 2, 8.0) and summary[4] == summary[6] is not None


def test_the_broker_store(spark, golden_broker_dir, golden_broker_manifest, tmp_path):
    expected = check_report(spark, golden_broker_dir, BROKER_GEOMETRY, tmp_path / "report", BROKER_DELAY_LEVELS)
    failed = {d["key"] for d in golden_broker_manifest["deadLetters"]}
    assert expected["summary"][0][:4] == ("cg-fail", "Orders", len(failed), 2.0)  # after retries 1 and 2
    assert {row[0]: row[1:] for row in expected["retries"]} == {"cg-fail": (7, 13, 6), "cg-flaky": (3, 3, 0)}
    assert failed <= {row[1] for row in expected["top_keys"]}
    assert expected["top_reasons"] == []  # RocketMQ's own trace holds no mqlens events
