"""The analytics pages: the pipeline runs with a form to start one, and one run's live progress
and results: tables, and for the dlq-report charts drawn as SVG on the server."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Form, Path, Request
from fastapi.responses import RedirectResponse

from app.deps import ClockDep, PipelineRunnerDep, PipelineSetupDep, SessionsDep, StoreDep
from app.pages import RendererDep
from app.pages.dlq_charts import dlq_charts
from app.render import is_htmx
from app.security import READ, JobStarter
from app.services import pipeline_runs
from app.services.audit import MAX_REASON
from app.services.pipeline_command import RunFolder
from app.services.pipeline_results import read_results
from app.services.pipeline_status import log_tail

router = APIRouter(include_in_schema=False)

HTMX_STOP_POLLING = 286
ROWS_SHOWN = 200  # of each result table; the JSON API has more
RunId = Annotated[int, Path(ge=1, le=2**31)]
# The dlq-report's tables, in the order and the words the run page shows them.
DLQ_TABLE_TITLES = {
    "summary": "Dead letters per group and topic",
    "daily": "Dead letters per day",
    "retries": "Retries per group",
    "ttd_histogram": "Time to the dead-letter queue",
    "top_keys": "Top failing keys",
    "top_tags": "Top failing tags",
    "top_reasons": "Top failure reasons",
}


def _run(view: pipeline_runs.RunView, now_ms: int) -> dict:
    return {**asdict(view), "active": view.active, "duration_ms": view.duration_ms(now_ms),
            "results_url": view.results_url}


def _outcome(view: pipeline_runs.RunView) -> dict:
    """What the page shows below the progress: a succeeded run's results, a failed run's log tail."""
    if view.state == pipeline_runs.SUCCEEDED:
        found = read_results(view.job, view.output_path)
        titles = DLQ_TABLE_TITLES if view.job == "dlq-report" else {}
        tables = [{**asdict(table), "rows": table.rows[:ROWS_SHOWN], "title": titles.get(name, name)}
                  for name, table in found.tables.items()]
        charts = dlq_charts(found.tables) if view.job == "dlq-report" else []
        return {"results": {"tables": tables, "problem": found.problem}, "charts": charts, "log_tail": []}
    lines = log_tail(RunFolder.of_output(view.output_path).log) if view.state == pipeline_runs.FAILED else []
    return {"results": None, "charts": [], "log_tail": lines}


@router.get("/analytics", dependencies=[READ])
def analytics_page(request: Request, sessions: SessionsDep, clock: ClockDep, setup: PipelineSetupDep,
                   renderer: RendererDep):
    now_ms = clock.now_ms()
    runs = [_run(view, now_ms) for view in pipeline_runs.list_runs(sessions)]
    active = any(run["active"] for run in runs)
    data = {"nav": "analytics", "runs": runs, "active": active, "jobs": pipeline_runs.job_choices(),
            "masters": setup.masters(), "default_master": setup.default_master, "store": str(setup.store_dir)}
    # htmx stops polling on 286: the list changes by itself only while a run is going
    status = HTMX_STOP_POLLING if is_htmx(request) and not active else 200
    return renderer.page(request, "analytics/runs.html", data, fragment="runs", status=status)


@router.get("/analytics/runs/{run_id}", dependencies=[READ])
def run_page(run_id: RunId, request: Request, sessions: SessionsDep, clock: ClockDep, renderer: RendererDep):
    view = pipeline_runs.get_run(sessions, run_id)
    data = {"nav": "analytics", "run": _run(view, clock.now_ms()), **_outcome(view)}
    status = HTMX_STOP_POLLING if is_htmx(request) and not view.active else 200
    return renderer.page(request, "analytics/run.html", data, fragment="live", status=status)


@router.post("/analytics/runs")
def start_run(store: StoreDep, sessions: SessionsDep, clock: ClockDep, setup: PipelineSetupDep,
              runner: PipelineRunnerDep, actor: JobStarter, job: Annotated[str, Form(max_length=64)],
              master: Annotated[str | None, Form(max_length=255)] = None,
              reason: Annotated[str | None, Form(max_length=MAX_REASON)] = None):
    view = pipeline_runs.start_run(runner, sessions, clock, setup, job, master=master or None, actor=actor,
                                   reason=reason, delay_levels=pipeline_runs.store_delay_levels(store))
    return RedirectResponse(f"/analytics/runs/{view.id}", status_code=303)


@router.post("/analytics/runs/{run_id}/cancel")
def cancel_run(run_id: RunId, sessions: SessionsDep, clock: ClockDep, runner: PipelineRunnerDep,
               actor: JobStarter):
    pipeline_runs.cancel_run(runner, sessions, clock, run_id, actor=actor)
    return RedirectResponse(f"/analytics/runs/{run_id}", status_code=303)
