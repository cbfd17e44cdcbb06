"""Spark finds Python data sources in modules named pyspark_* that have a DefaultSource: with
mqlens installed where Spark's Python workers run, `spark.read.format("rocketmq_commitlog")`
works in any session without registering it. (Filter pushdown must still be on:
pipeline.session.register does both.)"""

from pipeline.source import CommitLogDataSource as DefaultSource

__all__ = ["DefaultSource"]
