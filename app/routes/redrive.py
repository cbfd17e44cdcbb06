"""Redrive jobs: POST /api/redrive-jobs, GET /api/redrive-jobs[/{id}], pause, resume, cancel,
and the per-message report."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Header, Path, Query, Request
from fastapi.responses import StreamingResponse

from app.deps import BackendDep, ClockDep, SessionsDep
from app.routes import error_responses
from app.schemas import (
    JobControlRequest,
    RedriveItemOut,
    RedriveItemsResponse,
    RedriveJobCreate,
    RedriveJobOut,
    RedriveJobResponse,
    RedriveJobsResponse,
)
from app.security import READ, Redriver
from app.services import redrive, redrive_report
from app.services.dead_letters import Filter

router = APIRouter(tags=["redrive jobs"])

JobId = Annotated[int, Path(ge=1, le=2**31)]
REPORT_CHUNK_BYTES = 64 * 1024


def job_out(view: redrive.JobView) -> RedriveJobOut:
    return RedriveJobOut(**asdict(view), progress=round(view.progress, 4), report_url=view.report_url)


@router.post("/api/redrive-jobs", response_model=RedriveJobResponse, status_code=201,
             responses=error_responses(400, 404, 409, 422))
def create(body: RedriveJobCreate, request: Request, backend: BackendDep, sessions: SessionsDep, clock: ClockDep,
           actor: Redriver, idempotency_key: Annotated[str | None, Header(max_length=255)] = None
           ) -> RedriveJobResponse:
    """A job over the group's dead letters the filter matches now (by default those waiting),
    sent at `rate_per_s`. With `dry_run` the job is only planned: GET its report to see every
    message and its destination, then resume it to run exactly that list. Needs the operator role."""
    f = body.filter
    wanted = Filter(f.begin or 0, f.end, f.key, f.tag, f.reason, f.state)
    destination = body.destination.model_dump() if hasattr(body.destination, "model_dump") else body.destination
    view = redrive.create_job(backend, sessions, clock, request.app.state.dead_letters, body.group, wanted,
                              destination=destination, rate_per_s=body.rate_per_s, dry_run=body.dry_run,
                              actor=actor, reason=body.reason, max_dead_share=body.max_dead_share,
                              idempotency_key=idempotency_key)
    return RedriveJobResponse(job=job_out(view))


@router.get("/api/redrive-jobs", response_model=RedriveJobsResponse, dependencies=[READ],
            responses=error_responses())
def list_jobs(sessions: SessionsDep) -> RedriveJobsResponse:
    """The newest 50 jobs."""
    return RedriveJobsResponse(jobs=[job_out(v) for v in redrive.list_jobs(sessions)])


@router.get("/api/redrive-jobs/{job_id}", response_model=RedriveJobResponse, dependencies=[READ],
            responses=error_responses(404, 422))
def get_job(job_id: JobId, request: Request, sessions: SessionsDep) -> RedriveJobResponse:
    """A job's state, counts and progress."""
    return RedriveJobResponse(job=job_out(redrive.get_job(sessions, job_id, request.app.state.redrive)))


@router.post("/api/redrive-jobs/{job_id}/{command}", response_model=RedriveJobResponse,
             responses=error_responses(400, 404, 409, 422))
def control(job_id: JobId, command: Annotated[str, Path(pattern="^(pause|resume|cancel)$")],
            sessions: SessionsDep, clock: ClockDep, actor: Redriver,
            body: JobControlRequest | None = None) -> RedriveJobResponse:
    """pause, resume (also starts a planned job) or cancel (queued items are skipped), with an
    optional reason for the audit log."""
    view = redrive.control_job(sessions, clock, job_id, command, actor=actor, reason=body.reason if body else None)
    return RedriveJobResponse(job=job_out(view))


@router.get("/api/redrive-jobs/{job_id}/items", response_model=RedriveItemsResponse, dependencies=[READ],
            responses=error_responses(404, 422))
def items(job_id: JobId, sessions: SessionsDep,
          cursor: Annotated[int | None, Query(ge=0, le=2**62, description="next_cursor of the previous page")] = None,
          limit: Annotated[int, Query(ge=1, le=redrive.ITEMS_PAGE_MAX)] = redrive.ITEMS_PAGE
          ) -> RedriveItemsResponse:
    """A page of the job's messages, in the order they were listed: each one's destination and
    what became of it. `next_cursor` asks for the next page (null on the last)."""
    page, next_cursor = redrive.job_items(sessions, job_id, cursor, limit)
    return RedriveItemsResponse(items=[RedriveItemOut.model_validate(i, from_attributes=True) for i in page],
                                next_cursor=str(next_cursor) if next_cursor is not None else None)


@router.get("/api/redrive-jobs/{job_id}/report.csv", response_class=StreamingResponse, dependencies=[READ],
            responses=error_responses(404, 422))
def report(job_id: JobId, request: Request, backend: BackendDep, sessions: SessionsDep) -> StreamingResponse:
    """The per-message report as CSV: each dead letter's keys, the topic it was consumed from,
    its born time (epoch ms and ISO 8601 UTC) and failure reason; then resent, skipped or failed,
    and why."""
    group = redrive.get_job(sessions, job_id).group  # an unknown job fails here, before the answer starts
    cache = request.app.state.dead_letters

    def lines() -> Iterator[str]:
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(["dead_letter_id", "keys", "topic", "born_timestamp", "born_time_utc", "reason", "status",
                         "destination", "new_offset_msg_id", "error"])
        for item in redrive.every_job_item(sessions, job_id):
            told = redrive_report.facts(backend, cache, group, item.dead_letter_id)
            writer.writerow([item.dead_letter_id, " ".join(told.keys), told.topic or "",
                             "" if told.born_timestamp is None else told.born_timestamp, told.born_time_utc,
                             told.reason, item.status, item.destination, item.new_offset_msg_id or "",
                             item.error or ""])
            if out.tell() > REPORT_CHUNK_BYTES:
                yield out.getvalue()
                out.seek(0)
                out.truncate()
        yield out.getvalue()

    return StreamingResponse(lines(), media_type="text/csv; charset=utf-8",
                             headers={"Content-Disposition": f'attachment; filename="redrive-job-{job_id}.csv"'})
