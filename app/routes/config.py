"""Broker configuration: the delay level table, its versions, rollback and a preview."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Header, Query

from app.deps import BackendDep, ClockDep, ConfigLockDep, SessionsDep, StoreDep, StoreIfAnyDep
from app.params import GroupQuery
from app.routes import error_responses
from app.schemas import (
    BrokerDelayLevelOut,
    DelayLevelsOut,
    DelayLevelsRollback,
    DelayLevelsUpdate,
    DelayLevelVersionOut,
    DelayLevelVersionsResponse,
)
from app.security import READ, Configurer
from app.services import broker_delay_levels, config
from app.services.errors import InvalidRequestError
from store.broker.metadata import DEFAULT_RETRY_MAX_TIMES

router = APIRouter(tags=["configuration"])

IdempotencyKey = Annotated[str | None, Header(max_length=255, description="Repeat-safe: a request repeated with "
                                              "the same key acts once.")]
IfMatch = Annotated[str | None, Header(max_length=32, description='The version the edit was made from, as "N".',
                                       json_schema_extra={"pattern": '^(?:W/)?"?[0-9]+"?$'})]


def _delay_levels_out(view: config.DelayLevelsView) -> DelayLevelsOut:
    return DelayLevelsOut(levels=view.levels, version=view.version, source=view.source or None)


def _brokers_delay_levels_out(view: broker_delay_levels.BrokerDelayLevels) -> DelayLevelsOut:
    return DelayLevelsOut(levels=view.levels, version=view.version, source="the brokers' messageDelayLevel",
                          brokers=[BrokerDelayLevelOut(broker=b.broker, address=b.address, levels=b.value,
                                                       error=b.error) for b in view.brokers],
                          differ=view.differ, complete=not view.problems, problems=view.problems,
                          applies_after_restart=True)


def expected(body_version: int | None, if_match: str | None) -> int | None:
    if if_match is None:
        return body_version
    text = if_match.strip().removeprefix("W/").strip('"')
    if not text.isdigit():
        raise InvalidRequestError('If-Match takes the version the edit was made from, such as "3"')
    return int(text)


@router.get("/api/config/delay-levels", response_model=DelayLevelsOut, response_model_exclude_none=True,
            dependencies=[READ], responses=error_responses(424))
def get_delay_levels(store: StoreIfAnyDep, backend: BackendDep, sessions: SessionsDep) -> DelayLevelsOut:
    """The delay level table in use and its version (0: never changed through mqlens). On a live
    cluster: each broker's messageDelayLevel, whether they differ, and the newest version
    recorded here for the cluster."""
    if store is None:
        return _brokers_delay_levels_out(broker_delay_levels.get_delay_levels(backend, sessions))
    view = config.get_delay_levels(store, sessions)
    return _delay_levels_out(view)


@router.put("/api/config/delay-levels", response_model=DelayLevelsOut, response_model_exclude_none=True,
            responses=error_responses(400, 409, 422, 424))
def put_delay_levels(update: DelayLevelsUpdate, store: StoreIfAnyDep, backend: BackendDep, sessions: SessionsDep,
                     clock: ClockDep, actor: Configurer, lock: ConfigLockDep, idempotency_key: IdempotencyKey = None,
                     if_match: IfMatch = None) -> DelayLevelsOut:
    """Set the delay level table: a new version is recorded with an audit entry, then the store
    uses it at once. Setting the table in use changes nothing (same version). With If-Match or
    expected_version, an edit of an older version is refused with 409 naming the current one.
    A table without levels the store has used is refused with 409 unless allow_dropped_levels.
    On a live cluster the table is written to every broker's messageDelayLevel (a recorded,
    audited version); RocketMQ 4.x applies it after a broker restart (`applies_after_restart`)."""
    if store is None:
        return _brokers_delay_levels_out(broker_delay_levels.set_delay_levels(
            backend, sessions, clock, update.levels, actor=actor, lock=lock, idempotency_key=idempotency_key,
            reason=update.reason, expected_version=expected(update.expected_version, if_match)))
    view = config.set_delay_levels(store, sessions, clock, update.levels, actor=actor, lock=lock,
                                   idempotency_key=idempotency_key, reason=update.reason,
                                   expected_version=expected(update.expected_version, if_match),
                                   allow_dropped_levels=update.allow_dropped_levels)
    return _delay_levels_out(view)


@router.get("/api/config/delay-levels/versions", response_model=DelayLevelVersionsResponse, dependencies=[READ],
            responses=error_responses())
def versions(store: StoreIfAnyDep, sessions: SessionsDep) -> DelayLevelVersionsResponse:
    """Every version, newest first: who, when, why, and what changed from the one before (on a
    live cluster: the versions written to its brokers through mqlens)."""
    if store is None:
        found = broker_delay_levels.history(sessions)
        current = found[0].version if found else 0
    else:
        found, current = config.history(sessions, store), config.get_delay_levels(store, sessions).version
    return DelayLevelVersionsResponse(current=current, versions=[DelayLevelVersionOut(**asdict(v)) for v in found])


@router.post("/api/config/delay-levels/rollback", response_model=DelayLevelsOut, response_model_exclude_none=True,
             responses=error_responses(400, 404, 409, 422, 424))
def rollback(body: DelayLevelsRollback, store: StoreIfAnyDep, backend: BackendDep, sessions: SessionsDep,
             clock: ClockDep, actor: Configurer, lock: ConfigLockDep, idempotency_key: IdempotencyKey = None,
             if_match: IfMatch = None) -> DelayLevelsOut:
    """Make an earlier version's table current again (itself a new version; on a live cluster
    written to the brokers, applied after their restart)."""
    if store is None:
        return _brokers_delay_levels_out(broker_delay_levels.rollback(
            backend, sessions, clock, body.version, actor=actor, lock=lock, reason=body.reason,
            expected_version=expected(body.expected_version, if_match), idempotency_key=idempotency_key))
    view = config.rollback(store, sessions, clock, body.version, actor=actor, lock=lock, reason=body.reason,
                           expected_version=expected(body.expected_version, if_match),
                           allow_dropped_levels=body.allow_dropped_levels, idempotency_key=idempotency_key)
    return _delay_levels_out(view)


@router.get("/api/config/delay-levels/preview", dependencies=[READ], responses=error_responses(400, 422))
def preview(store: StoreDep, levels: Annotated[str, Query(max_length=4000)],
            group: GroupQuery = None,
            max_reconsume_times: Annotated[int | None, Query(ge=0, le=10_000)] = None) -> dict:
    """What a table would do: each level's delay and messages waiting there now, the retry
    schedule for a group (its max reconsume times, or the one given), when a message would reach
    the dead-letter queue, and warnings. An invalid table answers valid: false and why."""
    limit = max_reconsume_times
    if limit is None:
        limit = store.metadata.group(group).max_reconsume_times if group else DEFAULT_RETRY_MAX_TIMES
    return {"ok": True, "group": group, **config.preview(store, levels, limit)}
