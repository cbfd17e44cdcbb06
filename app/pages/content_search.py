"""The content search pages: a form to search message bodies and properties, and one search's
live progress, its hits as they are found, and cancel."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse

from app.deps import ClockDep, SessionsDep, StoreDep
from app.pages import RendererDep
from app.pages.params import as_form_time, optional_int, optional_time_ms
from app.presenters import content_search_dict
from app.render import is_htmx
from app.routes.content_search import SearchId, searches
from app.security import Reader
from app.services import content_search
from app.services.content_search import LogSnapshot, SearchRequest, owner_of, start_audited

router = APIRouter(include_in_schema=False)

HTMX_STOP_POLLING = 286
WHERE = {"both": (True, True), "body": (True, False), "properties": (False, True)}
FormText = Annotated[str | None, Form(max_length=255)]
LIMITS = {"max_text": content_search.MAX_TEXT, "max_hits": content_search.MAX_HITS,
          "default_hits": content_search.DEFAULT_HITS, "max_seconds": content_search.MAX_SECONDS,
          "default_seconds": content_search.DEFAULT_SECONDS, "max_topics": content_search.MAX_SEARCH_TOPICS}


@router.get("/content-search")
def form_page(request: Request, store: StoreDep, reader: Reader, renderer: RendererDep):
    return renderer.page(request, "search/content.html", {"nav": "search", "search": None, "limits": LIMITS,
                                                          "form": {"begin": "", "end": ""}})


@router.post("/content-search")
def start_search(request: Request, store: StoreDep, sessions: SessionsDep, clock: ClockDep, reader: Reader,
                 text: Annotated[str, Form(min_length=1, max_length=content_search.MAX_TEXT)],
                 regex: Annotated[bool, Form()] = False,
                 where: Annotated[str, Form(pattern="^(both|body|properties)$")] = "both",
                 topics: Annotated[str | None, Form(max_length=4000)] = None, begin: FormText = None,
                 end: FormText = None, max_hits: FormText = None, max_seconds: FormText = None):
    in_body, in_properties = WHERE[where]
    search_request = SearchRequest(
        text, regex, in_body, in_properties, tuple((topics or "").replace(",", " ").split()),
        optional_time_ms(begin, "From"), optional_time_ms(end, "To"),
        optional_int(max_hits, "Hits at most", low=1, high=content_search.MAX_HITS) or content_search.DEFAULT_HITS,
        optional_int(max_seconds, "Seconds at most", low=1, high=content_search.MAX_SECONDS)
        or content_search.DEFAULT_SECONDS)
    view = start_audited(searches(request), sessions, clock, LogSnapshot.of(store.commitlog), search_request, reader)
    return RedirectResponse(f"/content-search/{view.id}", status_code=303)


@router.get("/content-search/{search_id}")
def search_page(search_id: SearchId, request: Request, store: StoreDep, reader: Reader, renderer: RendererDep):
    view = searches(request).get(search_id, owner_of(reader))
    # htmx stops polling on 286: a search that has ended has nothing new to show
    status = HTMX_STOP_POLLING if is_htmx(request) and not view.active else 200
    return renderer.page(request, "search/content.html",
                         {"nav": "search", "search": content_search_dict(view), "limits": LIMITS,
                          "form": {"begin": as_form_time(view.begin_ms), "end": as_form_time(view.end_ms)}},
                         fragment="progress", status=status)


@router.post("/content-search/{search_id}/cancel")
def cancel_search(search_id: SearchId, request: Request, store: StoreDep, reader: Reader):
    searches(request).cancel(search_id, owner_of(reader))
    return RedirectResponse(f"/content-search/{search_id}", status_code=303)
