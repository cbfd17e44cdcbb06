"""Console pages: the consumer groups, and one group's lag, retries waiting and dead letters."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict
from typing import Annotated
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse

from app.deps import BackendDep, ClientSessionsDep, ClockDep, SessionsDep, StoreDep, StoreIfAnyDep
from app.pages import RendererDep
from app.pages.params import optional_int, optional_time_ms
from app.pages.topics import topic_url
from app.presenters import client_rows, grpc_access
from app.security import READ, Configurer
from app.services import cluster_offset_reset, offset_reset
from app.services import groups as groups_service
from app.services.audit import MAX_REASON
from app.services.errors import InvalidRequestError
from app.services.group_status import cluster_group_detail, group_detail
from store.format.topics import is_system_topic

router = APIRouter(include_in_schema=False)


@router.get("/groups", dependencies=[READ])
def groups_page(request: Request, backend: BackendDep, renderer: RendererDep):
    listing = backend.group_summaries()
    return renderer.page(request, "groups/groups.html", {"nav": "groups", "groups": [asdict(g) for g in listing.groups],
                                                         "problems": listing.problems,
                                                         "on_cluster": backend.kind == "cluster"})


def reset_topics(topic_names: Iterable[str], offsets: list) -> tuple[list[str], list[str]]:
    """The topics an offset reset can name: those the group consumes first (its own topics before
    its retry topic), then every other user topic."""
    consumed = sorted({o.topic for o in offsets}, key=lambda t: (is_system_topic(t), t))
    others = sorted(t for t in topic_names if not is_system_topic(t) and t not in consumed)
    return consumed, others


@router.get("/groups/{group}", dependencies=[READ])
def group_page(group: str, request: Request, backend: BackendDep, renderer: RendererDep, clients: ClientSessionsDep,
               saved: str | None = None, reset: str | None = None):
    store = request.app.state.store
    if store is None:
        detail = cluster_group_detail(backend, group)
        consumed, others = reset_topics(backend.topic_names(), detail["offsets"])
        return renderer.page(request, "groups/cluster_group.html", {
            "nav": "groups", "group": detail, "topics": consumed + others, "consumed_topics": consumed,
            "reset_topic": reset if reset in consumed + others else None})
    now_ms = request.app.state.clock.now_ms()
    connected = client_rows(clients, group=group)
    data = group_detail(store, group, now_ms, known_elsewhere=bool(connected))
    dlq = data["dead_letters"]["topic"]
    links = {"dlq_topic_url": topic_url(dlq) if data["dead_letters"]["queues"] else None,
             "dlq_inbox_url": f"/groups/{quote(group, safe='')}/dead-letters"}
    consumed, others = reset_topics(store.topics(), data["offsets"])
    done = {"settings_saved": saved == "settings", "reset_topic": reset if reset in consumed + others else None}
    return renderer.page(request, "groups/group.html", {
        "nav": "groups", "group": data, "topics": consumed + others, "consumed_topics": consumed, **done, **links,
        "now_ms": now_ms, "clients": connected, "grpc": grpc_access(request.app.state.settings)})


@router.post("/groups/{group}/settings")
def save_settings(group: str, store: StoreDep, sessions: SessionsDep, clock: ClockDep, actor: Configurer,
                  max_reconsume_times: Annotated[str, Form(max_length=12)],
                  consume_mode: Annotated[str, Form(max_length=16)],
                  expected_version: Annotated[str, Form(max_length=32)],
                  reason: Annotated[str | None, Form(max_length=MAX_REASON)] = None):
    groups_service.put_group(store, sessions, clock, group, actor=actor, reason=reason,
                             expected_version=expected_version,
                             max_reconsume_times=optional_int(max_reconsume_times, "Max reconsume times",
                                                              high=10_000),
                             consume_mode=consume_mode)
    return RedirectResponse(f"/groups/{quote(group, safe='')}?saved=settings", status_code=303)


def _reset_target(to: str, value: str | None) -> object:
    if to in ("earliest", "latest"):
        return to
    if to == "time":
        return {"time": optional_time_ms(value, "Time") or 0}
    if to == "offset":
        return {"offset": optional_int(value, "Offset") or 0}
    raise InvalidRequestError("reset to the earliest or latest message, a time or an offset")


@router.post("/groups/{group}/offsets/reset")
def reset_offsets(group: str, request: Request, store: StoreIfAnyDep, backend: BackendDep, sessions: SessionsDep,
                  clock: ClockDep, renderer: RendererDep, actor: Configurer,
                  topic: Annotated[str, Form(max_length=127)], to: Annotated[str, Form(max_length=16)],
                  value: Annotated[str | None, Form(max_length=40)] = None,
                  queue_id: Annotated[str | None, Form(max_length=6)] = None,
                  reason: Annotated[str | None, Form(max_length=MAX_REASON)] = None,
                  confirm: Annotated[bool, Form()] = False):
    """Without `confirm`: each queue's offset and lag before and after; with it: the reset."""
    target = _reset_target(to, value)
    queue = optional_int(queue_id, "Queue")
    form = {"nav": "groups", "group": group, "topic": topic, "to": to, "value": value or "",
            "queue_id": queue_id or "", "reason": reason or "",
            "time_ms": target["time"] if isinstance(target, dict) and "time" in target else None}
    if not confirm:
        if store is None:
            planned = cluster_offset_reset.preview(backend, group, topic, target, queue)
            return renderer.page(request, "groups/reset.html", {
                **form, "rows": [asdict(r) for r in planned.queues], "on_cluster": True,
                "consumers_online": planned.consumers_online, "problems": planned.problems})
        rows = offset_reset.plan(store, group, topic, target, queue)
        return renderer.page(request, "groups/reset.html", {**form, "rows": [asdict(r) for r in rows]})
    if store is None:
        cluster_offset_reset.reset(backend, sessions, clock, group, topic, target, actor=actor, queue_id=queue,
                                   reason=reason)
    else:
        offset_reset.reset(store, sessions, clock, group, topic, target, actor=actor, queue_id=queue, reason=reason)
    return RedirectResponse(f"/groups/{quote(group, safe='')}?{urlencode({'reset': topic})}", status_code=303)
