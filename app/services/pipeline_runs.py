"""Pipeline runs: an operator starts a Spark job over the console's own store, follows its
progress, cancels it, and reads what it made. One run at a time: Spark takes every core it is
given, and a second job would only slow both (a start while one runs is refused, 409).

A start is audited with its intent (the run's row, queued) before the process is launched; a
crash between the two leaves the run queued, and the next start-up marks it failed. Runs left
running by a server that stopped are adopted when their process still runs, else given the end
their status file (or log) tells."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.models import PipelineRun
from app.roles import Principal
from app.services import audit
from app.services.errors import ConflictError, InvalidRequestError, NotFoundError
from app.services.pipeline_command import PipelineSetup, RunFolder, job_environment
from app.services.pipeline_runner import (
    CANCELLED,
    FAILED,
    QUEUED,
    RUNNING,
    SUCCEEDED,
    PipelineRunner,
    process_alive,
    record_end,
)
from pipeline.jobs import JOBS
from store.clock import Clock
from store.message_store import MessageStore

log = logging.getLogger("mqlens.pipeline")

START_RUN, CANCEL_RUN = "start_pipeline_run", "cancel_pipeline_run"
ACTIVE = (QUEUED, RUNNING)
STATES = (QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED)
LIST_LIMIT = 50
NOT_STARTED = "interrupted by a restart before the job started"
# What each job makes, in the words the start form shows (a job not described here shows its name).
JOB_DESCRIPTIONS = {
    "dlq-report": "Dead letters per day and group, retries, time to dead-letter, top failing keys, tags and "
                  "reasons: tables and charts",
    "trace": "Every copy of every message (original, scheduled, retry, dead letter) as a Parquet table",
    "timelines": "Each message's retry timeline as rows of a Parquet table",
    "key-index": "Every business key and unique key with where its messages are, as a Parquet table",
    "projections": "Consume queues and index files rebuilt from the commit log: a whole store again",
}


@dataclass(frozen=True)
class RunView:
    id: int
    action_id: int
    job: str
    store: str
    master: str
    state: str
    reason: str | None
    requested_by: str
    requested_at_ms: int
    started_at_ms: int | None
    finished_at_ms: int | None
    output_path: str
    stage: str | None
    tasks_done: int
    tasks_total: int
    records: int
    skipped_ranges: int
    counts: dict[str, int]
    summary: str | None
    error: str | None
    pid: int | None
    exit_code: int | None
    cancelled_by: str | None

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    @property
    def results_url(self) -> str:
        return f"/api/pipeline/runs/{self.id}/results"

    def duration_ms(self, now_ms: int) -> int | None:
        if self.started_at_ms is None:
            return None
        return (self.finished_at_ms or now_ms) - self.started_at_ms


def job_choices() -> list[dict[str, str]]:
    return [{"name": name, "description": JOB_DESCRIPTIONS.get(name, name)} for name in JOBS]


def _view(run: PipelineRun) -> RunView:
    return RunView(run.id, run.action_id, run.job, run.store, run.master, run.state, run.reason, run.requested_by,
                   run.requested_at_ms, run.started_at_ms, run.finished_at_ms, run.output_path, run.stage,
                   run.tasks_done, run.tasks_total, run.records, run.skipped_ranges,
                   json.loads(run.counts) if run.counts else {}, run.summary, run.error, run.pid, run.exit_code,
                   run.cancelled_by)


def get_run(sessions: sessionmaker[Session], run_id: int) -> RunView:
    with sessions() as s:
        run = s.get(PipelineRun, run_id)
        if run is None:
            raise NotFoundError(f"no pipeline run {run_id}")
        return _view(run)


def list_runs(sessions: sessionmaker[Session], limit: int = LIST_LIMIT) -> list[RunView]:
    """The newest runs first."""
    with sessions() as s:
        return [_view(run) for run in s.scalars(select(PipelineRun).order_by(PipelineRun.id.desc()).limit(limit))]


def store_delay_levels(store: MessageStore) -> str | None:
    """The delay table to hand a job: the store's when it has had only one (it may not have written
    it down); None when it has a history of tables, which the job reads from the store itself."""
    tables = store.delay_levels.tables
    return tables[0].spec if len(tables) == 1 else None


def _checked(setup: PipelineSetup, job: str, master: str | None) -> str:
    if job not in JOBS:
        raise InvalidRequestError(f"unknown job {job[:64]!r}: use one of {', '.join(JOBS)}")
    master = master or setup.default_master
    if master not in setup.masters():
        raise InvalidRequestError(f"unknown Spark master {master[:100]!r}: use one of {', '.join(setup.masters())}")
    return master


def start_run(runner: PipelineRunner, sessions: sessionmaker[Session], clock: Clock, setup: PipelineSetup, job: str,
              *, master: str | None = None, actor: Principal, reason: str | None = None,
              delay_levels: str | None = None, idempotency_key: str | None = None) -> RunView:
    """Start `job` over the console's store: on the warm Spark when it runs the jobs of `master`,
    else as a process of its own; refused while another run is going. `delay_levels`: see
    store_delay_levels."""
    master = _checked(setup, job, master)
    request = {"job": job, "master": master}

    def intent(s: Session, entry_id: int) -> dict:
        busy = s.scalars(select(PipelineRun.id).where(PipelineRun.state.in_(ACTIVE))).first()
        if busy is not None:
            raise ConflictError(f"run {busy} is going: one pipeline run at a time (wait for it, or cancel it)")
        if ending := runner.following():
            raise ConflictError(f"run {ending[0]} is still ending: one pipeline run at a time (try again in a "
                                "moment)")
        run = PipelineRun(action_id=entry_id, job=job, store=str(setup.store_dir), master=master, state=QUEUED,
                          reason=audit.checked_reason(reason), requested_by=actor.name,
                          requested_at_ms=clock.now_ms(), output_path="", stage="queued")
        s.add(run)
        s.flush()
        run.output_path = str(setup.folder(run.id).out)
        return {"run_id": run.id}

    def act(decided: dict) -> dict:
        run_id = decided["run_id"]
        folder = setup.folder(run_id)
        try:
            if runner.warm is not None and runner.warm.takes(master):
                pid = runner.launch_warm(run_id, setup.job_request(run_id, job, folder, delay_levels), folder,
                                         runner.warm)
            else:
                pid = runner.launch(run_id, setup.job_argv(job, folder, master, delay_levels), folder,
                                    job_environment())
        except OSError as exc:
            message = f"the pipeline command could not start: {exc}"
            with sessions.begin() as s:
                run = s.get_one(PipelineRun, run_id)
                run.state, run.stage, run.error, run.finished_at_ms = FAILED, "failed", message, clock.now_ms()
            raise ConflictError(message) from None
        return {"pid": pid}

    with runner.start_lock:
        done = audit.perform(sessions, clock, actor=actor, action=START_RUN, target=f"pipeline:{job}",
                             request=request, intent=intent, act=act, idempotency_key=idempotency_key,
                             reason=reason)
    return get_run(sessions, done.result["run_id"])


def cancel_run(runner: PipelineRunner, sessions: sessionmaker[Session], clock: Clock, run_id: int, *,
               actor: Principal, reason: str | None = None) -> RunView:
    """Cancel a queued or running run: its process group is asked to stop, and killed when it
    does not within a grace period. Audited."""
    with runner.start_lock, sessions.begin() as s:  # never between a start's intent and its launch
        run = s.get(PipelineRun, run_id)
        if run is None:
            raise NotFoundError(f"no pipeline run {run_id}")
        if run.state not in ACTIVE:
            raise ConflictError(f"run {run_id} is {run.state}: only a queued or running run can be cancelled")
        before = run.state
        run.state, run.stage, run.cancelled_by, run.finished_at_ms = CANCELLED, "cancelled", actor.name, clock.now_ms()
        audit.record(s, clock, actor=actor, action=CANCEL_RUN, target=f"pipeline-run:{run_id}",
                     detail={"job": run.job, "before": before, "pid": run.pid}, reason=reason)
    runner.end(run_id)
    return get_run(sessions, run_id)


def _warm_inbox(folder: RunFolder) -> Path | None:
    """The folder of the warm Spark that held the run, when one did."""
    try:
        return Path(json.loads(folder.warm_marker.read_text(encoding="utf-8"))["inbox"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def reconcile_runs(runner: PipelineRunner, sessions: sessionmaker[Session], clock: Clock) -> list[str]:
    """At start-up: settle the starts a crash cut, fail the runs that never started, adopt the
    runs whose process still runs and record the end of the others. Returns what was done."""
    with sessions.begin() as s:
        def settle(entry, detail: dict) -> audit.Settlement:
            run = s.get(PipelineRun, detail.get("result", {}).get("run_id", 0))
            if run is not None and run.pid is not None:
                return audit.OK, "started before a restart", None
            return audit.FAILED, NOT_STARTED, None

        done = audit.settle_pending(s, START_RUN, settle)
        for run in s.scalars(select(PipelineRun).where(PipelineRun.state == QUEUED)):
            run.state, run.stage, run.error, run.finished_at_ms = FAILED, "failed", NOT_STARTED, clock.now_ms()
            done.append(f"pipeline run {run.id} never started: marked failed")
        running = [(run.id, run.pid, run.output_path)
                   for run in s.scalars(select(PipelineRun).where(PipelineRun.state == RUNNING))]
    for run_id, pid, output_path in running:
        folder = RunFolder.of_output(output_path)
        warm_inbox = _warm_inbox(folder)
        if pid is not None and process_alive(pid, warm_inbox or folder.path):
            runner.adopt(run_id, pid, folder, warm_inbox)
            done.append(f"pipeline run {run_id} still runs (process {pid}): followed again")
        else:
            state = record_end(sessions, clock, run_id, folder, None, after_restart=True)
            done.append(f"pipeline run {run_id} ended while the console was down: {state}")
    return done

