"""A Spark session set up for the pipeline: bound to SPARK_LOCAL_IP (loopback unless set), the
project's interpreter on the workers, no UI, filter pushdown on, and the commit log data source
registered."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from pyspark.sql import SparkSession

from pipeline.executor_bundle import shipped_code
from pipeline.source import CommitLogDataSource


def spark_session(master: str = "local[*]", app_name: str = "mqlens-pipeline", shuffle_partitions: int = 8,
                  extra: dict[str, str] | None = None) -> SparkSession:
    local_ip = os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    python = workers_python(master, extra or {})
    os.environ["PYSPARK_PYTHON"] = python  # what PySpark starts workers with; the setting alone is not enough
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
               .config("spark.sql.python.filterPushdown.enabled", "true")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.pyspark.python", python)
               .config("spark.driver.bindAddress", local_ip)
               .config("spark.driver.host", local_ip))
    for key, value in (extra or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")  # a failed job is reported once, in words, by the caller
    return register(spark)


def workers_python(master: str, extra: dict[str, str]) -> str:
    """The Python the executors run: the one `spark.pyspark.python` names, else on a cluster the
    one PYSPARK_PYTHON names (the workers' own, which may live elsewhere), else this one (local
    workers must import this project)."""
    given = extra.get("spark.pyspark.python")
    if given:
        return given
    if not master.startswith("local"):
        return os.environ.get("PYSPARK_PYTHON") or sys.executable
    return sys.executable


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
def job_session(master: str, ship_code: bool = False) -> Iterator[SparkSession]:
    """A session for one job: the one already running in this process if any (left running),
    else a new one, stopped afterwards. With `ship_code`, a new session sends mqlens's code to
    its executors (pipeline.executor_bundle), for workers where mqlens is not installed."""
    active = SparkSession.getActiveSession()
    if active is not None:
        yield register(active)
        return
    with ExitStack() as stack:
        extra = stack.enter_context(shipped_code()) if ship_code else None
        spark = spark_session(master, extra=extra)
        try:
            yield spark
        finally:
            spark.stop()
