"""Consumer groups: GET /api/groups, GET and PUT /api/groups/{group}."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Header
from sqlalchemy.orm import Session, sessionmaker

from app.deps import BackendDep, ClockDep, SessionsDep, StoreDep, StoreIfAnyDep
from app.params import ConsumerGroupPath, GroupPath
from app.roles import Principal
from app.routes import error_responses
from app.schemas import (
    GroupOut,
    GroupResponse,
    GroupsResponse,
    GroupStateResponse,
    GroupUpdate,
    OffsetResetRequest,
    OffsetResetResponse,
    QueueProgressOut,
    QueueResetOut,
)
from app.security import READ, Configurer
from app.services import cluster_offset_reset, groups, offset_reset
from backend.protocol import Backend
from store.broker.metadata import GroupConfig, checked_group
from store.clock import Clock

router = APIRouter(tags=["groups"])


@router.get("/api/groups", dependencies=[READ], response_model=GroupsResponse, responses=error_responses())
def list_groups(backend: BackendDep) -> GroupsResponse:
    """The groups that were set up, by name (on a live cluster: every master broker's
    subscription groups, merged)."""
    listed = groups.list_groups(backend)
    return GroupsResponse(groups=[GroupOut.model_validate(g, from_attributes=True) for g in listed])


@router.get("/api/groups/{group}", dependencies=[READ], response_model=GroupStateResponse,
            responses=error_responses(400))
def get_group(group: GroupPath, backend: BackendDep) -> GroupStateResponse:
    """A group's settings, and its committed offset, max offset and lag on each queue (on a live
    cluster each queue names its broker, as `mqadmin consumerProgress`); a group nobody set up
    has the defaults (`configured: false`). Brokers that did not answer are named in `problems`."""
    checked_group(GroupConfig(group))
    settings = backend.get_group(group)
    progress = backend.group_progress(group)
    return GroupStateResponse(group=GroupOut.model_validate(settings, from_attributes=True),
                              queues=[QueueProgressOut(**asdict(q)) for q in progress.queues],
                              lag=sum(q.lag for q in progress.queues), complete=not progress.problems,
                              problems=progress.problems)


@router.put("/api/groups/{group}", response_model=GroupResponse, responses=error_responses(400, 403, 409, 422))
def put_group(group: ConsumerGroupPath, update: GroupUpdate, store: StoreDep, sessions: SessionsDep, clock: ClockDep,
              actor: Configurer, if_match: Annotated[str | None, Header(max_length=34)] = None) -> GroupResponse:
    """Create a group or change its settings (unset fields keep their value; bad values: 400).
    Needs the operator role; audited with the settings before and after."""
    changes = update.model_dump()
    expected = if_match.strip().strip('"') if if_match else changes.pop("expected_version")
    changes.pop("expected_version", None)
    view = groups.put_group(store, sessions, clock, group, actor=actor, expected_version=expected, **changes)
    return GroupResponse(group=GroupOut.model_validate(view, from_attributes=True))


@router.post("/api/groups/{group}/offsets/reset", response_model=OffsetResetResponse,
             responses=error_responses(400, 404, 409, 422, 424))
def reset_offsets(group: ConsumerGroupPath, body: OffsetResetRequest, store: StoreIfAnyDep, backend: BackendDep,
                  sessions: SessionsDep, clock: ClockDep, actor: Configurer) -> OffsetResetResponse:
    """Move the group's consumer offsets of a topic to its earliest or latest message, a time or
    an exact offset, on one queue or all. `dry_run` shows each queue's offset and lag before
    and after; otherwise it is applied (audited) and consumers, pull and pop, go on from there.
    On a live cluster each queue names its broker (`queue_id` names that queue on every broker);
    with consumers of the group online on the topic the brokers tell them (the whole topic, to
    the earliest, the latest or a time; one queue or an exact offset: 409), otherwise the
    committed offsets are written. Brokers that did not answer are named in `problems`."""
    if store is None:
        return _reset_on_cluster(group, body, backend, sessions, clock, actor)
    if body.dry_run:
        rows = offset_reset.plan(store, group, body.topic, body.to, body.queue_id)
    else:
        rows = offset_reset.reset(store, sessions, clock, group, body.topic, body.to, actor=actor,
                                  queue_id=body.queue_id, reason=body.reason)
    return OffsetResetResponse(applied=not body.dry_run, queues=[QueueResetOut(**asdict(r)) for r in rows])


def _reset_on_cluster(group: str, body: OffsetResetRequest, backend: Backend, sessions: sessionmaker[Session],
                      clock: Clock, actor: Principal) -> OffsetResetResponse:
    if body.dry_run:
        done = cluster_offset_reset.preview(backend, group, body.topic, body.to, body.queue_id)
    else:
        done = cluster_offset_reset.reset(backend, sessions, clock, group, body.topic, body.to, actor=actor,
                                          queue_id=body.queue_id, reason=body.reason)
    return OffsetResetResponse(applied=not body.dry_run, queues=[QueueResetOut(**asdict(r)) for r in done.queues],
                               complete=not done.problems, problems=done.problems,
                               consumers_online=done.consumers_online, through=done.through)
