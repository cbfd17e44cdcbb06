"""Running one job: its Spark session, a watcher that reports progress while it runs (status
file, terminal bar), the one-line summary at the end, and Spark's errors put in words."""

from __future__ import annotations

import importlib
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from pipeline.jobs import ALL_JOBS, DELAY_TABLE_JOBS
from pipeline.options import SourceOptions
from pipeline.output_folder import mark_output
from pipeline.progress import read_scan_progress
from pipeline.status import JobStatus, ProgressBar, write_status

POLL_SECONDS = 0.5
MAX_REPORTED_RANGES = 100


def job_main(name: str) -> Callable:
    if name not in ALL_JOBS:
        raise ValueError(f"unknown job {name!r}: use one of {', '.join(ALL_JOBS)}")
    return importlib.import_module(ALL_JOBS[name]).main


def error_in_words(exc: BaseException) -> str:
    """The line of a Spark failure that says what went wrong, without the JVM's or the
    worker's stack trace."""
    text = str(exc).strip() or type(exc).__name__
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        if "Error:" in line or "Exception:" in line:
            return line.split("Error: ", 1)[-1] if "Error: " in line else line
    return lines[0] if lines else text


class Watcher(threading.Thread):
    """Polls Spark's status tracker and the scan's progress files into the job's status."""

    def __init__(self, spark, status: JobStatus, progress_dir: Path, publish: Callable[[JobStatus], None],
                 job_group: str):
        super().__init__(name="pipeline-watcher", daemon=True)
        self.job_group = job_group  # the Spark job group the job's actions run in
        self.tracker = spark.sparkContext.statusTracker()
        self.status = status
        self.progress_dir = progress_dir
        self.publish = publish
        self.stop_event = threading.Event()
        self.stages: dict[int, tuple[int, int]] = {}  # stage id -> (completed tasks, tasks)

    def run(self) -> None:
        while not self.stop_event.wait(POLL_SECONDS):
            self.poll()

    def poll(self) -> None:
        for stage_id in self._stage_ids():
            info = self.tracker.getStageInfo(stage_id)
            if info is not None:
                self.stages[stage_id] = (info.numCompletedTasks, info.numTasks)
        scan = read_scan_progress(self.progress_dir)
        active = set(self.tracker.getActiveStageIds())
        done_stages = sum(1 for sid, (done, total) in self.stages.items() if sid not in active or done >= total)
        self.status.state = "running"
        self.status.tasks_done = sum(done for done, _ in self.stages.values())
        self.status.tasks_total = sum(total for _, total in self.stages.values())
        self.status.records = scan.records
        self.status.skipped_ranges = len(scan.skipped)
        self.status.stage = (f"stage {done_stages + 1} of at least {len(self.stages)} running"
                             if active else f"{done_stages} stages done")
        self.publish(self.status)

    def _stage_ids(self) -> set[int]:
        """The stages running now and those of this job's Spark jobs (a stage may start and end
        between two polls)."""
        ids = set(self.tracker.getActiveStageIds())
        for job_id in self.tracker.getJobIdsForGroup(self.job_group):
            job = self.tracker.getJobInfo(job_id)
            if job is not None:
                ids.update(job.stageIds)
        return ids

    def stop(self) -> None:
        self.stop_event.set()
        self.join()


def run_job(name: str, source: SourceOptions, out: Path, spark_factory: Callable, *,
            status_path: Path | None = None, bar: ProgressBar | None = None, job_args: dict | None = None) -> JobStatus:
    """Run job `name` and return its final status (state succeeded or failed). `job_args` are
    passed to the job's main (the content search's query)."""
    main = job_main(name)
    status = JobStatus(job=name)

    def publish(current: JobStatus) -> None:
        if status_path is not None:
            write_status(status_path, current)
        if bar is not None:
            bar.draw(current)

    publish(status)
    progress_dir = out.parent / f".{out.name}.progress"
    shutil.rmtree(progress_dir, ignore_errors=True)
    progress_dir.mkdir(parents=True)
    began = time.monotonic()
    try:
        with spark_factory() as spark:
            status.state, status.stage = "running", "reading the commit log"
            publish(status)
            job_group = f"mqlens-{name}-{uuid.uuid4().hex}"
            spark.sparkContext.setJobGroup(job_group, f"mqlens pipeline job {name}")
            watcher = Watcher(spark, status, progress_dir, publish, job_group)
            watcher.start()
            try:
                counts = main(spark, replace(source, progress_dir=progress_dir), out, **(job_args or {}))
            finally:
                watcher.stop()
                watcher.poll()
        mark_output(out, name)
        scan = read_scan_progress(progress_dir)
        status.state, status.stage, status.counts = "succeeded", "done", dict(counts)
        status.records = max(status.records, scan.records)
        status.skipped_ranges = len(scan.skipped)
        status.skipped = scan.skipped[:MAX_REPORTED_RANGES]
        status.summary = _summary(name, source, out, counts, scan, time.monotonic() - began)
    except Exception as exc:  # noqa: BLE001 (every failure becomes the job's error, in words)
        status.state, status.stage, status.error = "failed", "failed", error_in_words(exc)
    finally:
        shutil.rmtree(progress_dir, ignore_errors=True)
        if bar is not None:
            bar.finish()
    if status_path is not None:
        write_status(status_path, status)
    return status


def _summary(name: str, source: SourceOptions, out: Path, counts: dict[str, int], scan, seconds: float) -> str:
    parts = ", ".join(f"{value:,} {key.replace('_', ' ')}" for key, value in counts.items())
    skipped = ""
    if scan.skipped:
        skipped = f"; skipped {len(scan.skipped)} corrupt ranges ({scan.skipped_bytes:,} bytes)"
    if scan.torn_tails:
        skipped += f"; cut a torn tail at offset {min(scan.torn_tails)}"
    table = f"; {source.delay_table().describe()}" if name in DELAY_TABLE_JOBS else ""
    return f"{name}: {parts} from {source.store_dir} written to {out} in {seconds:.1f} s{skipped}{table}"
