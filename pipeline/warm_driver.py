"""A kept Spark driver for the console: one long-lived process holding one SparkSession that runs
the console's jobs one after another, so a job pays Spark's start-up (the JVM, the Python workers,
the first planning and code generation) once, not each time.

It warms itself up with a dlq-report over an empty store, then takes requests from its inbox
(pipeline.warm_requests), each run with run_job and the run's status file as a job process would.
It stops by itself after `idle_s` without a request, when the console that started it has gone
(once the job in hand is done), or when the inbox's stop file appears; it closes its inbox first,
so a request written meanwhile is run, never lost."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from pipeline.output_folder import check_output_folder
from pipeline.run import job_main, run_job
from pipeline.session import spark_session
from pipeline.status import JobStatus, write_status
from pipeline.warm_requests import Inbox, JobRequest
from store.log.geometry import StoreGeometry

POLL_S = 0.1
WARM_UP_JOB = "dlq-report"


def _note(path: Path | str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as log:
        log.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}\n")


class CancelWatch(threading.Thread):
    """Cancels every Spark job of the session while `wanted()` says so (a job started after a
    cancel is cancelled too)."""

    def __init__(self, spark, wanted: Callable[[], bool]):
        super().__init__(name="warm-cancel", daemon=True)
        self.context, self.wanted = spark.sparkContext, wanted
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(POLL_S):
            if self.wanted():
                self.context.cancelAllJobs()

    def stop(self) -> None:
        self.done.set()
        self.join()


def run_request(spark, request: JobRequest) -> JobStatus:
    """One console run: its options checked as the command line checks them, then the job."""
    from pipeline.options import SourceOptions

    status_path, out = Path(request.status), Path(request.out)
    _note(request.log, f"run {request.run_id}: {request.job} taken by the warm Spark (process {os.getpid()})")
    try:
        job_main(request.job)
        source = SourceOptions(Path(request.store), StoreGeometry(**request.geometry), request.delay_levels)
        source.delay_table()
        source.check_output(out)
        check_output_folder(out, request.job, overwrite=False)
    except (ValueError, TypeError) as exc:
        final = JobStatus(job=request.job, state="failed", stage="failed", error=str(exc))
        write_status(status_path, final)
    else:
        watch = CancelWatch(spark, request.cancel_file.exists)
        watch.start()
        try:
            final = run_job(request.job, source, out, lambda: contextlib.nullcontext(spark), status_path=status_path)
        finally:
            watch.stop()
    _note(request.log, final.summary if final.state == "succeeded" else f"{request.job} failed: {final.error}")
    return final


def warm_up(spark, inbox: Inbox) -> None:
    """A job over an empty store: the Python workers start and import the data source, the JVM
    compiles the job's plans; the first console job finds them ready. A job that comes meanwhile
    cuts it short: it would only wait for it."""
    from pipeline.options import SourceOptions

    folder = inbox.path / "warm-up"
    (folder / "store" / "commitlog").mkdir(parents=True, exist_ok=True)
    watch = CancelWatch(spark, lambda: bool(inbox.pending()))
    watch.start()
    try:
        final = run_job(WARM_UP_JOB, SourceOptions(folder / "store"), folder / "out",
                        lambda: contextlib.nullcontext(spark))
    finally:
        watch.stop()
    _note(inbox.log, f"warm-up: {final.state}" + (f" ({final.error})" if final.error else ""))


def _take(inbox: Inbox, folder: Path | None = None) -> JobRequest | None:
    for path in inbox.pending(folder):
        try:
            request = JobRequest.read(path)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            _note(inbox.log, f"unreadable request {path.name}: {exc}")
            request = None
        path.unlink(missing_ok=True)
        if request is not None:
            return request
    return None


def _run_safely(spark, request: JobRequest, inbox: Inbox) -> None:
    """A request that breaks more than its own job (its folder gone, a full disk) fails its run
    when a status can still be written; the driver lives on either way."""
    try:
        run_request(spark, request)
    except Exception as exc:  # noqa: BLE001
        error = f"the warm Spark could not run the job: {type(exc).__name__}: {exc}"
        _note(inbox.log, f"run {request.run_id}: {error}")
        with contextlib.suppress(OSError):
            write_status(Path(request.status), JobStatus(job=request.job, state="failed", stage="failed",
                                                         error=error))


def serve(inbox: Inbox, master: str, driver_memory: str, idle_s: float, parent_pid: int) -> None:
    inbox.pid_file.write_text(str(os.getpid()), encoding="utf-8")
    spark = spark_session(master, app_name="mqlens-warm", extra={"spark.driver.memory": driver_memory})
    try:
        warm_up(spark, inbox)
        _note(inbox.log, "ready")
        idle_since = time.monotonic()
        while not inbox.stop_file.exists() and os.getppid() == parent_pid:
            request = _take(inbox)
            if request is not None:
                _run_safely(spark, request, inbox)
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since >= idle_s:
                _note(inbox.log, f"idle for {idle_s:g} s: stopping")
                break
            else:
                time.sleep(POLL_S)
        inbox.close()
        while (request := _take(inbox, inbox.closed)) is not None:
            _run_safely(spark, request, inbox)
    finally:
        spark.stop()
