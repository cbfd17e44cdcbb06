"""Dead letters: POST /api/messages/{offset_msg_id}/resend and POST /api/dlq/{group}/resend."""

from __future__ import annotations

import base64
import binascii
from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Header, Request
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse, Response

from app.deps import BackendDep, ClockDep, SessionsDep
from app.errors import status_for
from app.params import GroupPath, OffsetMsgIdPath
from app.routes import error_responses
from app.schemas import (
    DlqResendRequest,
    DlqResendResponse,
    PutResultOut,
    ResendEdit,
    ResendResponse,
    ResendResultOut,
    SingleResendRequest,
)
from app.security import Resender
from app.services import resend as service
from app.services.errors import ConflictError, InvalidRequestError

router = APIRouter(tags=["dead letters"])

IdempotencyKey = Annotated[str | None, Header(max_length=255, description="Repeat-safe: a request repeated with the "
                                              "same key resends once and gets the first answer.")]


def _destination(value) -> object:
    return value.model_dump() if hasattr(value, "model_dump") else value


@router.post("/api/messages/{offset_msg_id}/resend", response_model=ResendResponse,
             responses=error_responses(400, 404, 409, 422, 429))
def resend_one(offset_msg_id: OffsetMsgIdPath, request: Request, backend: BackendDep, sessions: SessionsDep,
               clock: ClockDep, actor: Resender, idempotency_key: IdempotencyKey = None,
               body: SingleResendRequest | None = None) -> ResendResponse:
    """Resend one dead letter (a message of a %DLQ% topic, by offset message id) as a fresh
    delivery with the same body, keys, tags and unique key: by default to the failed group only,
    through its retry topic. A dead letter resent already is refused with 409 unless `force`
    with a reason. Audited: the audit entry is written before the resend, its outcome after."""
    body = body or SingleResendRequest()
    dead = service.find_dead_letter(backend, None, offset_msg_id)  # malformed: 400; nothing there: 404
    done = service.resend(backend, sessions, clock, None, [dead.offset_msg_id], actor=actor,
                          destination=_destination(body.destination), reason=body.reason, force=body.force,
                          idempotency_key=idempotency_key, limit=request.app.state.settings.resend_limit)
    [result] = [r for r in done.results if r.message_id == dead.offset_msg_id] or [None]
    if result is None or result.new_offset_msg_id is None:
        error = result.error if result is not None else "no copy was made"
        if result is not None and result.status == service.FAILED:
            raise InvalidRequestError(error or "the resend failed")
        raise ConflictError(error or "the resend is still in progress")
    copy = backend.read_by_offset_id(result.new_offset_msg_id)
    facts = {name: getattr(copy, name) for name in PutResultOut.model_fields}
    assert done.action_id is not None
    return ResendResponse(action_id=done.action_id, dead_letter=dead.offset_msg_id, destination=copy.topic,
                          result=PutResultOut(**facts), replayed=done.replayed)


@router.post("/api/dlq/{group}/resend", response_model=DlqResendResponse,
             responses=error_responses(400, 404, 409, 422, 429))
def resend_many(group: GroupPath, body: DlqResendRequest, request: Request, backend: BackendDep, sessions: SessionsDep,
                clock: ClockDep, actor: Resender, idempotency_key: IdempotencyKey = None) -> Response:
    """Resend dead letters of a group, named by offset message id or unique key. A result per
    id, in order: ok (with the new copy's id), failed or not_found (with why), or would_resend
    for a dry run. `ok` is true only when every id was resent; a request that resent none answers
    404 when no id named a dead letter, else 400, with the same results (and `error`, `status`).
    Dead letters resent already are refused with 409 unless `force` with a reason.
    The support role may resend up to the per-action limit (setting resend_limit) at once."""
    done = service.resend(backend, sessions, clock, group, body.message_ids, actor=actor,
                          destination=_destination(body.destination), dry_run=body.dry_run, reason=body.reason,
                          force=body.force, idempotency_key=idempotency_key,
                          limit=request.app.state.settings.resend_limit, edit=_edit(body.edit))
    answer = DlqResendResponse(ok=done.all_done, action_id=done.action_id, dry_run=body.dry_run,
                               replayed=done.replayed, results=[ResendResultOut(**asdict(r)) for r in done.results],
                               edit=done.diff)
    refusal = done.nothing_resent()
    if refusal is None:
        return answer
    status = status_for(refusal)  # the error's shape, with each id's result
    return JSONResponse(jsonable_encoder({**answer.model_dump(), "error": str(refusal), "status": status}),
                        status_code=status)


def _edit(edit: ResendEdit | None) -> service.Edit | None:
    if edit is None:
        return None
    body = None
    if edit.body is not None:
        body = edit.body.encode("utf-8")
    elif edit.body_base64 is not None:
        try:
            body = base64.b64decode(edit.body_base64, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidRequestError("edit.body_base64 is not valid base64") from None
    return service.Edit(body, dict(edit.properties))
