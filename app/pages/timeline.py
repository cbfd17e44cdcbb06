"""The retry timeline page: a message's identity, each consumer group's verdict, an SVG drawing
of its hops across the producer/broker lane and one lane per group, and a table of every hop."""

from __future__ import annotations

import secrets

from fastapi import APIRouter, Request

from app.deps import BackendDep
from app.pages import RendererDep
from app.pages.timeline_svg import timeline_layout
from app.presenters import message_summary
from app.security import READ
from app.services import resend as resend_service
from app.services import timeline as service
from app.services.errors import InvalidRequestError
from app.services.timeline import MessageTimeline
from backend.protocol import Backend
from store.format import topics

router = APIRouter(include_in_schema=False)


def _identity(found: MessageTimeline) -> dict:
    first = found.first_copy
    if first is None:
        return {"unique_key": found.unique_key, "offset_msg_id": None, "topic": None, "tags": None, "keys": [],
                "born_timestamp": None, "store_timestamp": None}
    topic = first.topic
    if topics.is_system_topic(topic):  # a retry, schedule, dead-letter or half message copy: say where it came from
        topic = first.properties.get(topics.RETRY_TOPIC) or first.properties.get(topics.REAL_TOPIC) or topic
    return {"unique_key": found.unique_key, "offset_msg_id": first.offset_msg_id, "topic": topic, "tags": first.tags,
            "keys": first.keys, "born_timestamp": first.born_timestamp, "store_timestamp": first.store_timestamp}


def _dead_letters(backend: Backend, found: MessageTimeline) -> dict[str, dict]:
    """Per group whose verdict is dead-lettered: its newest dead letter and where a resend takes it."""
    dead: dict[str, dict] = {}
    for verdict in found.verdicts:
        if verdict.state != "dead_lettered":
            continue
        copies = [m for m in found.copies if m.topic == topics.dlq_topic(verdict.group)]
        if copies:
            newest = max(copies, key=lambda m: (m.store_timestamp, m.phys_offset))
            try:
                route = resend_service.Destination("group").topic_for(backend, verdict.group, newest)
            except InvalidRequestError:
                continue
            dead[verdict.group] = {"offset_msg_id": newest.offset_msg_id, "route": route}
    return dead


def timeline_data(backend: Backend, message_id: str) -> dict:
    found = service.message_timeline(backend, message_id)
    groups = [verdict.group for verdict in found.verdicts]
    return {
        "dead_letters": _dead_letters(backend, found),
        "click_key": secrets.token_urlsafe(16),
        "id": message_id,
        "message": _identity(found),
        "traced": found.traced,
        "client_trace_contexts": found.client_trace_contexts,
        "transaction": vars(found.transaction) if found.transaction else None,
        "progress_recorded": found.progress_recorded,
        "verdicts": [verdict.to_json() for verdict in found.verdicts],
        "hops": [hop.to_json() for hop in found.hops],
        "copies": [message_summary(m) for m in found.copies],
        "chart": timeline_layout(found.hops, groups),
        "api_url": f"/api/messages/{message_id}/timeline",
        "complete": not found.problems,
        "problems": found.problems,
    }


@router.get("/messages/{message_id}/timeline", dependencies=[READ])
def timeline_page(message_id: str, request: Request, backend: BackendDep, renderer: RendererDep):
    data = timeline_data(backend, message_id)
    return renderer.page(request, "messages/timeline.html", {**data, "nav": "search"})
