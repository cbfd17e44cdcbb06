"""The warm Spark: a kept driver process (pipeline.warm_driver) that `mqlens serve` starts and
supervises, so the jobs operators start on the console's own master answer in seconds instead of
paying Spark's start-up each time.

At most one driver is this console's at a time, each with an inbox folder of its own under the
data directory (named on its command line). A driver that has died, or stopped after its idle
time, is replaced by a new one at the next job; the runner fails the run a dead driver held."""

from __future__ import annotations

import logging
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from app.services.pipeline_runner import exit_in_words, process_alive, signal_group
from pipeline.warm_requests import Inbox, InboxClosed, JobRequest

log = logging.getLogger("mqlens.pipeline")

WARM_DIR_NAME = "warm-spark"
STOP_WAIT_S = 20.0
# A driver that dies after living this long is replaced at once; one that dies sooner (it cannot
# start: no Java, a bad setting) only when a job asks for it, so that a broken one never loops.
REVIVE_AFTER_S = 30.0


@dataclass(frozen=True)
class WarmSettings:
    master: str  # the jobs on this master go to the warm Spark
    driver_memory: str
    idle_s: int


class WarmSpark:
    def __init__(self, root: Path, command: tuple[str, ...], settings: WarmSettings, env: dict[str, str],
                 console_pid: int):
        self.root, self.command, self.settings, self.env = root, command, settings, env
        self.console_pid = console_pid
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._inbox: Inbox | None = None
        self._started_at = 0.0  # monotonic
        self._stopped = False

    def takes(self, master: str) -> bool:
        return master == self.settings.master

    @property
    def pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    @property
    def process(self) -> subprocess.Popen | None:
        return self._process

    @property
    def inbox(self) -> Inbox | None:
        return self._inbox

    def start(self) -> int:
        """The driver's pid: the running one, else a new one (which starts Spark by itself)."""
        with self._lock:
            return self._ensure_started().pid

    def _ensure_started(self) -> subprocess.Popen:
        if self._process is not None and self._process.poll() is None:
            return self._process
        if self._process is not None:
            log.warning("the warm Spark (process %d) has stopped: %s; starting another", self._process.pid,
                        exit_in_words(self._process.returncode))
        self._forget_ended_inboxes()
        inbox = Inbox(self.root / f"driver-{time.time_ns()}").create()
        argv = [*self.command, "pipeline", "warm", "--inbox", str(inbox.path), "--master", self.settings.master,
                "--driver-memory", self.settings.driver_memory, "--idle-s", str(self.settings.idle_s),
                "--parent", str(self.console_pid)]
        with inbox.log.open("ab") as output:
            self._process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                                             cwd=inbox.path, env=self.env, start_new_session=True)
        self._inbox, self._started_at = inbox, time.monotonic()
        log.info("warm Spark started as process %d on %s (driver memory %s, stops after %d s idle)",
                 self._process.pid, self.settings.master, self.settings.driver_memory, self.settings.idle_s)
        return self._process

    def _forget_ended_inboxes(self) -> None:
        """Remove the folders of drivers that have ended (a live one may still finish a job an
        earlier console gave it)."""
        if not self.root.is_dir():
            return
        for folder in self.root.iterdir():
            try:
                pid = int((folder / "pid").read_text())
            except (OSError, ValueError):
                pid = 0
            if not (pid and process_alive(pid, folder)):
                shutil.rmtree(folder, ignore_errors=True)

    def revive(self) -> None:
        """Replace a driver that died (not one that stopped after its idle time) that had been
        running a while: the next job finds Spark started again."""
        with self._lock:
            process = self._process
            if (self._stopped or process is None or process.poll() in (None, 0)
                    or time.monotonic() - self._started_at < REVIVE_AFTER_S):
                return
            try:
                self._ensure_started()
            except OSError as exc:
                log.warning("the warm Spark could not start again: %s", exc)

    def submit(self, request: JobRequest) -> tuple[int, Inbox, subprocess.Popen]:
        """Give the driver a job (starting a driver when none runs); its pid, inbox and process.
        Raises OSError when no driver can start."""
        with self._lock:
            for _ in range(2):  # a driver closing its inbox after its idle time: a second one takes it
                process = self._ensure_started()
                assert self._inbox is not None
                try:
                    self._inbox.submit(request)
                    return process.pid, self._inbox, process
                except InboxClosed:
                    self._process = None
            raise OSError("the warm Spark closed its inbox twice in a row")

    def stop(self, *, busy: bool) -> None:
        """At the console's stop: an idle driver is stopped; a busy one ends after its job."""
        with self._lock:
            self._stopped = True
            process, inbox = self._process, self._inbox
            if process is None or inbox is None or process.poll() is not None:
                return
            inbox.stop_file.touch()
            if busy:
                log.info("warm Spark (process %d) ends after the run it holds", process.pid)
                return
            signal_group(process.pid, signal.SIGTERM)
            try:
                process.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                signal_group(process.pid, signal.SIGKILL)
                process.wait(STOP_WAIT_S)
