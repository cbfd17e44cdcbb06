"""The audit log for scripts: GET /api/audit and GET /api/audit.csv."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from typing import Annotated

from fastapi import APIRouter, Depends, Query
from fastapi.responses import Response

from app.deps import SessionsDep
from app.routes import error_responses
from app.security import READ, Masking
from app.services import audit_log
from app.services.audit_log import MAX_LIMIT, AuditFilter

router = APIRouter(tags=["audit"], dependencies=[READ])

MAX_SQL_INTEGER = 2**63 - 1  # what the database compares a time with
CSV_COLUMNS = ("id", "at", "at_ms", "actor", "role", "action", "target", "reason", "outcome", "outcome_detail",
               "detail")


def audit_filter(
    actor: Annotated[str | None, Query(max_length=255)] = None,
    action: Annotated[str | None, Query(max_length=64)] = None,
    target: Annotated[str | None, Query(max_length=512, description="Exact, or a prefix ending in ':' "
                                        "(message:, group:, topic:, dlq:, user:, token:).")] = None,
    message: Annotated[str | None, Query(max_length=64, description="Entries about this message (offset id): "
                                         "reveals, resends of it and resends that made it.")] = None,
    since: Annotated[int | None, Query(ge=0, le=MAX_SQL_INTEGER, description="At or after (epoch ms).")] = None,
    until: Annotated[int | None, Query(ge=0, le=MAX_SQL_INTEGER, description="At or before (epoch ms).")] = None,
) -> AuditFilter:
    return AuditFilter(actor or None, action or None, target or None, (message or "").upper() or None, since, until)


FilterDep = Annotated[AuditFilter, Depends(audit_filter)]


def iso_utc(epoch_ms: int) -> str:
    """ISO 8601 in UTC to the millisecond (2026-11-27T00:40:00.000Z); a time outside years 1-9999 as is."""
    try:
        moment = dt.datetime.fromtimestamp(epoch_ms / 1000, tz=dt.UTC)
    except (OverflowError, OSError, ValueError):
        return str(epoch_ms)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{epoch_ms % 1000:03d}Z"


@router.get("/api/audit", responses=error_responses(400, 422))
def entries(sessions: SessionsDep, wanted: FilterDep, mask: Masking,
            cursor: Annotated[str | None, Query(max_length=20, json_schema_extra={"pattern": "^[0-9]{1,18}$"},
                                                description="next_cursor of the previous page.")] = None,
            limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 100) -> dict:
    """Every operator action, newest first: who (and their role), when, what, on what, why,
    the details (before/after, the list of a bulk action) and the outcome."""
    page = audit_log.read(sessions, wanted, cursor, limit)
    return {"ok": True, "entries": mask(page.entries), "next_cursor": page.next_cursor}


@router.get("/api/audit.csv", response_class=Response, responses=error_responses(400, 422))
def entries_csv(sessions: SessionsDep, wanted: FilterDep, mask: Masking) -> Response:
    """The filtered log as CSV (details as JSON in one column)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, CSV_COLUMNS)
    writer.writeheader()
    cursor = None
    while True:
        page = audit_log.read(sessions, wanted, cursor, MAX_LIMIT)
        for entry in mask(page.entries):
            row = {**entry, "at": iso_utc(entry["at_ms"]), "detail": json.dumps(entry["detail"])}
            writer.writerow({k: ("'" + v if isinstance(v, str) and v[:1] in "=+-@" else v) for k, v in row.items()})
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    return Response(out.getvalue(), media_type="text/csv; charset=utf-8",
                    headers={"Content-Disposition": 'attachment; filename="audit.csv"'})
