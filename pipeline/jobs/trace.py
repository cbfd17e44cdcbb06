"""The trace table: one row per stored record, written as Parquet partitioned by copy kind."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

from pipeline.options import SourceOptions


def main(spark: SparkSession, source: SourceOptions, out: Path) -> dict[str, int]:
    table = source.read(spark).cache()
    table.write.mode("overwrite").partitionBy("copy_kind").parquet(str(out))
    count = table.count()
    table.unpersist()
    return {"records": count}
