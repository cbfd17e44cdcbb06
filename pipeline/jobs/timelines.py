"""Retry timelines: every message with its hops in time order (produced, delivered, failed,
retry scheduled, redelivered, dead-lettered, resent, consumed...) across its original,
SCHEDULE_TOPIC_XXXX, %RETRY%, %DLQ% and resent copies, each group's verdict and time to DLQ,
as the console's timeline reports them: hops from mqlens's trace events when the message has
any, else from its copies; verdicts settled with the consumer offsets and receive state in the
store's config/.

Output: Parquet at `out`, one row per message (TIMELINE_DDL; hops of pipeline.hops.HOP_DDL in
time order, verdicts of VERDICT_DDL by group name). `time_to_dlq_ms` is a group's
first dead-lettered hop minus the original's store time (null when either is missing); the
message's own is the smallest of its groups'."""

from __future__ import annotations

from pathlib import Path

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline.consumer_progress import ConsumerProgress, read_progress
from pipeline.hops import HOP_DDL, copy_hops, event_hops, ordered_hops
from pipeline.message_ids import message_copies, originals
from pipeline.options import SourceOptions
from pipeline.staged_output import staged_output
from pipeline.trace_events import events_of, trace_events, trace_records, with_trace_bodies
from pipeline.verdicts import VERDICT_DDL as SETTLED_DDL
from pipeline.verdicts import with_verdicts
from store.format import topics
from store.format.delay_levels import DelayLevels

VERDICT_DDL = f"{SETTLED_DDL}, time_to_dlq_ms BIGINT"
TIMELINE_DDL = (
    "message_id STRING, unique_key STRING, topic STRING, offset_msg_id STRING, phys_offset BIGINT, "
    f"store_timestamp BIGINT, traced BOOLEAN, hops ARRAY<STRUCT<{HOP_DDL}>>, "
    f"verdicts ARRAY<STRUCT<{VERDICT_DDL}>>, time_to_dlq_ms BIGINT"
)


def timelines(records: DataFrame, trace: DataFrame, progress: ConsumerProgress, delay_levels: DelayLevels
              ) -> DataFrame:
    """The timelines (TIMELINE_DDL) of the messages in `records` (the commit log), with the
    events of `trace` (the trace topic's records, with bodies)."""
    copies = message_copies(records)
    events = events_of(trace_events(trace), copies.select("message_id"))
    hops = ordered_hops(event_hops(events).unionByName(copy_hops(copies, delay_levels)))
    base = originals(copies).join(hops, "message_id")
    since_original = F.transform("verdicts", lambda v: v.withField(
        "time_to_dlq_ms", v["dead_lettered_ms"] - F.col("store_timestamp")))
    result = with_verdicts(base, progress).withColumn("verdicts", since_original)
    return result.select(
        "message_id", "unique_key", "topic", "offset_msg_id", "phys_offset", "store_timestamp", "traced", "hops",
        "verdicts", F.array_min(F.transform("verdicts", lambda v: v["time_to_dlq_ms"])).alias("time_to_dlq_ms"))


def main(spark: SparkSession, source: SourceOptions, out: Path) -> dict[str, int]:
    scanned = with_trace_bodies(source).read(spark).persist(StorageLevel.MEMORY_AND_DISK)
    records, trace = scanned.where(F.col("copy_kind") != "trace"), trace_records(scanned)
    try:
        progress = read_progress(spark, source.store_dir, records)
        table = source.delay_table()
        if table.guessed:
            table.refuse_guess(records.where(F.col("topic") == topics.SCHEDULE_TOPIC).count())
        result = timelines(records, trace, progress, table.levels)
        with staged_output(out) as staging:
            result.write.mode("overwrite").parquet(str(staging))
            written = spark.read.parquet(str(staging)).agg(
                F.count("*").alias("messages"), F.sum(F.size("hops")).alias("hops"),
                F.sum(F.exists("verdicts", lambda v: v["dead_lettered_ms"].isNotNull()).cast("int"))
                .alias("dead_lettered"),
                F.sum(F.col("traced").cast("int")).alias("traced")).first()
    finally:
        scanned.unpersist()
    return {name: int(written[name] or 0) for name in ("messages", "hops", "dead_lettered", "traced")}
