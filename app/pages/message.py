"""The message page: every header field and property, the body in several views (large bodies
previewed, with a download), both ids, links to every other copy, and its body download."""

from __future__ import annotations

import base64
import json
import secrets
from typing import Annotated, Literal, get_args

from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse, Response
from sqlalchemy.orm import Session, sessionmaker

from app.deps import BackendDep, ClockDep, SessionsDep
from app.masking import Body
from app.pages import RendererDep
from app.presenters import body_text, message_dict, message_summary
from app.security import READ, Masking, Reader
from app.services import dead_letters, lookup, reveal, transactions
from app.services import resend as resend_service
from app.services.audit import MAX_REASON
from app.services.errors import ForbiddenError, InvalidRequestError
from backend.embedded import EmbeddedBackend
from store.broker.client_trace import client_trace_of
from store.format import topics
from store.format.client_trace import ClientTraceContext, TraceType
from store.format.codec import StoredMessage
from store.message_store import MessageStore

router = APIRouter(include_in_schema=False)

PREVIEW_BYTES = 64 * 1024  # bodies beyond this are previewed, the whole body is a download
HEX_PREVIEW_BYTES = 4 * 1024
BodyView = Literal["text", "json", "hex", "base64"]
VIEWS: tuple[BodyView, ...] = get_args(BodyView)
# What the message page shows only from the embedded store so far; on a live cluster it says so.
NOT_YET_ON_A_CLUSTER = ("other copies", "client trace", "transaction state")


def hex_dump(data: bytes) -> str:
    """Offset, 16 bytes in hex and their printable characters, one line per 16 bytes."""
    lines = []
    for pos in range(0, len(data), 16):
        chunk = data[pos:pos + 16]
        hex_part = " ".join(f"{b:02x}" for b in chunk)
        text_part = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{pos:08x}  {hex_part:<47}  {text_part}")
    return "\n".join(lines)


def body_views(body: bytes, view: BodyView | None = None) -> dict:
    """What each view of the body shows (a preview for large bodies), which view fits it best,
    and the view shown (`view`, else the best)."""
    preview = body[:PREVIEW_BYTES]
    text = None
    try:
        text = preview.decode("utf-8")
    except UnicodeDecodeError as exc:
        if len(body) > PREVIEW_BYTES and exc.start >= len(preview) - 3:  # a character cut by the preview
            text = preview[: exc.start].decode("utf-8")
    pretty = None
    if text is not None and len(body) <= PREVIEW_BYTES and text.strip()[:1] in ("{", "["):
        try:
            pretty = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            pretty = None
    best: BodyView = "json" if pretty is not None else "text" if text is not None else "hex"
    return {
        "size": len(body),
        "previewed": len(body) > PREVIEW_BYTES,
        "preview_bytes": PREVIEW_BYTES,
        "text": text,
        "json": pretty,
        "hex": hex_dump(body[:HEX_PREVIEW_BYTES]),
        "hex_previewed": len(body) > HEX_PREVIEW_BYTES,
        "base64": base64.b64encode(preview).decode("ascii"),
        "best": best,
        "view": view or best,
    }


def _all_copies(store: MessageStore, msg: StoredMessage) -> list[StoredMessage]:
    return lookup.all_copies(store, [msg.unique_key] if msg.unique_key else [], msg)


def other_copies(msg: StoredMessage, copies: list[StoredMessage]) -> list[dict]:
    """Every other copy of the message among `copies` (see lookup.all_copies), oldest first."""
    return [message_summary(m) for m in copies if m.phys_offset != msg.phys_offset]


def dead_letter_data(source: lookup.Source, sessions: sessionmaker[Session], msg: StoredMessage) -> dict | None:
    """For a dead letter: its group, where a resend takes it, and its last resend."""
    if not topics.is_dlq_topic(msg.topic):
        return None
    group = resend_service.group_of(msg.topic)
    try:
        route = resend_service.Destination("group").topic_for(source, group, msg)
    except InvalidRequestError:
        route = None
    item = resend_service.resent_before(sessions, [msg.offset_msg_id]).get(msg.offset_msg_id)
    last = None if item is None else {"at_ms": item.at_ms, "actor": item.actor, "status": item.status,
                                      "new_offset_msg_id": item.new_offset_msg_id, "destination": item.destination,
                                      "copy_state": dead_letters.copy_state(source, group, item.new_offset_msg_id)}
    editable = "\n".join(f"{k}={v}" for k, v in resend_service.user_properties(msg).items())
    return {"group": group, "route": route, "last_resend": last, "click_key": secrets.token_urlsafe(16),
            "editable_properties": editable, "body_text": Body(msg.offset_msg_id, body_text(msg.body))}


def transaction_data(store: MessageStore, msg: StoredMessage,
                     copies: list[StoredMessage] | None = None) -> dict | None:
    """For a message sent in a transaction: committed, rolled back or waiting for the producer's
    check. `copies`: every copy of the message, msg included (looked up when not given)."""
    if topics.TRAN_MSG not in msg.properties and msg.topic != transactions.HALF_TOPIC:
        return None
    if copies is None:
        copies = _all_copies(store, msg)
    standing = transactions.transaction_standing(store, copies)
    return vars(standing) if standing else None


def client_trace_data(store: MessageStore, msg: StoredMessage) -> list[dict]:
    """What the RocketMQ clients' own message trace says of the message, oldest first."""
    if not msg.unique_key:
        return []
    return [{"type": str(c.type), "group": c.group, "time_ms": c.timestamp,
             "client": c.record.client_host if c.record else None, "cost_ms": c.cost_time,
             "outcome": _trace_outcome(c), "attempt": None if c.retry_times is None else c.retry_times + 1}
            for c in client_trace_of(store, msg.unique_key)]


def _trace_outcome(context: ClientTraceContext) -> str | None:
    if context.type == TraceType.SUB_BEFORE:
        return None
    if context.type == TraceType.END_TRANSACTION:
        return str(context.transaction_state)
    if context.type == TraceType.SUB_AFTER:
        return context.consume_result if not context.success else "SUCCESS"
    return None if context.success is None else ("sent" if context.success else "send failed")


def message_data(source: lookup.Source, offset_msg_id: str, sessions: sessionmaker[Session],
                 view: BodyView | None = None) -> dict:
    backend = lookup.backend_of(source)
    msg = lookup.by_offset_id(backend, offset_msg_id)
    data = {k: v for k, v in message_dict(msg).items() if k not in ("body_masked", "body_base64", "body_text")}
    shown = {
        "message": data,
        "body": Body(msg.offset_msg_id, {"masked": False, **body_views(msg.body, view)},
                     masked={"masked": True, "size": len(msg.body)}),
        "reveal_url": f"/messages/{msg.offset_msg_id}/reveal",
        "permalink": f"/messages/{msg.offset_msg_id}",
        "timeline_url": f"/messages/{msg.unique_key or msg.offset_msg_id}/timeline",
        "download_url": f"/messages/{msg.offset_msg_id}/body",
    }
    if not isinstance(backend, EmbeddedBackend):
        return {**shown, "dead_letter": dead_letter_data(backend, sessions, msg), "transaction": None,
                "client_trace": [], "copies": [], "not_served": list(NOT_YET_ON_A_CLUSTER)}
    store = backend.store
    copies = _all_copies(store, msg)
    return {**shown, "dead_letter": dead_letter_data(store, sessions, msg),
            "transaction": transaction_data(store, msg, copies), "client_trace": client_trace_data(store, msg),
            "copies": other_copies(msg, copies), "not_served": []}


@router.get("/messages/{offset_msg_id}", dependencies=[READ])
def message_page(offset_msg_id: str, request: Request, backend: BackendDep, sessions: SessionsDep,
                 renderer: RendererDep, view: str | None = None):
    if view is not None and view not in VIEWS:
        raise InvalidRequestError(f"unknown body view {view[:20]!r}: use one of {', '.join(VIEWS)}")
    data = message_data(backend, offset_msg_id, sessions, view)
    return renderer.page(request, "messages/message.html", {**data, "nav": "search"}, fragment="body_view")


@router.post("/messages/{offset_msg_id}/reveal")
def reveal_page(offset_msg_id: str, backend: BackendDep, sessions: SessionsDep, clock: ClockDep, reader: Reader,
                mask: Masking, reason: Annotated[str | None, Form(max_length=MAX_REASON)] = None) -> Response:
    """Show a masked body: recorded in the audit log, then the message page shows it for a while."""
    msg = lookup.by_offset_id(backend, offset_msg_id)
    if not mask.shows(msg.offset_msg_id):
        reveal.reveal(sessions, clock, msg, actor=reader, reason=reason)
    return RedirectResponse(f"/messages/{msg.offset_msg_id}", status_code=303)


@router.get("/messages/{offset_msg_id}/body", dependencies=[READ])
def message_body(offset_msg_id: str, backend: BackendDep, mask: Masking) -> Response:
    """The whole body, as stored (decompressed), for download."""
    msg = lookup.by_offset_id(backend, offset_msg_id)
    body = mask(Body(msg.offset_msg_id, msg.body))
    if body is None:
        raise ForbiddenError("your role sees message bodies masked: reveal the body on the message page first "
                             "(the reveal is recorded in the audit log)")
    return Response(body, media_type="application/octet-stream",
                    headers={"Content-Disposition": f'attachment; filename="{msg.offset_msg_id}.bin"'})
