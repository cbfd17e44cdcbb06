"""Pipeline jobs as processes of their own, never inside the web server: each started in a
process group of its own (a cancel ends Spark's JVM and Python workers with it), and one thread
that copies each run's status file into its row and records how the run ended.

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

from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from app.models import PipelineRun
from app.services.pipeline_command import RunFolder
from app.services.pipeline_status import ReportedStatus, failure_in_words, log_tail, read_status
from store.clock import Clock

log = logging.getLogger("mqlens.pipeline")

QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED = "queued", "running", "succeeded", "failed", "cancelled"
POLL_S = 0.25
CANCEL_GRACE_S = 10.0  # after SIGTERM, the group gets SIGKILL when it has not ended by then
_PROC = Path("/proc")


def process_alive(pid: int, folder: RunFolder) -> bool:
    """The process runs and is this run's job: where /proc tells, its command line names the run's
    folder (after a reboot the pid may be another program's; a zombie has no command line)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    if not _PROC.is_dir():
        return True
    try:
        return str(folder.path).encode() in (_PROC / str(pid) / "cmdline").read_bytes()
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


@dataclass
class _Followed:
    run_id: int
    pid: int
    folder: RunFolder
    process: subprocess.Popen | None  # None: started by an earlier server, adopted
    seen_update: int = -1  # updated_at of the last status copied into the row
    kill_at: float | None = None  # monotonic time of the SIGKILL a cancel schedules

    def ended(self) -> tuple[bool, int | None]:
        """Whether the process has ended, and its exit code when it was this server's to wait for."""
        if self.process is not None:
            code = self.process.poll()
            return code is not None, code
        return not process_alive(self.pid, self.folder), None


def _copy_progress(run: PipelineRun, status: ReportedStatus) -> None:
    run.stage = status.stage or run.stage
    run.tasks_done, run.tasks_total = status.tasks_done, status.tasks_total
    run.records, run.skipped_ranges = status.records, status.skipped_ranges


def _failure(status: ReportedStatus | None, exit_code: int | None, folder: RunFolder, after_restart: bool) -> str:
    if status is not None and status.failed and status.error:
        return status.error
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
               exit_code: int | None, *, after_restart: bool = False) -> str:
    """How the run ended, from its final status (or its log when it left none), into its row; a
    run cancelled meanwhile stays cancelled. Returns the run's state."""
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
            run.error = _failure(status, exit_code, folder, after_restart)
        return run.state


class PipelineRunner:
    """Starts jobs and follows them until they end."""

    def __init__(self, sessions: sessionmaker[Session], clock: Clock, poll_s: float = POLL_S,
                 cancel_grace_s: float = CANCEL_GRACE_S):
        self.sessions, self.clock, self.poll_s, self.cancel_grace_s = sessions, clock, poll_s, cancel_grace_s
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
        """Stop following; the jobs go on, and the next start adopts them."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

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

    def adopt(self, run_id: int, pid: int, folder: RunFolder) -> None:
        """Follow a run an earlier server started, whose process still runs."""
        with self._lock:
            self._followed[run_id] = _Followed(run_id, pid, folder, None)

    def end(self, run_id: int) -> None:
        """Ask the run's process group to stop (SIGTERM), and kill it if it has not ended after
        the grace period."""
        with self._lock:
            followed = self._followed.get(run_id)
            if followed is None:
                return
            followed.kill_at = time.monotonic() + self.cancel_grace_s
        signal_group(followed.pid, signal.SIGTERM)

    def step(self) -> None:
        """Copy each followed run's new status into its row; record the end of those that ended."""
        with self._lock:
            followed = list(self._followed.values())
        for run in followed:
            ended, exit_code = run.ended()  # before reading the status: a final status is written before the end
            if ended:
                state = record_end(self.sessions, self.clock, run.run_id, run.folder, exit_code)
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

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.step()
            except Exception:  # the runner must outlive one bad poll; the runs stay as they were
                log.exception("following the pipeline runs failed")
