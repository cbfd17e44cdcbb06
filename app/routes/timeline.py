"""A message's lifecycle: GET /api/messages/{message_id}/timeline."""

from __future__ import annotations

from fastapi import APIRouter

from app.deps import StoreDep
from app.routes import error_responses
from app.schemas import TimelineResponse
from app.services import timeline as service

router = APIRouter(tags=["messages"])


@router.get("/api/messages/{message_id}/timeline", response_model=TimelineResponse,
            response_model_exclude_none=True, responses=error_responses(400, 404))
def timeline(message_id: str, store: StoreDep) -> dict:
    """Every recorded event of a message, oldest first, across its copies (original, scheduled,
    retry, dead letter, resent): stored, scheduled, released, delivered, acked, failed,
    invisible_timeout, retry, dead_letter, resent, duplicate. `message_id` is its unique key or
    the offset message id of any copy. With no event recorded, an offset id of a stored message
    answers one event made from the record (`"derived": true`); otherwise 404."""
    entries = service.timeline(store, message_id)
    return {"ok": True, "id": message_id,
            "events": [{**entry.event.to_json(), "derived": entry.derived} for entry in entries]}
