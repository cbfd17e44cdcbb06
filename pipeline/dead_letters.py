"""One row per dead letter (a record of a %DLQ%group topic) with what the reports count: the
group, the topic its message was consumed from, its retries before death, its time to DLQ, its
keys and tag, and why it failed as the console's inbox says it (app.services.dead_letters:
the reason of the trace's dead-letter event for this copy, else the last failure reported
before it)."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pipeline.message_ids import message_copies, origin_topic, originals
from pipeline.trace_events import events_of, trace_events
from store.broker.trace import TraceKind
from store.format import topics

DAY_MS = 86_400_000
DEAD_LETTER_DDL = (
    "`group` STRING, topic STRING, message_id STRING, offset_msg_id STRING, phys_offset BIGINT, "
    "store_timestamp BIGINT, day DATE, retries INT, ttd_ms BIGINT, keys ARRAY<STRING>, tags STRING, reason STRING"
)
FAILURES = (TraceKind.FAILED.value, TraceKind.INVISIBLE_TIMEOUT.value)


def _reason(events: Column) -> Column:
    """The dead letter's reason from its message's events in order (null when none is known)."""
    this = F.array_position(F.transform(events, lambda e: (e["kind"] == TraceKind.DEAD_LETTER.value)
                                        & (e["offset_msg_id"] == F.col("offset_msg_id"))), True).cast("int")
    before = F.when(this > 0, F.slice(events, 1, this - 1)).otherwise(events)
    failures = F.filter(before, lambda e: e["kind"].isin(*FAILURES) & (F.coalesce(e["reason"], F.lit("")) != ""))
    last_failure = F.get(failures, F.size(failures) - 1)["reason"]
    own = F.when(this > 0, F.nullif(F.element_at(events, F.greatest(this, F.lit(1)))["reason"], F.lit("")))
    return F.nullif(F.coalesce(own, last_failure), F.lit(""))


def dead_letters(records: DataFrame, trace: DataFrame) -> DataFrame:
    """DEAD_LETTER_DDL rows of the dead letters in `records` (the commit log), their reasons from
    `trace` (the trace topic's records, with bodies). The topic is the one the dead letter names
    (DLQ_ORIGIN_TOPIC, RETRY_TOPIC, REAL_TOPIC), else its original's; the time to DLQ is its
    store time minus its original's (null when the original is not in the store); retries are
    its reconsume times less the failed delivery that sent it there."""
    copies = message_copies(records)
    dead = copies.where(F.col("copy_kind") == "dead_letter")
    first = originals(copies).select("message_id", F.col("offset_msg_id").alias("original_offset_msg_id"),
                                     F.col("topic").alias("original_topic"),
                                     F.col("store_timestamp").alias("original_timestamp"))
    events = events_of(trace_events(trace), dead.select("message_id"))
    ordered = (events.groupBy("message_id").agg(F.array_sort(F.collect_list(F.struct(
        "at_ms", "trace_phys_offset", "trace_position", "kind", "offset_msg_id", "reason"))).alias("events")))
    with_facts = dead.join(first, "message_id", "left").join(ordered, "message_id", "left")
    found = F.col("original_offset_msg_id").isNotNull()
    return with_facts.select(
        F.substring("topic", len(topics.DLQ_PREFIX) + 1, 1 << 16).alias("group"),
        F.coalesce(origin_topic(), F.when(found, F.col("original_topic"))).alias("topic"),
        "message_id", "offset_msg_id", "phys_offset", "store_timestamp",
        F.date_from_unix_date(F.floor(F.col("store_timestamp") / DAY_MS).cast("int")).alias("day"),
        F.greatest(F.col("reconsume_times") - 1, F.lit(0)).alias("retries"),
        (F.col("store_timestamp") - F.col("original_timestamp")).alias("ttd_ms"),
        "keys", "tags",
        _reason(F.col("events")).alias("reason"),
    )
