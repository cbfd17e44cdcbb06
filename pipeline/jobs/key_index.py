"""Key index export: every key the store's index would hold, with the records it leads to, from
the commit log alone, for stores whose index has too few slots (long hash chains) or none.

Output: Parquet at `out`, one row per record and key: topic, key, kind ("key": one of the
record's KEYS; "unique_key": its UNIQ_KEY), offset_msg_id, unique_key, phys_offset,
store_timestamp; sorted by (topic, key), then kind and commit log offset, across the part
files in name order, so a reader's filters on topic and key skip most row groups. Records the
index leaves out (transaction rollbacks) are left out; the trace topic's records are in, as in
the index."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline.options import SourceOptions
from pipeline.staged_output import staged_output
from store.format.codec import TRANSACTION_ROLLBACK, TRANSACTION_TYPE_MASK

KEY_INDEX_DDL = ("topic STRING, key STRING, kind STRING, offset_msg_id STRING, unique_key STRING, "
                 "phys_offset BIGINT, store_timestamp BIGINT")
ORDER = ("topic", "key", "kind", "phys_offset")


def key_index(records: DataFrame) -> DataFrame:
    """KEY_INDEX_DDL rows of the commit log `records`, sorted."""
    indexed = records.where(F.col("sys_flag").bitwiseAND(TRANSACTION_TYPE_MASK) != TRANSACTION_ROLLBACK)
    found = ("offset_msg_id", "unique_key", "phys_offset", "store_timestamp")
    by_keys = indexed.select("topic", F.explode(F.array_distinct("keys")).alias("key"), F.lit("key").alias("kind"),
                             *found)
    by_unique_key = indexed.where(F.col("unique_key").isNotNull()).select(
        "topic", F.col("unique_key").alias("key"), F.lit("unique_key").alias("kind"), *found)
    return by_keys.unionByName(by_unique_key).orderBy(*ORDER)


def main(spark: SparkSession, source: SourceOptions, out: Path) -> dict[str, int]:
    with staged_output(out) as staging:
        key_index(replace(source, with_body=False).read(spark)).write.mode("overwrite").parquet(str(staging))
        counted = spark.read.parquet(str(staging)).agg(
            F.count("*").alias("entries"), F.countDistinct("topic", "key").alias("keys")).first()
    return {"keys": counted["keys"], "entries": counted["entries"]}
