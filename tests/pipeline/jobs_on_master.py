"""Run pipeline jobs in one Spark session on a given master (a process of its own: a process
holds one Spark context):

    python -m tests.pipeline.jobs_on_master MASTER STORE OUT_ROOT CQ_FILE_SIZE INDEX_SLOTS INDEX_ENTRIES \\
        [WORKERS_PYTHON ship|no JOB...]

Every job by default; with WORKERS_PYTHON, the executors run that Python, and `ship` sends them
mqlens's code (pipeline.executor_bundle). Each job writes OUT_ROOT/JOB; the last line printed is
a JSON object of job -> final status, and the executors' process ids."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict
from pathlib import Path

from pipeline.executor_bundle import shipped_code
from pipeline.jobs import JOBS
from pipeline.options import SourceOptions
from pipeline.run import run_job
from pipeline.session import job_session, spark_session
from store.log.geometry import StoreGeometry


def main(argv: list[str]) -> int:
    master, store, out_root = argv[0], Path(argv[1]), Path(argv[2])
    cq_file_size, slots, entries = (int(v) for v in argv[3:6])
    python, ship, jobs = (argv[6], argv[7] == "ship", argv[8:] or list(JOBS)) if len(argv) > 6 else (None, False,
                                                                                                     list(JOBS))
    source = SourceOptions(store, StoreGeometry(cq_file_size=cq_file_size, index_slots=slots, index_entries=entries))
    with shipped_code() as shipping:
        extra = {**({"spark.pyspark.python": python} if python else {}), **(shipping if ship else {})}
        spark = spark_session(master, app_name="mqlens-jobs-on-master", shuffle_partitions=2, extra=extra)
        try:
            statuses = {job: asdict(run_job(job, source, out_root / job, lambda: job_session(master))) for job in jobs}
            statuses["executor_pids"] = sorted(set(spark.sparkContext.parallelize(range(8), 8).map(
                lambda _: os.getpid()).collect()))
        finally:
            spark.stop()
    print(json.dumps(statuses))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
