"""Consumer groups: GET /api/groups, GET and PUT /api/groups/{group}."""

from __future__ import annotations

from fastapi import APIRouter

from app.deps import ClockDep, SessionsDep, StoreDep
from app.routes import error_responses
from app.schemas import GroupOut, GroupResponse, GroupsResponse, GroupUpdate
from app.security import READ, Configurer
from app.services import groups

router = APIRouter(tags=["groups"])


@router.get("/api/groups", dependencies=[READ], response_model=GroupsResponse)
def list_groups(store: StoreDep) -> GroupsResponse:
    """The groups that were set up, by name."""
    return GroupsResponse(groups=[GroupOut.model_validate(g, from_attributes=True) for g in groups.list_groups(store)])


@router.get("/api/groups/{group}", dependencies=[READ], response_model=GroupResponse, responses=error_responses(400))
def get_group(group: str, store: StoreDep) -> GroupResponse:
    """A group's settings; a group nobody set up has the defaults (`configured: false`)."""
    return GroupResponse(group=GroupOut.model_validate(groups.get_group(store, group), from_attributes=True))


@router.put("/api/groups/{group}", response_model=GroupResponse, responses=error_responses(400, 403, 422))
def put_group(group: str, update: GroupUpdate, store: StoreDep, sessions: SessionsDep, clock: ClockDep,
              actor: Configurer) -> GroupResponse:
    """Create a group or change its settings (unset fields keep their value; bad values: 400).
    Needs the operator role; audited with the settings before and after."""
    view = groups.put_group(store, sessions, clock, group, actor=actor, **update.model_dump())
    return GroupResponse(group=GroupOut.model_validate(view, from_attributes=True))
