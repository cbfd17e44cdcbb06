"""The retry timeline page: a message's identity, each consumer group's verdict, an SVG drawing
of its hops across the producer/broker lane and one lane per group, and a table of every hop."""

from __future__ import annotations

from fastapi import APIRouter, Request

from app.deps import StoreDep
from app.pages import RendererDep
from app.pages.timeline_svg import timeline_layout
from app.presenters import message_summary
from app.security import READ
from app.services import timeline as service
from app.services.timeline import MessageTimeline
from store import topics
from store.message_store import MessageStore

router = APIRouter(include_in_schema=False)


def _identity(found: MessageTimeline) -> dict:
    first = found.first_copy
    if first is None:
        return {"unique_key": found.unique_key, "offset_msg_id": None, "topic": None, "tags": None, "keys": [],
                "born_timestamp": None, "store_timestamp": None}
    topic = first.topic
    if topics.copy_kind(topic) != "original":  # a retry, schedule or dead-letter copy: say where it came from
        topic = first.properties.get(topics.RETRY_TOPIC) or first.properties.get(topics.REAL_TOPIC) or topic
    return {"unique_key": found.unique_key, "offset_msg_id": first.offset_msg_id, "topic": topic, "tags": first.tags,
            "keys": first.keys, "born_timestamp": first.born_timestamp, "store_timestamp": first.store_timestamp}


def timeline_data(store: MessageStore, message_id: str) -> dict:
    found = service.message_timeline(store, message_id)
    groups = [verdict.group for verdict in found.verdicts]
    return {
        "id": message_id,
        "message": _identity(found),
        "traced": found.traced,
        "progress_recorded": found.progress_recorded,
        "verdicts": [verdict.to_json() for verdict in found.verdicts],
        "hops": [hop.to_json() for hop in found.hops],
        "copies": [message_summary(m) for m in found.copies],
        "chart": timeline_layout(found.hops, groups),
        "api_url": f"/api/messages/{message_id}/timeline",
    }


@router.get("/messages/{message_id}/timeline", dependencies=[READ])
def timeline_page(message_id: str, request: Request, store: StoreDep, renderer: RendererDep):
    data = timeline_data(store, message_id)
    return renderer.page(request, "messages/timeline.html", {**data, "nav": "search"})
