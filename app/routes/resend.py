"""Dead letters: POST /api/messages/{offset_msg_id}/resend."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header

from app.deps import ClockDep, SessionsDep, StoreDep
from app.routes import error_responses
from app.schemas import PutResultOut, ResendResponse
from app.security import Resender
from app.services import resend as service

router = APIRouter(tags=["dead letters"])


@router.post("/api/messages/{offset_msg_id}/resend", response_model=ResendResponse,
             responses=error_responses(400, 404, 409))
def resend(offset_msg_id: str, store: StoreDep, sessions: SessionsDep, clock: ClockDep, actor: Resender,
           idempotency_key: Annotated[str | None, Header(description="Repeat-safe: a request repeated with the "
                                                         "same key resends once and gets the first answer.")] = None,
           ) -> ResendResponse:
    """Put a dead letter (a message of a %DLQ% topic, named by its offset message id) back on the
    topic it was consumed from, as a fresh delivery with the same body, keys, tags and unique
    key. An audit entry is written before the resend and completed after it. A message that is
    not a dead letter is refused with 400."""
    done = service.resend(store, sessions, clock, offset_msg_id, actor=actor, idempotency_key=idempotency_key)
    return ResendResponse(dead_letter=done.dead_letter, result=PutResultOut.model_validate(done.copy),
                          replayed=done.replayed)
