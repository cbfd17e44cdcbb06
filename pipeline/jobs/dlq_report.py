"""Dead-letter report: per consumer group and topic, how many messages died, after how many
retries and how long after they were stored, the keys, tags and reasons that fail most, and
the daily trend. The console's analytics page reads these tables with pyarrow.

Output: one Parquet table (Spark part files) per subdirectory of `out`; `group` is the consumer
group of the %DLQ%group topic, `topic` the topic the message was consumed from:

  summary/        group, topic, dead_letters, retries_avg, ttd_p50_ms, ttd_p90_ms, ttd_p99_ms
  daily/          day (UTC date of the dead letter's store time), group, topic, dead_letters
  retries/        group, retried_messages, retry_records (redeliveries), dead_letters
  ttd_histogram/  group, bucket, bucket_order, dead_letters (every bucket of every group with dead letters)
  top_keys/, top_tags/, top_reasons/
                  group, value, dead_letters, rank (the 20 most frequent per group; rank 1 the most,
                  ties by value)

Time to DLQ percentiles are nearest-rank (the smallest time at least that share of the group's
dead letters do not exceed) over the dead letters whose original is in the store, computed
with percentile_approx at an accuracy that is exact below TTD_ACCURACY dead letters."""

from __future__ import annotations

from pathlib import Path

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from pipeline.dead_letters import dead_letters
from pipeline.message_ids import message_copies
from pipeline.options import SourceOptions
from pipeline.staged_output import staged_output
from pipeline.trace_events import events_of, trace_events, trace_records, with_trace_bodies
from store.broker.trace import TraceKind
from store.format import topics

TOP = 20
TTD_ACCURACY = 100_000
SECOND, MINUTE, HOUR, DAY = 1_000, 60_000, 3_600_000, 86_400_000
# (label, lowest time to DLQ in the bucket): each bucket runs up to the next one's low.
TTD_BUCKETS = (("<1s", None), ("1-10s", SECOND), ("10s-1m", 10 * SECOND), ("1-10m", MINUTE),
               ("10m-1h", 10 * MINUTE), ("1h-1d", HOUR), (">1d", DAY))
TABLES = ("summary", "daily", "retries", "ttd_histogram", "top_keys", "top_tags", "top_reasons")


def summary(dead: DataFrame) -> DataFrame:
    ttd = F.percentile_approx("ttd_ms", [0.5, 0.9, 0.99], TTD_ACCURACY)
    return (dead.groupBy("group", "topic")
            .agg(F.count("*").alias("dead_letters"), F.avg("retries").alias("retries_avg"), ttd.alias("ttd"))
            .select("group", "topic", "dead_letters", "retries_avg",
                    *[F.col("ttd")[n].cast("bigint").alias(f"ttd_p{p}_ms") for n, p in enumerate((50, 90, 99))]))


def daily(dead: DataFrame) -> DataFrame:
    return dead.groupBy("day", "group", "topic").agg(F.count("*").alias("dead_letters"))


def retries(copies: DataFrame, dead: DataFrame, events: DataFrame) -> DataFrame:
    """Per group that retried or dead-lettered anything: the messages it retried, its retries
    (redeliveries) and its dead letters. A message's retries by a group are the most that any
    record tells: its records in %RETRY%group (each a redelivery of a push consumer), its dead
    letter's retries (a receiving group retries without writing copies) and its traced
    deliveries after the first (`events`: pipeline.trace_events.trace_events)."""
    in_retry_topic = (copies.where(F.col("copy_kind") == "retry")
                      .groupBy(F.substring("topic", len(topics.RETRY_PREFIX) + 1, 1 << 16).alias("group"),
                               "message_id")
                      .agg(F.count("*").alias("retries")))
    before_death = dead.select("group", "message_id", F.col("retries").cast("bigint"))
    redeliveries = events.where((F.col("kind") == TraceKind.DELIVERED.value) & (F.col("attempt") > 1)
                                & F.col("group").isNotNull())
    traced = (events_of(redeliveries, copies.select("message_id")).groupBy("group", "message_id")
              .agg((F.max("attempt") - 1).cast("bigint").alias("retries")))
    per_message = (in_retry_topic.unionByName(before_death).unionByName(traced)
                   .groupBy("group", "message_id").agg(F.max("retries").alias("retries")))
    retried = per_message.groupBy("group").agg(F.count(F.when(F.col("retries") > 0, True)).alias("retried_messages"),
                                               F.sum("retries").alias("retry_records"))
    died = dead.groupBy("group").agg(F.count("*").alias("dead_letters"))
    return (retried.join(died, "group", "full")
            .fillna(0, subset=["retried_messages", "retry_records", "dead_letters"])
            .select("group", "retried_messages", "retry_records", "dead_letters"))


def ttd_histogram(dead: DataFrame) -> DataFrame:
    bucket_order = F.lit(0)
    for order, (_, low) in enumerate(TTD_BUCKETS[1:], start=1):
        bucket_order = F.when(F.col("ttd_ms") >= low, F.lit(order)).otherwise(bucket_order)
    bucket_order = F.when(F.col("ttd_ms").isNotNull(), bucket_order)  # unknown: in no bucket
    counts = [F.count(F.when(bucket_order == order, True)).alias(f"in_{order}") for order in range(len(TTD_BUCKETS))]
    buckets = F.array(*[F.struct(F.lit(label).alias("bucket"), F.lit(order).alias("bucket_order"),
                                 F.col(f"in_{order}").alias("dead_letters"))
                        for order, (label, _) in enumerate(TTD_BUCKETS)])
    return (dead.groupBy("group").agg(*counts).select("group", F.inline(buckets))
            .select("group", "bucket", "bucket_order", "dead_letters"))


def top(dead: DataFrame, values) -> DataFrame:
    """The TOP values per group by dead letters; `values` is an array of each dead letter's
    values, each counted once."""
    counted = (dead.select("group", F.explode(F.array_distinct(values)).alias("value"))
               .where(F.col("value").isNotNull()).groupBy("group", "value").agg(F.count("*").alias("dead_letters")))
    order = Window.partitionBy("group").orderBy(F.col("dead_letters").desc(), F.col("value").asc())
    return (counted.withColumn("rank", F.row_number().over(order)).where(F.col("rank") <= TOP)
            .select("group", "value", "dead_letters", "rank"))


def report(dead: DataFrame, copies: DataFrame, events: DataFrame) -> dict[str, DataFrame]:
    """The tables (by name, as TABLES) from the dead letters (pipeline.dead_letters.dead_letters),
    the message copies (pipeline.message_ids.message_copies) and the trace events
    (pipeline.trace_events.trace_events) of a commit log."""
    return {
        "summary": summary(dead),
        "daily": daily(dead),
        "retries": retries(copies, dead, events),
        "ttd_histogram": ttd_histogram(dead),
        "top_keys": top(dead, F.col("keys")),
        "top_tags": top(dead, F.array("tags")),
        "top_reasons": top(dead, F.array("reason")),
    }


def main(spark: SparkSession, source: SourceOptions, out: Path) -> dict[str, int]:
    scanned = with_trace_bodies(source).read(spark).persist(StorageLevel.MEMORY_AND_DISK)
    records = scanned.where(F.col("copy_kind") != "trace")
    dead = dead_letters(records, trace_records(scanned)).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        tables = report(dead, message_copies(records), trace_events(trace_records(scanned)))
        with staged_output(out) as staging:
            for name in TABLES:
                tables[name].write.parquet(str(staging / name))
        counted = dead.agg(F.count("*").alias("dead_letters"), F.countDistinct("group").alias("groups")).first()
    finally:
        dead.unpersist()
        scanned.unpersist()
    return {"dead_letters": counted.dead_letters, "groups": counted.groups}
