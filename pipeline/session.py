"""A Spark session set up for the pipeline: bound to SPARK_LOCAL_IP (loopback unless set), the
project's interpreter on the workers, no UI, filter pushdown on, and the commit log data source
registered."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import SparkSession

from pipeline.source import CommitLogDataSource


def spark_session(master: str = "local[*]", app_name: str = "mqlens-pipeline", shuffle_partitions: int = 8,
                  extra: dict[str, str] | None = None) -> SparkSession:
    local_ip = os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
               .config("spark.sql.python.filterPushdown.enabled", "true")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.pyspark.python", sys.executable)
               .config("spark.driver.bindAddress", local_ip)
               .config("spark.driver.host", local_ip))
    for key, value in (extra or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")  # a failed job is reported once, in words, by the caller
    return register(spark)


def register(spark: SparkSession) -> SparkSession:
    """Make `spark.read.format("rocketmq_commitlog")` work in a session made anywhere (a
    notebook, spark-submit, a shell): turns on the Python filter pushdown the source relies on,
    and registers the source to run in this interpreter, which can import mqlens (a session
    started without PYSPARK_PYTHON would run its workers in the system's python3). On a cluster
    the executors need the package too: see docs/pipeline.md."""
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    context = spark.sparkContext
    if context.master.startswith("local"):
        context.pythonExec = sys.executable
    spark.dataSource.register(CommitLogDataSource)
    return spark


@contextmanager
def job_session(master: str) -> Iterator[SparkSession]:
    """A session for one job: the one already running in this process if any (left running),
    else a new one, stopped afterwards."""
    active = SparkSession.getActiveSession()
    if active is not None:
        yield register(active)
        return
    spark = spark_session(master)
    try:
        yield spark
    finally:
        spark.stop()
