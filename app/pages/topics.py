"""Console pages: the topic list, one topic's queues, and the queue browser (pages by queue
offset, jumps to an offset or to a time)."""

from __future__ import annotations

from dataclasses import asdict
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Request

from app.deps import BackendDep, StoreDep
from app.pages import RendererDep
from app.pages.params import as_form_time, optional_int, optional_time_ms
from app.security import READ
from app.services.errors import InvalidRequestError
from app.services.queue_browser import QueuePage, browse_queue
from app.services.topic_overview import list_topic_rows, topic_detail, topic_kind

router = APIRouter(include_in_schema=False)

PAGE_MAX = 500
DEFAULT_PAGE = 20


def topic_url(topic: str) -> str:
    return f"/topics/{quote(topic, safe='')}"


def queue_url(topic: str, queue_id: int, offset: int | None = None, page_size: int | None = None) -> str:
    base = f"{topic_url(topic)}/queues/{queue_id}"
    params = {k: v for k, v in (("offset", offset), ("max", page_size)) if v is not None}
    return f"{base}?{urlencode(params)}" if params else base


def _notice(page: QueuePage) -> str | None:
    if page.past_end:
        if page.max_offset == 0:
            return "This queue has no messages yet."
        if page.at_ms is not None:
            return f"Nothing was stored at or after that time: no messages beyond offset {page.max_offset - 1}."
        return f"No messages beyond offset {page.max_offset - 1}: the queue ends there."
    return None


def queue_page_data(page: QueuePage) -> dict:
    def url(offset: int) -> str:
        return queue_url(page.topic, page.queue_id, offset, page.page_size)

    has_messages = page.max_offset > page.min_offset
    return {
        **asdict(page),
        "max": page.page_size,
        "kind": topic_kind(page.topic),
        "end_offset": page.end_offset,
        "expired": page.expired,
        "past_end": page.past_end,
        "notice": _notice(page),
        "prev_url": None if page.prev_offset is None else url(page.prev_offset),
        "next_url": None if page.next_offset is None else url(page.next_offset),
        "first_url": url(page.min_offset) if has_messages and page.offset != page.min_offset else None,
        "last_url": url(page.last_page_offset) if has_messages and page.offset != page.last_page_offset else None,
        "topic_url": topic_url(page.topic),
        "base_url": queue_url(page.topic, page.queue_id),
    }


@router.get("/topics", dependencies=[READ])
def topics_page(request: Request, backend: BackendDep, renderer: RendererDep):
    rows, problems = list_topic_rows(backend)
    return renderer.page(request, "topics/topics.html", {"nav": "topics", "topics": rows, "problems": problems})


@router.get("/topics/{topic}", dependencies=[READ])
def topic_page(topic: str, request: Request, backend: BackendDep, renderer: RendererDep):
    data = topic_detail(backend, topic, request.app.state.clock.now_ms())
    browsable = backend.kind == "embedded"  # the queue browser reads the store's files
    for q in data["queues"]:
        newest = max(q["min_offset"], q["max_offset"] - DEFAULT_PAGE)
        q["newest_page_url"] = queue_url(topic, q["queue_id"], newest) if q["messages"] and browsable else None
    return renderer.page(request, "topics/topic.html", {"nav": "topics", "topic": data, "browsable": browsable})


@router.get("/topics/{topic}/queues/{queue_id}", dependencies=[READ])
def queue_page(topic: str, queue_id: str, request: Request, store: StoreDep, renderer: RendererDep,
               offset: str | None = None, max: str | None = None, at: str | None = None):
    queue = optional_int(queue_id, "queue id")
    assert queue is not None  # a path segment is never empty
    start = optional_int(offset, "offset")
    at_ms = optional_time_ms(at, "at")
    if start is not None and at_ms is not None:
        raise InvalidRequestError("give either an offset or a time (at) to start from, not both")
    page_size = optional_int(max, "max", low=1, high=PAGE_MAX) or DEFAULT_PAGE
    page = browse_queue(store, topic, queue, start, at_ms, page_size)
    data = {**queue_page_data(page), "nav": "topics", "form": {"at": as_form_time(at_ms)}}
    return renderer.page(request, "topics/queue.html", data, fragment="rows")
