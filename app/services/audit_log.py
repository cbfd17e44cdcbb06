"""Reading the audit log: entries newest first, filtered by actor, action, target, message and
time, paged by cursor."""

from __future__ import annotations

import json
from dataclasses import dataclass

from sqlalchemy import or_, select
from sqlalchemy.orm import Session, sessionmaker

from app.masking import Body
from app.models import AuditEntry, ResendItem
from app.services.errors import InvalidRequestError

MAX_LIMIT = 500


@dataclass(frozen=True)
class AuditFilter:
    actor: str | None = None
    action: str | None = None
    target: str | None = None  # exact, or a prefix ending in ":" (message:, group:, dlq:...)
    message: str | None = None  # entries about this message: its target, or a resend of it or to it
    since: int | None = None
    until: int | None = None

    def as_query(self) -> dict:
        return {k: v for k, v in vars(self).items() if v not in (None, "")}


@dataclass(frozen=True)
class AuditPage:
    entries: list[dict]
    next_cursor: str | None


def _edited_message(entry: AuditEntry, detail: dict) -> str | None:
    """The message an edit belongs to: the one dead letter a resend with an edit names."""
    result = detail.get("result")
    items = result.get("items") if isinstance(result, dict) else None
    if isinstance(items, list) and len(items) == 1 and isinstance(items[0], dict):
        return items[0].get("dead_letter")
    return entry.target.removeprefix("message:") if entry.target.startswith("message:") else None


def _mask_edits(entry: AuditEntry, detail: dict) -> dict:
    """An edit's body diff (in a resend's request and result) is body content of the dead letter
    it edited: wrapped, it shows as the caller may see that message's body (app.masking)."""
    owner = None
    for part in ("request", "result"):
        edit = detail.get(part, {}).get("edit") if isinstance(detail.get(part), dict) else None
        body = edit.get("body") if isinstance(edit, dict) else None
        if isinstance(body, dict):
            owner = owner or _edited_message(entry, detail)
            stand_in = {"masked": True, "size_before": body.get("size_before"), "size_after": body.get("size_after")}
            detail[part] = {**detail[part], "edit": {**edit, "body": Body(owner, body, masked=stand_in)}}
    return detail


def entry_dict(entry: AuditEntry) -> dict:
    """An entry as it leaves: message body content in its detail wrapped (app.masking)."""
    try:
        detail = _mask_edits(entry, json.loads(entry.detail))
    except ValueError:
        detail = {"raw": entry.detail}
    return {"id": entry.id, "at_ms": entry.at_ms, "actor": entry.actor, "role": entry.role, "action": entry.action,
            "target": entry.target, "reason": entry.reason, "outcome": entry.outcome,
            "outcome_detail": entry.outcome_detail, "detail": detail}


def read(sessions: sessionmaker[Session], wanted: AuditFilter, cursor: str | None = None,
         limit: int = 100) -> AuditPage:
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequestError(f"limit is between 1 and {MAX_LIMIT}")
    if cursor is not None and not (cursor.isdigit() and len(cursor) < 19):
        raise InvalidRequestError(f"malformed cursor {cursor[:40]!r}: use next_cursor of the previous page")
    query = select(AuditEntry).order_by(AuditEntry.id.desc()).limit(limit + 1)
    if cursor is not None:
        query = query.where(AuditEntry.id < int(cursor))
    if wanted.actor:
        query = query.where(AuditEntry.actor == wanted.actor)
    if wanted.action:
        query = query.where(AuditEntry.action == wanted.action)
    if wanted.target:
        if wanted.target.endswith(":"):
            query = query.where(AuditEntry.target.startswith(wanted.target, autoescape=True))
        else:
            query = query.where(AuditEntry.target == wanted.target)
    if wanted.since is not None:
        query = query.where(AuditEntry.at_ms >= wanted.since)
    if wanted.until is not None:
        query = query.where(AuditEntry.at_ms <= wanted.until)
    if wanted.message:
        resends = select(ResendItem.action_id).where(or_(ResendItem.dead_letter_id == wanted.message,
                                                         ResendItem.new_offset_msg_id == wanted.message))
        query = query.where(or_(AuditEntry.target == f"message:{wanted.message}", AuditEntry.id.in_(resends)))
    with sessions() as s:
        rows = list(s.scalars(query))
    more = len(rows) > limit
    rows = rows[:limit]
    return AuditPage([entry_dict(e) for e in rows], str(rows[-1].id) if more and rows else None)
