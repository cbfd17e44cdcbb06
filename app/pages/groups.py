"""Console pages: the consumer groups, and one group's lag, retries waiting and dead letters."""

from __future__ import annotations

from urllib.parse import quote

from fastapi import APIRouter, Request

from app.deps import StoreDep
from app.pages import RendererDep
from app.pages.topics import topic_url
from app.security import READ
from app.services.group_status import group_detail, group_rows

router = APIRouter(include_in_schema=False)


@router.get("/groups", dependencies=[READ])
def groups_page(request: Request, store: StoreDep, renderer: RendererDep):
    return renderer.page(request, "groups/groups.html", {"nav": "groups", "groups": group_rows(store)})


@router.get("/groups/{group}", dependencies=[READ])
def group_page(group: str, request: Request, store: StoreDep, renderer: RendererDep):
    data = group_detail(store, group, request.app.state.clock.now_ms())
    dlq = data["dead_letters"]["topic"]
    links = {"dlq_topic_url": topic_url(dlq) if data["dead_letters"]["queues"] else None,
             "dlq_inbox_url": f"/groups/{quote(group, safe='')}/dead-letters"}
    return renderer.page(request, "groups/group.html", {"nav": "groups", "group": data, **links})
