"""Pipeline jobs as processes of their own, never inside the web server: each started in a
process group of its own (a cancel ends Spark's JVM and Python workers with it), or handed to the
warm Spark (app.services.warm_spark); and one thread that copies each run's status file into its
row and records how the run ended.

Stopping the console leaves running jobs running; the next start adopts those whose process is
still there (see pipeline_runs.reconcile_runs) and records the others' end."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from app.models import PipelineRun
from app.services.pipeline_command import RunFolder
from app.services.pipeline_status import ReportedStatus, failure_in_words, log_tail, read_status
from pipeline.warm_requests import CANCEL_FILE, Inbox, JobRequest
from store.clock import Clock

if TYPE_CHECKING:
    from app.services.warm_spark import WarmSpark

log = logging.getLogger("mqlens.pipeline")

QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED = "queued", "running", "succeeded", "failed", "cancelled"
POLL_S = 0.25
CANCEL_GRACE_S = 10.0  # after SIGTERM, the group gets SIGKILL when it has not ended by then
_PROC = Path("/proc")


def process_alive(pid: int, folder: Path) -> bool:
    """The process runs and is the one that `folder` is for: where /proc tells, its command line
    names the folder (after a reboot the pid may be another program's; a zombie has no command line)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    if not _PROC.is_dir():
        return True
    try:
        return str(folder).encode() in (_PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return False


def signal_group(pid: int, sig: signal.Signals) -> None:
    """Signal the job's process group (its pid: it leads the group it was started in), if it still
    leads one; never another group."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def exit_in_words(code: int | None) -> str:
    if code is None:
        return "it is gone"
    if code < 0:
        try:
            return f"it was killed by signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"it was killed by signal {-code}"
    return f"it ended with exit code {code}"


@dataclass
class _Followed:
    run_id: int
    pid: int
    folder: RunFolder
    process: subprocess.Popen | None  # None: started by an earlier server, adopted
    seen_update: int = -1  # updated_at of the last status copied into the row
    kill_at: float | None = None  # monotonic time of the SIGKILL a cancel schedules
    warm_inbox: Path | None = None  # run by the warm Spark whose folder this is (app.services.warm_spark)

    def ended(self) -> tuple[bool, int | None, str | None]:
        """Whether the run has ended; the exit code of its process when it was this server's to
        wait for; why, when the warm Spark that held it died."""
        if self.warm_inbox is not None:
            return self._warm_ended()
        if self.process is not None:
            code = self.process.poll()
            return code is not None, code, None
        return not process_alive(self.pid, self.folder.path), None, None

    def _warm_ended(self) -> tuple[bool, int | None, str | None]:
        assert self.warm_inbox is not None
        if self.process is not None:
            code = self.process.poll()
            gone = code is not None
        else:
            code, gone = None, not process_alive(self.pid, self.warm_inbox)
        status = read_status(self.folder.status)  # after the liveness: a final status is written before an end
        if status is not None and (status.succeeded or status.failed):
            return True, None, None
        if not gone:
            return False, None, None
        how = exit_in_words(code)
        if code is not None and code > 0 and (words := failure_in_words(log_tail(Inbox(self.warm_inbox).log))):
            how = f"{how} ({words})"
        return True, None, f"the warm Spark (process {self.pid}) died while it held the job: {how}; the next job " \
                           "starts another"


def _copy_progress(run: PipelineRun, status: ReportedStatus) -> None:
    run.stage = status.stage or run.stage
    run.tasks_done, run.tasks_total = status.tasks_done, status.tasks_total
    run.records, run.skipped_ranges = status.records, status.skipped_ranges


def _failure(status: ReportedStatus | None, exit_code: int | None, folder: RunFolder, after_restart: bool,
             gone: str | None) -> str:
    if status is not None and status.failed and status.error:
        return status.error
    if gone is not None:
        return gone
    if exit_code is None:
        how = ("interrupted by a restart: the job's process is gone and left no final status" if after_restart
               else "the job's process ended without a final status")
    elif exit_code == 0:
        how = "the job's process ended (exit code 0) without reporting success in its status file"
    elif exit_code < 0:
        how = f"the job's process was killed by signal {-exit_code}"
    else:
        how = f"the job's process ended with exit code {exit_code} before it finished"
    words = failure_in_words(log_tail(folder.log))
    return f"{how}: {words}" if words else how


def record_end(sessions: sessionmaker[Session], clock: Clock, run_id: int, folder: RunFolder,
               exit_code: int | None, *, after_restart: bool = False, gone: str | None = None) -> str:
    """How the run ended, from its final status (or its log when it left none, or `gone`: why the
    process that held it died), into its row; a run cancelled meanwhile stays cancelled. Returns
    the run's state."""
    status = read_status(folder.status)
    with sessions.begin() as s:
        run = s.get_one(PipelineRun, run_id)
        run.exit_code = exit_code
        if status is not None:
            _copy_progress(run, status)
        if run.state != RUNNING:
            return run.state
        run.finished_at_ms = clock.now_ms()
        if status is not None and status.succeeded and exit_code in (0, None):
            run.state, run.stage = SUCCEEDED, "done"
            run.counts, run.summary = json.dumps(status.counts), status.summary or None
        else:
            run.state, run.stage = FAILED, "failed"
            run.error = _failure(status, exit_code, folder, after_restart, gone)
        return run.state


class PipelineRunner:
    """Starts jobs and follows them until they end."""

    def __init__(self, sessions: sessionmaker[Session], clock: Clock, poll_s: float = POLL_S,
                 cancel_grace_s: float = CANCEL_GRACE_S, warm: WarmSpark | None = None):
        self.sessions, self.clock, self.poll_s, self.cancel_grace_s = sessions, clock, poll_s, cancel_grace_s
        self.warm = warm  # where the jobs on its master go; None: every job is a process of its own
        self.start_lock = threading.Lock()  # held while a start checks the one-run rule and launches
        self._followed: dict[int, _Followed] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> PipelineRunner:
        self._thread = threading.Thread(target=self._run, name="pipeline-runs", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop following; the jobs go on, and the next start adopts them. An idle warm Spark
        is stopped; a busy one ends after its run."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self.warm is not None:
            with self._lock:
                busy = any(f.warm_inbox is not None for f in self._followed.values())
            self.warm.stop(busy=busy)

    def following(self) -> list[int]:
        """The runs whose process this runner still follows (a cancelled one until it has ended)."""
        with self._lock:
            return sorted(self._followed)

    def launch(self, run_id: int, argv: list[str], folder: RunFolder, env: dict[str, str]) -> int:
        """Start the job in a fresh folder and a process group of its own; the row says running
        with its pid as soon as the process exists. Raises OSError when the command cannot start."""
        shutil.rmtree(folder.path, ignore_errors=True)
        folder.path.mkdir(parents=True)
        with folder.log.open("ab") as output:
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                                       cwd=folder.path, env=env, start_new_session=True)
        with self.sessions.begin() as s:
            s.execute(update(PipelineRun).where(PipelineRun.id == run_id)
                      .values(state=RUNNING, pid=process.pid, started_at_ms=self.clock.now_ms(),
                              stage="starting the job's process"))
        with self._lock:
            self._followed[run_id] = _Followed(run_id, process.pid, folder, process)
        log.info("pipeline run %d started as process %d: %s", run_id, process.pid, " ".join(argv))
        return process.pid

    def launch_warm(self, run_id: int, request: JobRequest, folder: RunFolder, warm: WarmSpark) -> int:
        """Hand the job to the warm Spark (started if none runs); the row says running with the
        driver's pid. Raises OSError when no driver can start."""
        shutil.rmtree(folder.path, ignore_errors=True)
        folder.path.mkdir(parents=True)
        pid, inbox, process = warm.submit(request)
        folder.warm_marker.write_text(json.dumps({"inbox": str(inbox.path), "pid": pid}), encoding="utf-8")
        with self.sessions.begin() as s:
            s.execute(update(PipelineRun).where(PipelineRun.id == run_id)
                      .values(state=RUNNING, pid=pid, started_at_ms=self.clock.now_ms(),
                              stage="handed to the warm Spark"))
        with self._lock:
            self._followed[run_id] = _Followed(run_id, pid, folder, process, warm_inbox=inbox.path)
        log.info("pipeline run %d handed to the warm Spark (process %d)", run_id, pid)
        return pid

    def adopt(self, run_id: int, pid: int, folder: RunFolder, warm_inbox: Path | None = None) -> None:
        """Follow a run an earlier server started, whose process (or warm Spark) still runs."""
        with self._lock:
            self._followed[run_id] = _Followed(run_id, pid, folder, None, warm_inbox=warm_inbox)

    def end(self, run_id: int) -> None:
        """Ask the run's process group to stop (SIGTERM), and kill it if it has not ended after
        the grace period."""
        with self._lock:
            followed = self._followed.get(run_id)
            if followed is None:
                return
            followed.kill_at = time.monotonic() + self.cancel_grace_s
        if followed.warm_inbox is not None:  # the warm Spark cancels the run's Spark jobs and lives on
            (followed.folder.path / CANCEL_FILE).touch()
        else:
            signal_group(followed.pid, signal.SIGTERM)

    def step(self) -> None:
        """Copy each followed run's new status into its row; record the end of those that ended."""
        with self._lock:
            followed = list(self._followed.values())
        for run in followed:
            ended, exit_code, gone = run.ended()  # before reading the status: it is written before the end
            if ended:
                state = record_end(self.sessions, self.clock, run.run_id, run.folder, exit_code, gone=gone)
                log.info("pipeline run %d ended (exit code %s): %s", run.run_id, exit_code, state)
                with self._lock:
                    self._followed.pop(run.run_id, None)
                continue
            status = read_status(run.folder.status)
            if status is not None and status.updated_at != run.seen_update:
                with self.sessions.begin() as s:
                    row = s.get_one(PipelineRun, run.run_id)
                    if row.state == RUNNING:
                        _copy_progress(row, status)
                run.seen_update = status.updated_at
            if run.kill_at is not None and time.monotonic() >= run.kill_at:
                signal_group(run.pid, signal.SIGKILL)
                run.kill_at = None
        if self.warm is not None:
            self.warm.revive()

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.step()
            except Exception:  # the runner must outlive one bad poll; the runs stay as they were
                log.exception("following the pipeline runs failed")
