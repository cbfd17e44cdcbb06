"""The audit page: every operator action with filters, linked from the message page."""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import APIRouter, Request

from app.deps import SessionsDep
from app.pages import RendererDep
from app.pages.params import optional_int, optional_time_ms
from app.security import READ
from app.services import audit_log
from app.services.audit_log import AuditFilter
from app.services.errors import InvalidRequestError

router = APIRouter(include_in_schema=False)


@router.get("/audit", dependencies=[READ])
def audit_page(request: Request, sessions: SessionsDep, renderer: RendererDep, actor: str | None = None,
               action: str | None = None, target: str | None = None, message: str | None = None,
               since: str | None = None, until: str | None = None, cursor: str | None = None,
               limit: str | None = None):
    for name, value in (("actor", actor), ("action", action), ("target", target), ("message", message)):
        if value is not None and len(value) > 512:
            raise InvalidRequestError(f"{name} is longer than 512 characters")
    wanted = AuditFilter((actor or "").strip() or None, (action or "").strip() or None,
                         (target or "").strip() or None, (message or "").strip().upper() or None,
                         optional_time_ms(since, "Since"), optional_time_ms(until, "Until"))
    size = optional_int(limit, "Per page", low=1, high=audit_log.MAX_LIMIT) or 100
    page = audit_log.read(sessions, wanted, cursor or None, size)
    query = wanted.as_query()
    data = {"nav": "audit", "entries": page.entries, "filter": {**{k: "" for k in vars(wanted)}, **query,
                                                                "since": since or "", "until": until or ""},
            "next_url": "/audit?" + urlencode({**query, "cursor": page.next_cursor}) if page.next_cursor else None,
            "csv_url": "/api/audit.csv?" + urlencode(query)}
    return renderer.page(request, "audit/audit.html", data, fragment="entries")
