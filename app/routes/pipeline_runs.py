"""Pipeline runs: POST /api/pipeline/runs, GET /api/pipeline/runs[/{id}], a run's results, and
cancel."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Header, Path

from app.deps import ClockDep, PipelineRunnerDep, PipelineSetupDep, SessionsDep, StoreDep
from app.routes import error_responses
from app.schemas import (
    PipelineResultsResponse,
    PipelineRunCreate,
    PipelineRunOut,
    PipelineRunResponse,
    PipelineRunsResponse,
    PipelineTableOut,
)
from app.security import READ, JobStarter
from app.services import pipeline_results, pipeline_runs
from app.services.errors import ConflictError

router = APIRouter(tags=["pipeline runs"])

RunId = Annotated[int, Path(ge=1, le=2**31)]


def run_out(view: pipeline_runs.RunView, now_ms: int) -> PipelineRunOut:
    return PipelineRunOut(**asdict(view), duration_ms=view.duration_ms(now_ms), results_url=view.results_url)


@router.post("/api/pipeline/runs", response_model=PipelineRunResponse, status_code=201,
             responses=error_responses(400, 409, 422))
def start(body: PipelineRunCreate, store: StoreDep, sessions: SessionsDep, clock: ClockDep, setup: PipelineSetupDep,
          runner: PipelineRunnerDep, actor: JobStarter,
          idempotency_key: Annotated[str | None, Header(max_length=255)] = None) -> PipelineRunResponse:
    """Start a job over the console's own store, as a process of its own; follow it with GET.
    One run at a time: 409 while another is queued or running. Needs the operator role."""
    view = pipeline_runs.start_run(runner, sessions, clock, setup, body.job, master=body.master, actor=actor,
                                   reason=body.reason, delay_levels=pipeline_runs.store_delay_levels(store),
                                   idempotency_key=idempotency_key)
    return PipelineRunResponse(run=run_out(view, clock.now_ms()))


@router.get("/api/pipeline/runs", response_model=PipelineRunsResponse, dependencies=[READ],
            responses=error_responses())
def list_runs(sessions: SessionsDep, clock: ClockDep) -> PipelineRunsResponse:
    """The newest 50 runs."""
    now_ms = clock.now_ms()
    return PipelineRunsResponse(runs=[run_out(v, now_ms) for v in pipeline_runs.list_runs(sessions)])


@router.get("/api/pipeline/runs/{run_id}", response_model=PipelineRunResponse, dependencies=[READ],
            responses=error_responses(404, 422))
def get_run(run_id: RunId, sessions: SessionsDep, clock: ClockDep) -> PipelineRunResponse:
    """A run's state, progress (stage, tasks, records) and outcome (counts and summary, or the error)."""
    return PipelineRunResponse(run=run_out(pipeline_runs.get_run(sessions, run_id), clock.now_ms()))


@router.get("/api/pipeline/runs/{run_id}/results", response_model=PipelineResultsResponse, dependencies=[READ],
            responses=error_responses(404, 409, 422))
def results(run_id: RunId, sessions: SessionsDep, clock: ClockDep) -> PipelineResultsResponse:
    """What a succeeded run made, read from its output folder; `problem` says when it cannot be read."""
    view = pipeline_runs.get_run(sessions, run_id)
    if view.state != pipeline_runs.SUCCEEDED:
        raise ConflictError(f"run {run_id} is {view.state}: only a succeeded run has results")
    found = pipeline_results.read_results(view.job, view.output_path)
    return PipelineResultsResponse(run=run_out(view, clock.now_ms()), problem=found.problem,
                                   tables={name: PipelineTableOut(**asdict(t)) for name, t in found.tables.items()})


@router.post("/api/pipeline/runs/{run_id}/cancel", response_model=PipelineRunResponse,
             responses=error_responses(404, 409, 422))
def cancel(run_id: RunId, sessions: SessionsDep, clock: ClockDep, runner: PipelineRunnerDep,
           actor: JobStarter) -> PipelineRunResponse:
    """Stop a queued or running run: its process group gets SIGTERM, and SIGKILL if it has not ended
    within a few seconds. Needs the operator role."""
    view = pipeline_runs.cancel_run(runner, sessions, clock, run_id, actor=actor)
    return PipelineRunResponse(run=run_out(view, clock.now_ms()))
