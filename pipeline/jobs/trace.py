"""The trace table: one row per stored record, written as Parquet partitioned by copy kind."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from pipeline.source import FORMAT


def trace_table(spark: SparkSession, store_dir: Path, *, with_body: bool = False) -> DataFrame:
    return (spark.read.format(FORMAT).option("body", str(with_body).lower()).load(str(store_dir)))


def main(spark: SparkSession, store_dir: Path, out: Path, *, with_body: bool = False) -> int:
    """Write the table; returns the rows written."""
    table = trace_table(spark, store_dir, with_body=with_body).cache()
    table.write.mode("overwrite").partitionBy("copy_kind").parquet(str(out))
    count = table.count()
    table.unpersist()
    return count
