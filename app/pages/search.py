"""The search page: one box for any message id, key or queue address, with optional topic, time
window and page size; results page newest first with a cursor."""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse

from app.deps import BackendDep
from app.pages import RendererDep
from app.pages.params import as_form_time, optional_int, optional_time_ms
from app.presenters import message_summary
from app.render import is_htmx, wants_json
from app.security import READ
from app.services import search as search_service
from app.services.errors import InvalidRequestError
from app.services.search import Cursor, parse_cursor
from store.message_store import DEFAULT_QUERY_MAX

router = APIRouter(include_in_schema=False)

PAGE_MAX = 500


def search_data(backend, q: str | None, topic: str | None, begin: int | None, end: int | None, max_results: int,
                cursor: Cursor | None) -> dict:
    data: dict = {"q": q or "", "topic": topic or "", "begin": begin, "end": end, "max": max_results,
                  "messages": [], "truncated": False, "searched_topics": [], "recognised_as": None,
                  "next_cursor": None, "searched": False, "problems": []}
    if not q or not q.strip():
        return data
    found = search_service.search_page(backend, q, topic, begin, end, max_results, cursor)
    data.update(messages=[message_summary(m) for m in found.messages], searched=True,
                recognised_as=found.recognised_as, searched_topics=found.searched_topics, truncated=found.more,
                next_cursor=found.next_cursor, problems=found.problems)
    return data


@router.get("/search", dependencies=[READ])
def search_page(request: Request, backend: BackendDep, renderer: RendererDep, q: str | None = None,
                topic: str | None = None, begin: str | None = None, end: str | None = None,
                max: str | None = None, cursor: str | None = None):
    begin_ms = optional_time_ms(begin, "begin")
    end_ms = optional_time_ms(end, "end")
    if begin_ms is not None and end_ms is not None and begin_ms > end_ms:
        raise InvalidRequestError("the time window ends before it begins")
    max_results = optional_int(max, "max", low=1, high=PAGE_MAX) or DEFAULT_QUERY_MAX
    data = search_data(backend, q, (topic or "").strip() or None, begin_ms, end_ms, max_results, parse_cursor(cursor))
    if (len(data.get("messages", [])) == 1 and cursor is None and not data.get("truncated")
            and not data["problems"]
            and not wants_json(request) and not is_htmx(request)):
        return RedirectResponse(f"/messages/{data['messages'][0]['offset_msg_id']}", status_code=303)
    params = {k: v for k, v in request.query_params.items() if k != "cursor"}
    next_cursor = data["next_cursor"]
    data["next_url"] = "/search?" + urlencode({**params, "cursor": next_cursor}) if next_cursor else None
    data["first_url"] = "/search?" + urlencode(params) if cursor else None
    form = {"begin": as_form_time(begin_ms), "end": as_form_time(end_ms)}
    return renderer.page(request, "search/search.html", {**data, "nav": "search", "form": form}, fragment="results")
