"""Content search: POST /api/content-searches starts a search of message bodies and properties,
GET follows it (progress and the hits found so far), cancel stops it. The embedded store only."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request

from app.deps import ClockDep, SessionsDep, StoreDep
from app.presenters import content_search_dict
from app.routes import error_responses
from app.schemas import ContentSearchCreate, ContentSearchResponse
from app.security import Masking, Reader
from app.services.content_search import ContentSearches, LogSnapshot, SearchRequest, owner_of, start_audited

router = APIRouter(tags=["content search"])

SearchId = Annotated[str, Path(pattern=r"^[0-9a-f]{16}$", description="The search's id.")]


def searches(request: Request) -> ContentSearches:
    return request.app.state.content_searches


def request_of(body: ContentSearchCreate) -> SearchRequest:
    return SearchRequest(body.text, body.regex, body.in_body, body.in_properties, tuple(body.topics), body.begin,
                         body.end, body.max_hits, body.max_seconds)


@router.post("/api/content-searches", response_model=ContentSearchResponse, status_code=202,
             responses=error_responses(400, 409, 422))
def start(body: ContentSearchCreate, request: Request, store: StoreDep, sessions: SessionsDep, clock: ClockDep,
          reader: Reader, mask: Masking) -> dict:
    """Start a search of the commit log for messages whose body or a property value holds `text`
    (or matches it as a regular expression), stored within [begin, end] in `topics`. It runs in a
    process of its own; follow it with GET. At most two run at once (409). A viewer may search:
    the body snippets of the hits come back masked. Each search is an audit row (search_contents).
    409 on a live cluster."""
    view = start_audited(searches(request), sessions, clock, LogSnapshot.of(store.commitlog), request_of(body),
                         reader)
    return mask({"ok": True, "search": content_search_dict(view)})


@router.get("/api/content-searches/{search_id}", response_model=ContentSearchResponse,
            responses=error_responses(404, 422))
def get(search_id: SearchId, request: Request, reader: Reader, mask: Masking) -> dict:
    """A search's state, progress and the messages found so far (the first ones while it still runs).
    Only its starter sees it; it is kept in the server's memory for a while after it ends."""
    return mask({"ok": True, "search": content_search_dict(searches(request).get(search_id, owner_of(reader)))})


@router.post("/api/content-searches/{search_id}/cancel", response_model=ContentSearchResponse,
             responses=error_responses(404, 422))
def cancel(search_id: SearchId, request: Request, reader: Reader, mask: Masking) -> dict:
    """Stop a running search (its process is ended at once); what it found so far stays. Cancelling a
    search that has ended changes nothing."""
    view = searches(request).cancel(search_id, owner_of(reader))
    return mask({"ok": True, "search": content_search_dict(view)})
