"""Redrive job pages: the jobs, one job's live progress with pause, resume and cancel, and
starting a job from the dead-letter inbox's filter."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Form, Path, Query, Request
from fastapi.responses import RedirectResponse

from app.deps import BackendDep, ClockDep, SessionsDep
from app.pages import RendererDep
from app.pages.dead_letters import FormText, destination_choice, inbox_filter
from app.pages.params import optional_int
from app.render import is_htmx
from app.security import READ, Redriver
from app.services import redrive, redrive_report
from app.services.audit import MAX_REASON

router = APIRouter(include_in_schema=False)

ITEMS_SHOWN = 200
HTMX_STOP_POLLING = 286


def _job(view: redrive.JobView) -> dict:
    return {**asdict(view), "progress": view.progress, "done_items": view.done_items, "report_url": view.report_url}


@router.get("/redrive-jobs", dependencies=[READ])
def jobs_page(request: Request, sessions: SessionsDep, renderer: RendererDep):
    return renderer.page(request, "redrive/jobs.html", {"nav": "dead_letters",
                                                       "jobs": [_job(v) for v in redrive.list_jobs(sessions)]})


@router.get("/redrive-jobs/{job_id}", dependencies=[READ])
def job_page(job_id: Annotated[int, Path(ge=1, le=2**31)], request: Request, backend: BackendDep,
             sessions: SessionsDep, renderer: RendererDep, cursor: Annotated[int | None, Query(ge=0, le=2**62)] = None):
    view = redrive.get_job(sessions, job_id, request.app.state.redrive)
    items, next_cursor = redrive.job_items(sessions, job_id, cursor, ITEMS_SHOWN)
    cache = request.app.state.dead_letters
    shown = [{"dead_letter_id": i.dead_letter_id, "status": i.status, "destination": i.destination,
              "new_offset_msg_id": i.new_offset_msg_id, "error": i.error,
              **asdict(redrive_report.facts(backend, cache, view.group, i.dead_letter_id))}
             for i in items]
    # htmx stops polling on 286: a job that no longer runs has no progress to show
    status = HTMX_STOP_POLLING if is_htmx(request) and view.state != redrive.RUNNING else 200
    return renderer.page(request, "redrive/job.html", {"nav": "dead_letters", "job": _job(view), "items": shown,
                                                       "items_total": view.total, "next_cursor": next_cursor},
                         fragment="progress", status=status)


@router.post("/redrive-jobs")
def start_job(request: Request, backend: BackendDep, sessions: SessionsDep, clock: ClockDep, actor: Redriver,
              group: Annotated[str, Form(max_length=255)], destination: Annotated[str, Form(max_length=16)] = "group",
              topic: FormText = None, rate_per_s: FormText = None,
              reason: Annotated[str | None, Form(max_length=MAX_REASON)] = None,
              dry_run: Annotated[bool, Form()] = True, begin: FormText = None, end: FormText = None,
              key: FormText = None, tag: FormText = None, reason_filter: FormText = None, state: FormText = None):
    """A job over the inbox's filter; planned first (a dry run), so its list can be read before it runs."""
    wanted = inbox_filter(begin, end, key, tag, reason_filter, state or "waiting")
    rate = optional_int(rate_per_s, "Rate", low=1, high=redrive.MAX_RATE) or 100
    view = redrive.create_job(backend, sessions, clock, request.app.state.dead_letters, group, wanted,
                              destination=destination_choice(destination, topic), rate_per_s=rate, dry_run=dry_run,
                              actor=actor, reason=reason)
    return RedirectResponse(f"/redrive-jobs/{view.id}", status_code=303)


@router.post("/redrive-jobs/{job_id}/{command}")
def control_job(job_id: Annotated[int, Path(ge=1, le=2**31)],
                command: Annotated[str, Path(pattern="^(pause|resume|cancel)$")], sessions: SessionsDep,
                clock: ClockDep, actor: Redriver, reason: Annotated[str | None, Form(max_length=MAX_REASON)] = None):
    redrive.control_job(sessions, clock, job_id, command, actor=actor, reason=reason)
    return RedirectResponse(f"/redrive-jobs/{job_id}", status_code=303)
