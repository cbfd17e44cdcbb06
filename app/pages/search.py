"""The search page: one box for any message id, key or queue address, with optional topic, time
window and page size; results page newest first with a cursor."""

from __future__ import annotations

import re
from urllib.parse import urlencode

from fastapi import APIRouter, Request

from app.deps import StoreDep
from app.pages import RendererDep
from app.pages.params import as_form_time, optional_int, optional_time_ms
from app.presenters import message_summary
from app.services import lookup
from app.services.errors import InvalidRequestError
from store.message_store import DEFAULT_QUERY_MAX, FAR_FUTURE_MS, MAX_QUERY_RESULTS

router = APIRouter(include_in_schema=False)

PAGE_MAX = 500
CURSOR = re.compile(r"^(?P<ts>\d{1,19})-(?P<phys>\d{1,19})$")


def _cursor(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    match = CURSOR.match(text)
    if not match:
        raise InvalidRequestError(f"malformed cursor {text[:40]!r}: use the Next link of a results page")
    return int(match["ts"]), int(match["phys"])


def search_data(store, q: str | None, topic: str | None, begin: int | None, end: int | None, max_results: int,
                cursor: tuple[int, int] | None) -> dict:
    data: dict = {"q": q or "", "topic": topic or "", "begin": begin, "end": end, "max": max_results,
                  "messages": [], "truncated": False, "searched_topics": [], "recognised_as": None,
                  "next_cursor": None, "searched": False}
    if not q or not q.strip():
        return data
    window_end = end if end is not None else FAR_FUTURE_MS
    if cursor is not None:
        window_end = min(window_end, cursor[0])
    # Ask for a few more than a page: the cursor's millisecond may hold messages already shown.
    ask = min(MAX_QUERY_RESULTS, max_results * 2 + 1) if cursor else max_results + 1
    found = lookup.search(store, q, topic or None, begin or 0, window_end, ask)
    messages = found.messages
    if cursor is not None:
        messages = [m for m in messages if (m.store_timestamp, m.phys_offset) < cursor]
    more = len(messages) > max_results or (found.truncated and len(found.messages) >= ask and bool(messages))
    page = messages[:max_results]
    data.update(messages=[message_summary(m) for m in page], searched=True, recognised_as=found.recognised_as,
                searched_topics=found.searched_topics, truncated=more)
    if more and page:
        last = page[-1]
        data["next_cursor"] = f"{last.store_timestamp}-{last.phys_offset}"
    return data


@router.get("/search")
def search_page(request: Request, store: StoreDep, renderer: RendererDep, q: str | None = None,
                topic: str | None = None, begin: str | None = None, end: str | None = None,
                max: str | None = None, cursor: str | None = None):
    begin_ms = optional_time_ms(begin, "begin")
    end_ms = optional_time_ms(end, "end")
    if begin_ms is not None and end_ms is not None and begin_ms > end_ms:
        raise InvalidRequestError("the time window ends before it begins")
    max_results = optional_int(max, "max", low=1, high=PAGE_MAX) or DEFAULT_QUERY_MAX
    data = search_data(store, q, (topic or "").strip() or None, begin_ms, end_ms, max_results, _cursor(cursor))
    if data["next_cursor"]:
        params = {k: v for k, v in request.query_params.items() if k != "cursor"}
        data["next_url"] = "/search?" + urlencode({**params, "cursor": data["next_cursor"]})
    else:
        data["next_url"] = None
    data["first_url"] = ("/search?" + urlencode({k: v for k, v in request.query_params.items() if k != "cursor"})
                         if cursor else None)
    form = {"begin": as_form_time(begin_ms), "end": as_form_time(end_ms)}
    return renderer.page(request, "search/search.html", {**data, "nav": "search", "form": form}, fragment="results")
