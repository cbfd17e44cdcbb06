"""Finding messages: by offset id, key, unique key, queue offset, and the search box."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from app.deps import BackendDep, ClockDep, SessionsDep
from app.params import KeyQuery, OffsetMsgIdPath, SearchQuery, TopicPath, TopicQuery, UniqueKeyPath
from app.presenters import message_dict
from app.routes import error_responses
from app.schemas import FoundResponse, MessageResponse, RevealRequest
from app.security import READ, Masking, Reader
from app.services import lookup, reveal
from app.services.lookup import Found
from app.services.search import CURSOR as search_cursor
from app.services.search import parse_cursor, search_page
from store.message_store import DEFAULT_QUERY_MAX, FAR_FUTURE_MS, MAX_QUERY_RESULTS

router = APIRouter(tags=["finding messages"])

TopicFilter = TopicQuery
Begin = Annotated[int, Query(ge=0, description="Stored at or after (epoch ms).")]
End = Annotated[int, Query(ge=0, description="Stored at or before (epoch ms).")]
BrokerQuery = Annotated[str | None, Query(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$",
                                          description="The broker holding the queue (a live cluster).")]
Max = Annotated[int, Query(ge=1, le=MAX_QUERY_RESULTS, description="Messages at most.")]


def _found(found: Found, mask: Masking) -> dict:
    return mask({"ok": True, "messages": [message_dict(m) for m in found.messages], "truncated": found.truncated,
                 "searched_topics": found.searched_topics, "recognised_as": found.recognised_as or None,
                 "complete": not found.problems, "problems": found.problems})


@router.get("/api/messages/by-id/{offset_msg_id}", dependencies=[READ], response_model=MessageResponse,
            responses=error_responses(400, 404))
def by_id(offset_msg_id: OffsetMsgIdPath, backend: BackendDep, mask: Masking) -> dict:
    """The message an offset message id names (32 or 56 hex characters)."""
    msg = lookup.by_offset_id(backend, offset_msg_id)
    return mask({"ok": True, "message": message_dict(msg)})


@router.post("/api/messages/{offset_msg_id}/reveal", response_model=MessageResponse,
             responses=error_responses(400, 404, 422))
def reveal_body(offset_msg_id: OffsetMsgIdPath, backend: BackendDep, sessions: SessionsDep, clock: ClockDep,
                reader: Reader, mask: Masking, body: RevealRequest | None = None) -> dict:
    """The message with its body, for a role that sees bodies masked (viewer): the reveal is an
    audit row, and the body stays shown to this caller for 15 minutes."""
    msg = lookup.by_offset_id(backend, offset_msg_id)
    if not mask.shows(msg.offset_msg_id):
        reveal.reveal(sessions, clock, msg, actor=reader, reason=body.reason if body else None)
    return mask({"ok": True, "message": message_dict(msg)})


@router.get("/api/messages/by-key", dependencies=[READ], response_model=FoundResponse,
            responses=error_responses(400, 404, 422))
def by_key(backend: BackendDep, mask: Masking, key: KeyQuery,
           topic: TopicFilter = None, begin: Begin = 0, end: End = FAR_FUTURE_MS, max: Max = DEFAULT_QUERY_MAX) -> dict:
    """Messages whose keys hold `key`, newest first."""
    return _found(lookup.by_key(backend, key, topic, begin, end, max), mask)


@router.get("/api/messages/by-unique-key/{unique_key}", dependencies=[READ], response_model=FoundResponse,
            responses=error_responses(400, 404, 422))
def by_unique_key(unique_key: UniqueKeyPath, backend: BackendDep, mask: Masking, topic: TopicFilter = None,
                  begin: Begin = 0, end: End = FAR_FUTURE_MS, max: Max = DEFAULT_QUERY_MAX) -> dict:
    """Every copy of a message (original, scheduled, retry, dead letter), newest first."""
    return _found(lookup.by_unique_key(backend, unique_key, topic, begin, end, max), mask)


@router.get("/api/topics/{topic}/queues/{queue_id}/messages/{queue_offset}", dependencies=[READ],
            response_model=MessageResponse,
            responses=error_responses(400, 404, 422))
def by_queue_offset(topic: TopicPath, backend: BackendDep, mask: Masking, queue_id: Annotated[int, Path(ge=0)],
                    queue_offset: Annotated[int, Path(ge=0)], broker: BrokerQuery = None) -> dict:
    """The message at one queue offset. On a live cluster whose topic is on several brokers,
    `broker` names the queue's broker (400 without it)."""
    msg = lookup.by_queue_offset(backend, topic, queue_id, queue_offset, broker)
    return mask({"ok": True, "message": message_dict(msg)})


@router.get("/api/search", dependencies=[READ], response_model=FoundResponse, responses=error_responses(400, 404, 422))
def search(backend: BackendDep, mask: Masking,
           q: SearchQuery,
           topic: TopicFilter = None, begin: Begin = 0, end: End = FAR_FUTURE_MS, max: Max = DEFAULT_QUERY_MAX,
           cursor: Annotated[str | None, Query(max_length=64, description="next_cursor of the page before.",
                                               json_schema_extra={"pattern": search_cursor.pattern})] = None,
           ) -> dict:
    """One search box: recognises what it was given and looks it up, newest first, a page of
    `max` at a time (`next_cursor` leads to the next; null on the last page). An unknown topic is 404."""
    page = search_page(backend, q, topic, begin, end, max, parse_cursor(cursor))
    return mask({"ok": True, "messages": [message_dict(m) for m in page.messages], "truncated": page.more,
                 "searched_topics": page.searched_topics, "recognised_as": page.recognised_as or None,
                 "next_cursor": page.next_cursor, "complete": not page.problems, "problems": page.problems})
