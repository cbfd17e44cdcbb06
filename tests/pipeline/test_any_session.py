"""A data engineer's own Spark session, made without the pipeline's settings: one documented call
(pipeline.session.register) makes the commit log source work, from a relative store path too."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from pipeline.segments import segment_files, walk
from tests.pipeline.stores import build_retry_store

pytestmark = pytest.mark.slow

SESSION = textwrap.dedent("""
    import sys
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1")
             .getOrCreate())
    if sys.argv[1] == "register":
        from pipeline.session import register
        register(spark)
    else:
        from pipeline.source import CommitLogDataSource
        spark.dataSource.register(CommitLogDataSource)
    table = spark.read.format("rocketmq_commitlog").load("store")
    print("records", table.count(), table.where("topic = 'Orders'").count())
""")


def run_session(tmp_path, how: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK", "SPARK"))}
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"  # python3 there is not this project's interpreter
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    return subprocess.run([sys.executable, "-c", SESSION, how], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)


def test_register_makes_the_source_work_in_a_plain_session(tmp_path):
    build_retry_store(tmp_path / "store")
    stored = [m.topic for segment in segment_files(tmp_path / "store") for m in walk(segment)]
    done = run_session(tmp_path, "register")
    assert done.returncode == 0, done.stderr[-3000:]
    [line] = [line for line in done.stdout.splitlines() if line.startswith("records ")]
    assert line.split()[1:] == [str(len(stored)), str(stored.count("Orders"))]
    assert stored.count("Orders") > 0


def test_without_it_the_session_fails(tmp_path):
    build_retry_store(tmp_path / "store")
    done = run_session(tmp_path, "plain")
    assert done.returncode != 0
    assert "No module named 'pipeline'" in done.stderr  # its workers ran the system's python3
