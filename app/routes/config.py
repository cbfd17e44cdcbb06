"""Broker configuration: GET and PUT /api/config/delay-levels."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header

from app.deps import ClockDep, ConfigLockDep, SessionsDep, StoreDep
from app.routes import error_responses
from app.schemas import DelayLevelsOut, DelayLevelsUpdate
from app.security import READ, Configurer
from app.services import config

router = APIRouter(tags=["configuration"])


@router.get("/api/config/delay-levels", dependencies=[READ], response_model=DelayLevelsOut)
def get_delay_levels(store: StoreDep, sessions: SessionsDep) -> DelayLevelsOut:
    """The delay level table in use and its version (0: never changed through mqlens)."""
    view = config.get_delay_levels(store, sessions)
    return DelayLevelsOut(levels=view.levels, version=view.version)


@router.put("/api/config/delay-levels", response_model=DelayLevelsOut, responses=error_responses(400, 409, 422))
def put_delay_levels(update: DelayLevelsUpdate, store: StoreDep, sessions: SessionsDep, clock: ClockDep,
                     actor: Configurer, lock: ConfigLockDep,
                     idempotency_key: Annotated[str | None, Header(description="Repeat-safe: a request "
                                                                   "repeated with the same key acts once.")] = None,
                     ) -> DelayLevelsOut:
    """Set the delay level table: a new version is recorded with an audit entry, then the store
    uses it. Setting the table in use changes nothing (same version)."""
    view = config.set_delay_levels(store, sessions, clock, update.levels, actor=actor, lock=lock,
                                   idempotency_key=idempotency_key, reason=update.reason)
    return DelayLevelsOut(levels=view.levels, version=view.version)
