"""Reading by queue offset: GET /api/topics/{topic}/queues/{queue_id}/messages, and
PUT /api/groups/{group}/offsets."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from app.deps import ClockDep, SessionsDep, StoreDep
from app.params import ConsumerGroupPath, GroupQuery, TopicPath
from app.presenters import message_dict
from app.routes import error_responses
from app.schemas import OffsetResponse, OffsetUpdate, QueueMessagesResponse
from app.security import READ, Configurer, Masking
from app.services import offset_reset, queue_view
from store.broker.pull import MAX_PULL_MESSAGES

router = APIRouter(tags=["consuming"])


@router.get("/api/topics/{topic}/queues/{queue_id}/messages", dependencies=[READ], response_model=QueueMessagesResponse,
            responses=error_responses(400, 404, 422))
def read_queue(
    topic: TopicPath, store: StoreDep, mask: Masking,
    queue_id: Annotated[int, Path(ge=0)],
    offset: Annotated[int | None, Query(ge=0, description="First queue offset to read; default: the group's "
                                        "committed offset, else the queue's first message.")] = None,
    max: Annotated[int, Query(ge=1, le=MAX_PULL_MESSAGES, description="Messages at most.")] = 32,
    tags: Annotated[str | None, Query(description="'*' or 'TagA || TagB'.")] = None,
    group: Annotated[GroupQuery, Query(description="Whose committed offset to start from.")] = None,
) -> dict:
    """Messages of one queue from an offset, tag-filtered, as a pull consumer sees them. Only a
    view: nothing is recorded as delivered and no offset moves (commit with PUT .../offsets).
    An offset outside the queue reads from its nearest end; dead-letter topics are refused (400)."""
    window = queue_view.read_queue(store, topic, queue_id, offset, max, tags, group)
    return mask({"ok": True, "topic": window.topic, "queue_id": window.queue_id, "offset": window.offset,
                 "next_offset": window.next_offset, "min_offset": window.min_offset, "max_offset": window.max_offset,
                 "messages": [message_dict(m) for m in window.messages]})


@router.put("/api/groups/{group}/offsets", response_model=OffsetResponse,
            responses=error_responses(400, 403, 404, 422))
def commit_offset(group: ConsumerGroupPath, body: OffsetUpdate, store: StoreDep, sessions: SessionsDep,
                  clock: ClockDep, actor: Configurer) -> OffsetResponse:
    """Set the next offset the group consumes from one queue (0 to the queue's max offset):
    the offset reset of one queue (`POST .../offsets/reset` with `{"offset": n}` and `queue_id`),
    so it needs the operator role, is audited, and pull consumers and receives (pop) both go on
    from there. Consumers that receive move the offset themselves as they acknowledge."""
    row = offset_reset.set_queue_offset(store, sessions, clock, group, body.topic, body.queue_id, body.offset,
                                        actor=actor, reason=body.reason)
    return OffsetResponse(group=group, topic=body.topic, queue_id=row.queue_id, offset=row.after,
                          previous=row.before)
