"""The search page: one box for any message id, key or queue address, with optional topic, time
window and page size; results page newest first with a cursor."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse

from app.deps import StoreDep
from app.pages import RendererDep
from app.pages.params import as_form_time, optional_int, optional_time_ms
from app.presenters import message_summary
from app.render import is_htmx, wants_json
from app.security import READ
from app.services import lookup
from app.services.errors import InvalidRequestError
from store.message_store import DEFAULT_QUERY_MAX, FAR_FUTURE_MS, MAX_QUERY_RESULTS

router = APIRouter(include_in_schema=False)

PAGE_MAX = 500
# Where the next page starts: below (store time, commit log offset) of the last message shown,
# and how many messages of that same millisecond have been shown so far.
CURSOR = re.compile(r"^(?P<ts>\d{1,19})-(?P<phys>\d{1,19})-(?P<shown>\d{1,5})$")


@dataclass(frozen=True)
class Cursor:
    store_timestamp: int
    phys_offset: int
    shown_in_ms: int

    def __str__(self) -> str:
        return f"{self.store_timestamp}-{self.phys_offset}-{self.shown_in_ms}"


def _cursor(text: str | None) -> Cursor | None:
    if not text:
        return None
    match = CURSOR.match(text)
    if not match:
        raise InvalidRequestError(f"malformed cursor {text[:40]!r}: use the Next link of a results page")
    return Cursor(int(match["ts"]), int(match["phys"]), int(match["shown"]))


def search_data(store, q: str | None, topic: str | None, begin: int | None, end: int | None, max_results: int,
                cursor: Cursor | None) -> dict:
    data: dict = {"q": q or "", "topic": topic or "", "begin": begin, "end": end, "max": max_results,
                  "messages": [], "truncated": False, "searched_topics": [], "recognised_as": None,
                  "next_cursor": None, "searched": False}
    if not q or not q.strip():
        return data
    window_end = end if end is not None else FAR_FUTURE_MS
    if cursor is not None:
        window_end = min(window_end, cursor.store_timestamp)
    # One more than a page tells whether there is a next page; the window still holds the
    # messages of the cursor's millisecond that were shown already.
    ask = min(MAX_QUERY_RESULTS, max_results + 1 + (cursor.shown_in_ms if cursor else 0))
    found = lookup.search(store, q, topic or None, begin or 0, window_end, ask)
    messages = found.messages
    if cursor is not None:
        below = (cursor.store_timestamp, cursor.phys_offset)
        messages = [m for m in messages if (m.store_timestamp, m.phys_offset) < below]
    more = len(messages) > max_results or (found.truncated and len(found.messages) >= ask and bool(messages))
    page = messages[:max_results]
    data.update(messages=[message_summary(m) for m in page], searched=True, recognised_as=found.recognised_as,
                searched_topics=found.searched_topics, truncated=more)
    if more and page:
        last = page[-1]
        shown = sum(1 for m in page if m.store_timestamp == last.store_timestamp)
        if cursor is not None and cursor.store_timestamp == last.store_timestamp:
            shown += cursor.shown_in_ms
        data["next_cursor"] = str(Cursor(last.store_timestamp, last.phys_offset, shown))
    return data


@router.get("/search", dependencies=[READ])
def search_page(request: Request, store: StoreDep, renderer: RendererDep, q: str | None = None,
                topic: str | None = None, begin: str | None = None, end: str | None = None,
                max: str | None = None, cursor: str | None = None):
    begin_ms = optional_time_ms(begin, "begin")
    end_ms = optional_time_ms(end, "end")
    if begin_ms is not None and end_ms is not None and begin_ms > end_ms:
        raise InvalidRequestError("the time window ends before it begins")
    max_results = optional_int(max, "max", low=1, high=PAGE_MAX) or DEFAULT_QUERY_MAX
    data = search_data(store, q, (topic or "").strip() or None, begin_ms, end_ms, max_results, _cursor(cursor))
    if (len(data.get("messages", [])) == 1 and cursor is None and not data.get("truncated")
            and not wants_json(request) and not is_htmx(request)):
        return RedirectResponse(f"/messages/{data['messages'][0]['offset_msg_id']}", status_code=303)
    params = {k: v for k, v in request.query_params.items() if k != "cursor"}
    next_cursor = data["next_cursor"]
    data["next_url"] = "/search?" + urlencode({**params, "cursor": next_cursor}) if next_cursor else None
    data["first_url"] = "/search?" + urlencode(params) if cursor else None
    form = {"begin": as_form_time(begin_ms), "end": as_form_time(end_ms)}
    return renderer.page(request, "search/search.html", {**data, "nav": "search", "form": form}, fragment="results")
