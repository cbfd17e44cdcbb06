"""GET /metrics: the store's metrics for Prometheus."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from app.routes import error_responses
from app.security import READ
from app.services.metrics import CONTENT_TYPE, exposition

router = APIRouter(tags=["health"])


@router.get("/metrics", dependencies=[READ], response_class=Response,
            responses={200: {"content": {CONTENT_TYPE.split(";")[0]: {}},
                             "description": "Prometheus text exposition format 0.0.4."}, **error_responses()})
def metrics(request: Request) -> Response:
    """Store size and segments, dispatch lag, message counters, queue max offsets, consumer lag
    per group and queue, and dead letters per group, read from the store at scrape time."""
    return Response(exposition(request.app.state.metrics_registry), media_type=CONTENT_TYPE)
