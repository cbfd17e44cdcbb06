"""Run in a process of its own by test_masters: two jobs on a Spark master whose executors run a
Python that cannot import mqlens, with or without mqlens's code shipped to them; prints each
job's final status as JSON."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

from pipeline.executor_bundle import shipped_code
from pipeline.options import SourceOptions
from pipeline.run import run_job
from pipeline.session import job_session, spark_session
from store.log.geometry import StoreGeometry

JOBS = ("dlq-report", "projections")


def main(argv: list[str]) -> int:
    master, store, out_root, python, ship = argv[0], Path(argv[1]), Path(argv[2]), argv[3], argv[4] == "ship"
    cq_file_size, slots, entries = (int(v) for v in argv[5:8])
    source = SourceOptions(store, StoreGeometry(cq_file_size=cq_file_size, index_slots=slots, index_entries=entries))
    with shipped_code() as shipping:
        extra = {"spark.pyspark.python": python, **(shipping if ship else {})}
        spark = spark_session(master, app_name="mqlens-shipped-code", shuffle_partitions=2, extra=extra)
        try:
            statuses = {job: asdict(run_job(job, source, out_root / job, lambda: job_session(master))) for job in JOBS}
        finally:
            spark.stop()
    print(json.dumps(statuses))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
