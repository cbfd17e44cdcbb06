"""A dlq-report of a small store as the console runs it: a fresh `mqlens pipeline run` process
each time (Spark started for each job) against the warm Spark (one kept driver, pipeline.warm_driver),
from the request to the final status, and the warm driver's memory while idle.

    .venv/bin/python -m bench.warm_spark                      # 10,000 messages, local[2]
    .venv/bin/python -m bench.warm_spark --messages 100000 --jobs 5

Figures: the fresh process's seconds; the warm driver's seconds from its start until it is ready
(its session and warm-up job), its first job and the median of the later ones; the resident
memory of the driver's process group (its Python, the JVM, Spark's Python workers) after the jobs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.workload import Workload, new_message
from pipeline.warm_requests import Inbox, JobRequest
from store.log.geometry import StoreGeometry
from store.message_store import MessageStore, StoreConfig

GEOMETRY = StoreGeometry(commitlog_file_size=4 * 1024 * 1024, cq_file_size=20 * 4096, index_slots=4096,
                         index_entries=16_384)
DEADLINE_S = 1200
JOB = "dlq-report"


def build_store(root: Path, messages: int) -> None:
    workload = Workload(messages)
    with MessageStore.open(root, StoreConfig(geometry=GEOMETRY, flush="async")) as store:
        for start in range(0, messages, 1000):
            store.put_many([new_message(f) for f in workload.slice(start, min(start + 1000, messages))])


def _geometry() -> dict[str, int]:
    return {"commitlog_file_size": GEOMETRY.commitlog_file_size, "cq_file_size": GEOMETRY.cq_file_size,
            "index_slots": GEOMETRY.index_slots, "index_entries": GEOMETRY.index_entries}


def _environment() -> dict[str, str]:
    return {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP",
                                                                                           "127.0.0.1")}


def fresh_process(store: Path, work: Path, master: str) -> float:
    out = work / "fresh" / "out"
    began = time.monotonic()
    subprocess.run([sys.executable, "-m", "app.cli", "pipeline", "run", JOB, "--store", str(store), "--out",
                    str(out), "--master", master, *[f"--{k.replace('_', '-')}={v}" for k, v in _geometry().items()]],
                   check=True, capture_output=True, env=_environment(), timeout=DEADLINE_S)
    return time.monotonic() - began


def _wait(condition, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def _final(status: Path) -> dict | None:
    try:
        data = json.loads(status.read_text())
    except (OSError, ValueError):
        return None
    return data if data.get("state") in ("succeeded", "failed") else None


def group_rss_mib(leader: int) -> int:
    """The resident memory of every process in the group `leader` leads."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getpgid(int(entry.name)) != leader:
                continue
            for line in (entry / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except (OSError, ProcessLookupError):
            continue
    return total // 1024


def warm_driver(store: Path, work: Path, master: str, memory: str, jobs: int) -> dict:
    inbox = Inbox(work / "driver").create()
    began = time.monotonic()
    driver = subprocess.Popen([sys.executable, "-m", "app.cli", "pipeline", "warm", "--inbox", str(inbox.path),
                               "--master", master, "--driver-memory", memory, "--idle-s", "3600"],
                              stdout=inbox.log.open("ab"), stderr=subprocess.STDOUT, env=_environment(),
                              start_new_session=True)
    try:
        _wait(lambda: "ready" in (inbox.log.read_text(errors="replace") if inbox.log.exists() else ""),
              "the warm driver")
        ready = time.monotonic() - began
        seconds = []
        for run_id in range(1, jobs + 1):
            folder = work / "warm" / str(run_id)
            folder.mkdir(parents=True)
            at = time.monotonic()
            inbox.submit(JobRequest(run_id, JOB, str(store), str(folder / "out"), str(folder / "status.json"),
                                    str(folder / "run.log"), _geometry(), None))
            _wait(lambda folder=folder: _final(folder / "status.json") is not None, f"job {run_id}")
            if _final(folder / "status.json")["state"] != "succeeded":
                raise SystemExit(f"job {run_id} failed: {_final(folder / 'status.json')['error']}")
            seconds.append(time.monotonic() - at)
        time.sleep(5)
        return {"ready_seconds": ready, "first_seconds": seconds[0],
                "later_seconds": statistics.median(seconds[1:]) if len(seconds) > 1 else None,
                "idle_rss_mib": group_rss_mib(driver.pid)}
    finally:
        os.killpg(driver.pid, signal.SIGTERM)
        driver.wait(60)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="1g")
    parser.add_argument("--jobs", type=int, default=4, help="jobs given to the warm driver, one after another")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="mqlens-bench-"))
    try:
        store = work / "store"
        build_store(store, args.messages)
        fresh = fresh_process(store, work, args.master)
        warm = warm_driver(store, work, args.master, args.driver_memory, max(args.jobs, 1))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    later = f"{warm['later_seconds']:.1f}" if warm["later_seconds"] is not None else "-"
    print(f"| {JOB} of {args.messages:,} messages, {args.master} | seconds |\n|---|---|\n"
          f"| fresh process (Spark started for the job) | {fresh:.1f} |\n"
          f"| warm driver: start until ready (session and warm-up) | {warm['ready_seconds']:.1f} |\n"
          f"| warm driver: first job | {warm['first_seconds']:.1f} |\n"
          f"| warm driver: later jobs (median) | {later} |\n\n"
          f"warm driver's process group while idle: {warm['idle_rss_mib']:,} MiB resident "
          f"(driver memory {args.driver_memory})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
