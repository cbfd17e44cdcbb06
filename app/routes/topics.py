"""Topics: GET /api/topics, PUT /api/topics/{topic}."""

from __future__ import annotations

from fastapi import APIRouter

from app.deps import BackendDep, ClockDep, SessionsDep, StoreDep
from app.params import TopicPath
from app.routes import error_responses
from app.schemas import TopicOut, TopicResponse, TopicsResponse, TopicUpdate
from app.security import READ, Configurer
from app.services import topics

router = APIRouter(tags=["topics"])


@router.get("/api/topics", dependencies=[READ], response_model=TopicsResponse, responses=error_responses())
def list_topics(backend: BackendDep) -> TopicsResponse:
    """Every topic (system topics too) with its queue count, permission and per-queue offsets
    (on a live cluster each queue names its broker). Brokers that did not answer in time are
    named in `problems` and `complete` is false; their topics' queues are missing."""
    listing = topics.list_topics(backend)
    return TopicsResponse(topics=[TopicOut.model_validate(t, from_attributes=True) for t in listing.topics],
                          complete=not listing.problems, problems=listing.problems)


@router.put("/api/topics/{topic}", response_model=TopicResponse, responses=error_responses(400, 403, 422))
def put_topic(topic: TopicPath, update: TopicUpdate, store: StoreDep, sessions: SessionsDep, clock: ClockDep,
              actor: Configurer) -> TopicResponse:
    """Create a topic or change its queue count or permission (unset fields keep their value).
    Needs the operator role; audited with the settings before and after."""
    view, created = topics.put_topic(store, sessions, clock, topic, actor=actor, queues=update.queues,
                                     perm=update.perm, reason=update.reason)
    return TopicResponse(created=created, topic=TopicOut.model_validate(view, from_attributes=True))
