"""The dead-letter inbox for scripts: GET /api/dlq/{group}/messages (and /api/dlq/messages for
every group), with exports as CSV and NDJSON."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import StreamingResponse

from app.deps import BackendDep, ClockDep, SessionsDep, StoreDep
from app.params import GroupPath
from app.routes import error_responses
from app.schemas import DeadLettersResponse
from app.security import READ
from app.services import dead_letter_inbox, dead_letters
from app.services.dead_letters import MAX_LIMIT, DeadLetter, Filter

router = APIRouter(tags=["dead letters"], dependencies=[READ])

EXPORT_COLUMNS = ("offset_msg_id", "unique_key", "group", "topic", "original_topic", "keys", "tags", "reason",
                  "reconsume_times", "store_timestamp", "age_ms", "expires_at", "state", "resent_at_ms",
                  "resent_by", "new_offset_msg_id", "copy_state")


def inbox_filter(
    begin: Annotated[int, Query(ge=0, description="Stored at or after (epoch ms).")] = 0,
    end: Annotated[int | None, Query(ge=0, description="Stored at or before (epoch ms).")] = None,
    key: Annotated[str | None, Query(max_length=255, description="A business key or the unique key.")] = None,
    tag: Annotated[str | None, Query(max_length=255)] = None,
    reason: Annotated[str | None, Query(max_length=255, description="Text the failure reason contains.")] = None,
    state: Annotated[str | None, Query(description="waiting, resent or failed_again.",
                                       json_schema_extra={"enum": list(dead_letters.STATES)})] = None,
) -> Filter:
    return Filter(begin, end, key or None, tag or None, reason or None, state or None)


FilterDep = Annotated[Filter, Depends(inbox_filter)]
Cursor = Annotated[str | None, Query(max_length=64, description="next_cursor of the previous page.",
                                     json_schema_extra={"pattern": dead_letters.CURSOR.pattern})]
Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT)]


def _answer(found: dead_letters.Inbox) -> dict:
    return {"ok": True, "group": found.group, "messages": [asdict(m) for m in found.messages],
            "next_cursor": found.next_cursor, "total": found.total, "counts": found.counts,
            "oldest_waiting_ms": found.oldest_waiting_ms, "truncated": found.truncated,
            "complete": not found.problems, "problems": found.problems}


@router.get("/api/dlq/messages", response_model=DeadLettersResponse, responses=error_responses(400, 422))
def every_group(request: Request, backend: BackendDep, sessions: SessionsDep, clock: ClockDep, wanted: FilterDep,
                cursor: Cursor = None, limit: Limit = 50) -> dict:
    """Dead letters of every group, newest first."""
    return _answer(dead_letter_inbox.inbox(backend, sessions, clock, request.app.state.dead_letters, None, wanted,
                                      cursor, limit))


@router.get("/api/dlq/{group}/messages", response_model=DeadLettersResponse, responses=error_responses(400, 404, 422))
def one_group(group: GroupPath, request: Request, backend: BackendDep, sessions: SessionsDep, clock: ClockDep,
              wanted: FilterDep, cursor: Cursor = None, limit: Limit = 50) -> dict:
    """A group's dead letters, newest first, with why each failed, when retention deletes it and
    what became of a resend. An unknown group is a 404. On a live cluster the queues are read
    from the brokers a page at a time: the reason and state filters need the embedded store (400),
    `total` counts every dead letter held (`truncated`: an upper bound of those the filter matches),
    and brokers that did not answer are named in `problems` (`complete`: false)."""
    return _answer(dead_letter_inbox.inbox(backend, sessions, clock, request.app.state.dead_letters, group, wanted,
                                      cursor, limit))


def _flat(row: DeadLetter) -> dict:
    resend = row.resend or {}
    return {"offset_msg_id": row.offset_msg_id, "unique_key": row.unique_key, "group": row.group,
            "topic": row.topic, "original_topic": row.original_topic, "keys": " ".join(row.keys), "tags": row.tags,
            "reason": row.reason, "reconsume_times": row.reconsume_times, "store_timestamp": row.store_timestamp,
            "age_ms": row.age_ms, "expires_at": row.expires_at, "state": row.state,
            "resent_at_ms": resend.get("at_ms"), "resent_by": resend.get("actor"),
            "new_offset_msg_id": resend.get("new_offset_msg_id"), "copy_state": resend.get("copy_state")}


def _all_rows(request: Request, store, sessions, clock, group: str, wanted: Filter) -> Iterator[DeadLetter]:
    return dead_letters.matching_rows(store, sessions, clock, request.app.state.dead_letters, group, wanted)


def _csv_safe(value: object) -> object:
    """A cell a spreadsheet would read as a formula is kept as text."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


@router.get("/api/dlq/{group}/messages.csv", response_class=StreamingResponse, responses=error_responses(400, 404))
def export_csv(group: GroupPath, request: Request, store: StoreDep, sessions: SessionsDep, clock: ClockDep,
               wanted: FilterDep) -> StreamingResponse:
    """Every dead letter the filter matches, as CSV (one header row)."""
    rows = _all_rows(request, store, sessions, clock, group, wanted)
    first = next(rows, None)  # an unknown group fails here, before the answer starts

    def lines() -> Iterator[str]:
        out = io.StringIO()
        writer = csv.DictWriter(out, EXPORT_COLUMNS)
        writer.writeheader()
        for row in ([first] if first else []):
            writer.writerow({k: _csv_safe(v) for k, v in _flat(row).items()})
        for row in rows:
            writer.writerow({k: _csv_safe(v) for k, v in _flat(row).items()})
            if out.tell() > 64 * 1024:
                yield out.getvalue()
                out.seek(0)
                out.truncate()
        yield out.getvalue()

    return StreamingResponse(lines(), media_type="text/csv; charset=utf-8",
                             headers={"Content-Disposition": f'attachment; filename="dead-letters-{_file(group)}.csv"'})


@router.get("/api/dlq/{group}/messages.ndjson", response_class=StreamingResponse,
            responses=error_responses(400, 404))
def export_ndjson(group: GroupPath, request: Request, store: StoreDep, sessions: SessionsDep, clock: ClockDep,
                  wanted: FilterDep) -> StreamingResponse:
    """Every dead letter the filter matches, one JSON object a line."""
    rows = _all_rows(request, store, sessions, clock, group, wanted)
    first = next(rows, None)

    def lines() -> Iterator[str]:
        for row in ([first] if first else []):
            yield json.dumps(asdict(row)) + "\n"
        for row in rows:
            yield json.dumps(asdict(row)) + "\n"

    return StreamingResponse(lines(), media_type="application/x-ndjson",
                             headers={"Content-Disposition":
                                      f'attachment; filename="dead-letters-{_file(group)}.ndjson"'})


def _file(group: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in group)[:100]
