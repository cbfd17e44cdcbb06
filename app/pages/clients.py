"""Console pages: the RocketMQ 5 clients connected through the gRPC front
(app.services.client_sessions), all of them or those of a group or topic; the table re-fetched
every few seconds by htmx. The group page and the dashboard show their share of the same rows
and counts (app.presenters)."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request

from app.deps import ClientSessionsDep
from app.pages import RendererDep
from app.presenters import client_counts, client_rows, grpc_access
from app.security import READ

router = APIRouter(include_in_schema=False)

REFRESH_SECONDS = 5
MAX_FILTER_CHARS = 255


def _filter_value(value: str | None) -> str | None:
    return (value or "").strip() or None


@router.get("/clients", dependencies=[READ])
def clients_page(request: Request, sessions: ClientSessionsDep, renderer: RendererDep,
                 group: Annotated[str | None, Query(max_length=MAX_FILTER_CHARS)] = None,
                 topic: Annotated[str | None, Query(max_length=MAX_FILTER_CHARS)] = None):
    group, topic = _filter_value(group), _filter_value(topic)
    query = urlencode({name: value for name, value in (("group", group), ("topic", topic)) if value})
    data = {"nav": "clients", "now_ms": request.app.state.clock.now_ms(),
            "clients": client_rows(sessions, group=group, topic=topic), "counts": client_counts(sessions),
            "filter": {"group": group or "", "topic": topic or ""}, "filtered": bool(group or topic),
            "grpc": grpc_access(request.app.state.settings), "refresh_seconds": REFRESH_SECONDS,
            "refresh_url": "/clients" + (f"?{query}" if query else "")}
    return renderer.page(request, "clients/clients.html", data, fragment="clients")
