"""A message's lifecycle: GET /api/messages/{message_id}/timeline."""

from __future__ import annotations

from fastapi import APIRouter

from app.deps import BackendDep
from app.params import MessageIdPath
from app.routes import error_responses
from app.schemas import TimelineResponse
from app.security import READ
from app.services import timeline as service
from app.services.errors import NotFoundError

router = APIRouter(tags=["messages"])


@router.get("/api/messages/{message_id}/timeline", dependencies=[READ], response_model=TimelineResponse,
            response_model_exclude_none=True, responses=error_responses(400, 404, 424))
def timeline(message_id: MessageIdPath, backend: BackendDep) -> dict:
    """Every recorded event of a message, oldest first, across its copies (original, scheduled,
    retry, dead letter, resent): stored, scheduled, released, delivered, acked, failed,
    invisible_timeout, invisible_changed, retry, dead_letter, resent, duplicate; `client` names
    the RocketMQ 5 client that sent, received, acknowledged, failed or postponed it (REST
    callers are not named). `message_id` is its unique key or the offset message id of any copy.
    With no event recorded, an offset id of a stored message answers one event made from the
    record (`"derived": true`), a unique key none; an id that names no message is 404.

    `hops` are the message's hops in time order (produced, delivered, failed, retry_scheduled,
    redelivered, dead_lettered, resent, consumed...) and `verdicts` where it stands for each
    consumer group (consumed, retry_pending with the next attempt time, dead_lettered, pending,
    unknown). Without trace events they are reconstructed from the copies' properties
    (`"traced": false`, hops `"derived": true`).

    On a live RocketMQ cluster the hops come from the copies and the clients' own trace (mqlens
    records no events there, and a 4.x broker keeps no receive state); a broker that does not
    answer leaves its part out: `"complete": false` and `problems` name it."""
    found = service.message_timeline(backend, message_id)
    if not found.entries and not found.hops:
        raise NotFoundError(f"no trace event and no message for id {message_id}")
    return {"ok": True, "id": message_id,
            "events": [{**entry.event.to_json(), "derived": entry.derived} for entry in found.entries],
            "traced": found.traced, "hops": [hop.to_json() for hop in found.hops],
            "verdicts": [verdict.to_json() for verdict in found.verdicts],
            "transaction": vars(found.transaction) if found.transaction else None,
            "complete": not found.problems, "problems": found.problems}
