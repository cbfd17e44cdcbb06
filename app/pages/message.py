"""The message page: every header field and property, the body in several views (large bodies
previewed, with a download), both ids, links to every other copy, and its body download."""

from __future__ import annotations

import base64
import json
from typing import Literal, get_args

from fastapi import APIRouter, Request
from fastapi.responses import Response

from app.deps import StoreDep
from app.pages import RendererDep
from app.presenters import message_dict, message_summary
from app.services import lookup
from app.services.errors import InvalidRequestError
from store.codec import StoredMessage
from store.message_store import MessageStore

router = APIRouter(include_in_schema=False)

PREVIEW_BYTES = 64 * 1024  # bodies beyond this are previewed, the whole body is a download
HEX_PREVIEW_BYTES = 4 * 1024
BodyView = Literal["text", "json", "hex", "base64"]
VIEWS: tuple[BodyView, ...] = get_args(BodyView)


def hex_dump(data: bytes) -> str:
    """Offset, 16 bytes in hex and their printable characters, one line per 16 bytes."""
    lines = []
    for pos in range(0, len(data), 16):
        chunk = data[pos:pos + 16]
        hex_part = " ".join(f"{b:02x}" for b in chunk)
        text_part = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{pos:08x}  {hex_part:<47}  {text_part}")
    return "\n".join(lines)


def body_views(body: bytes) -> dict:
    """What each view of the body shows (a preview for large bodies) and which view fits it best."""
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
    }


def other_copies(store: MessageStore, msg: StoredMessage) -> list[dict]:
    """Every other copy of the message (see lookup.all_copies), oldest first."""
    copies = lookup.all_copies(store, [msg.unique_key] if msg.unique_key else [], msg)
    return [message_summary(m) for m in copies if m.phys_offset != msg.phys_offset]


def message_data(store: MessageStore, offset_msg_id: str) -> dict:
    msg = lookup.by_offset_id(store, offset_msg_id)
    data = message_dict(msg)
    data.pop("body_base64")
    data.pop("body_text", None)
    return {
        "message": data,
        "body": body_views(msg.body),
        "copies": other_copies(store, msg),
        "permalink": f"/messages/{msg.offset_msg_id}",
        "timeline_url": f"/messages/{msg.unique_key or msg.offset_msg_id}/timeline",
        "download_url": f"/messages/{msg.offset_msg_id}/body",
    }


@router.get("/messages/{offset_msg_id}")
def message_page(offset_msg_id: str, request: Request, store: StoreDep, renderer: RendererDep,
                 view: str | None = None):
    if view is not None and view not in VIEWS:
        raise InvalidRequestError(f"unknown body view {view[:20]!r}: use one of {', '.join(VIEWS)}")
    data = message_data(store, offset_msg_id)
    chosen = view or data["body"]["best"]
    return renderer.page(request, "messages/message.html", {**data, "view": chosen, "nav": "search"},
                         fragment="body_view")


@router.get("/messages/{offset_msg_id}/body")
def message_body(offset_msg_id: str, store: StoreDep) -> Response:
    """The whole body, as stored (decompressed), for download."""
    msg = lookup.by_offset_id(store, offset_msg_id)
    return Response(msg.body, media_type="application/octet-stream",
                    headers={"Content-Disposition": f'attachment; filename="{msg.offset_msg_id}.bin"'})
