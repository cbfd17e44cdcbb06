"""The trace table: one row per stored record, written as Parquet partitioned by copy kind."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

from pipeline.options import SourceOptions
from pipeline.staged_output import staged_output


def main(spark: SparkSession, source: SourceOptions, out: Path) -> dict[str, int]:
    table = source.read(spark).cache()
    try:
        with staged_output(out) as staging:  # a failed write leaves `out` as it was
            table.write.mode("overwrite").partitionBy("copy_kind").parquet(str(staging))
            count = table.count()
    finally:
        table.unpersist()
    return {"records": count}
