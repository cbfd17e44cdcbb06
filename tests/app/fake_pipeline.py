"""A stand-in for `python -m app.cli` in pipeline runs (the pipeline_command setting), keeping the
command's contract without Spark: `pipeline run JOB --store DIR --out DIR --status FILE ...`, a
status file replaced in one step, output tables as Parquet folders, exit 0, 1 or 2.

FAKE_PIPELINE_MODE says how the run goes: succeed (the default); hold (runs until a file named
`release` appears in the run's folder, then succeeds); fail (Spark's error in the status file,
exit 1); crash (dies with exit 3 and no final status, its error only in its log). It writes the
arguments and environment it got to argv.json and env.json in the run's folder."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

HOLD_LIMIT_S = 120  # a held run that nobody releases ends by itself
SPARK_ERROR = "Job aborted due to stage failure: corrupt record at position 4096 of 00000000000000000000"


def write_status(path: Path, **fields) -> None:
    status = {"job": fields.pop("job"), "state": "running", "stage": "", "tasks_done": 0, "tasks_total": 0,
              "records": 0, "skipped_ranges": 0, "counts": {}, "summary": "", "error": None, **fields,
              "updated_at": int(time.time() * 1000)}
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(status), encoding="utf-8")
    os.replace(temporary, path)


def write_table(folder: Path, columns: dict[str, pa.Array]) -> None:
    folder.mkdir(parents=True)
    pq.write_table(pa.table(columns), folder / "part-00000.parquet")
    (folder / "_SUCCESS").write_bytes(b"")


def dlq_report(out: Path) -> dict[str, int]:
    day = dt.date(2026, 11, 20)
    groups = ["GID_billing", "GID_billing", "GID_shipping"]
    write_table(out / "summary", {
        "group": pa.array(["GID_billing", "GID_shipping"]), "topic": pa.array(["Orders", "Parcels"]),
        "dead_letters": pa.array([5, 2], pa.int64()), "retries_avg": pa.array([2.4, 1.0]),
        "ttd_p50_ms": pa.array([61_000, 1_500], pa.int64()), "ttd_p90_ms": pa.array([120_000, 2_000], pa.int64()),
        "ttd_p99_ms": pa.array([None, 2_000], pa.int64())})
    write_table(out / "daily", {
        "day": pa.array([day, day + dt.timedelta(days=2), day], pa.date32()), "group": pa.array(groups),
        "topic": pa.array(["Orders", "Orders", "Parcels"]), "dead_letters": pa.array([3, 2, 2], pa.int64())})
    write_table(out / "retries", {
        "group": pa.array(["GID_billing", "GID_shipping"]), "retried_messages": pa.array([5, 2], pa.int64()),
        "retry_records": pa.array([12, 2], pa.int64()), "dead_letters": pa.array([5, 2], pa.int64())})
    write_table(out / "ttd_histogram", {
        "group": pa.array(["GID_billing", "GID_billing", "GID_shipping"]),
        "bucket": pa.array(["1-10 min", "< 1 s", "1-10 s"]), "bucket_order": pa.array([3, 0, 1], pa.int32()),
        "dead_letters": pa.array([5, 0, 2], pa.int64())})
    for name, values in (("top_keys", ["order-1", "order-2", "parcel-9"]), ("top_tags", ["paid", "paid", "fragile"]),
                         ("top_reasons", ["card declined", "timeout", "no address"])):
        write_table(out / name, {"group": pa.array(groups), "value": pa.array(values),
                                 "dead_letters": pa.array([4, 1, 2], pa.int64()),
                                 "rank": pa.array([1, 2, 1], pa.int32())})
    return {"dead_letters": 7, "groups": 2}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("pipeline")
    parser.add_argument("run")
    parser.add_argument("job")
    for option in ("--store", "--out", "--status", "--master", "--commitlog-file-size", "--cq-file-size",
                   "--index-slots", "--index-entries", "--delay-levels"):
        parser.add_argument(option)
    args = parser.parse_args(argv)
    folder, out, status = Path(args.out).parent, Path(args.out), Path(args.status)
    (folder / "argv.json").write_text(json.dumps(argv))
    (folder / "env.json").write_text(json.dumps({k: v for k, v in os.environ.items()
                                                 if k.startswith(("MQLENS_", "PYSPARK_", "SPARK_"))}))
    if not (Path(args.store) / "commitlog").is_dir():
        print(f"mqlens: error: Invalid value for --store: {args.store} is not a store", file=sys.stderr)
        return 2
    mode = os.environ.get("FAKE_PIPELINE_MODE", "succeed")
    write_status(status, job=args.job, stage="reading the commit log", tasks_done=1, tasks_total=4, records=42)
    if mode == "hold":
        deadline = time.monotonic() + HOLD_LIMIT_S
        while not (folder / "release").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    if mode == "fail":
        write_status(status, job=args.job, state="failed", stage="failed", records=42, error=SPARK_ERROR)
        print(f"{args.job} failed: {SPARK_ERROR}", file=sys.stderr)
        return 1
    if mode == "crash":
        print("Traceback (most recent call last):\nRuntimeError: the executor died", file=sys.stderr, flush=True)
        os._exit(3)
    counts = dlq_report(out) if args.job == "dlq-report" else {"records": 3}
    if args.job != "dlq-report":
        write_table(out, {"topic": pa.array(["Orders"] * 3), "body": pa.array([b"abc", None, b"x" * 300])})
    write_status(status, job=args.job, state="succeeded", stage="done", tasks_done=4, tasks_total=4, records=42,
                 counts=counts, summary=f"{args.job}: {counts} written to {out}")
    print(f"{args.job}: done")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
