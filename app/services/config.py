"""Broker configuration kept in versions: the delay level table."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session, sessionmaker

from app.models import AuditEntry, ConfigVersion
from app.roles import Principal
from app.services import audit
from app.services.errors import InvalidRequestError
from store.clock import Clock
from store.delay_levels import parse_delay_levels
from store.message_store import MessageStore

DELAY_LEVELS = "delay_levels"
SET_DELAY_LEVELS = "set_delay_levels"


@dataclass(frozen=True)
class DelayLevelsView:
    levels: str
    version: int  # 0: the table the store was opened with, never changed through mqlens


def latest(session: Session, kind: str) -> ConfigVersion | None:
    return session.scalars(select(ConfigVersion).where(ConfigVersion.kind == kind)
                           .order_by(ConfigVersion.version.desc()).limit(1)).first()


def stored_delay_levels(sessions: sessionmaker[Session]) -> str | None:
    """The newest delay level table set through mqlens (the store is opened with it), if any."""
    with sessions() as s:
        row = latest(s, DELAY_LEVELS)
        return None if row is None else row.value


def get_delay_levels(store: MessageStore, sessions: sessionmaker[Session]) -> DelayLevelsView:
    with sessions() as s:
        row = latest(s, DELAY_LEVELS)
        if row is not None:
            return DelayLevelsView(row.value, row.version)
    return DelayLevelsView(store.delay_levels.spec, 0)


def set_delay_levels(store: MessageStore, sessions: sessionmaker[Session], clock: Clock, levels: str, *,
                     actor: Principal, lock: threading.Lock, idempotency_key: str | None = None,
                     reason: str | None = None) -> DelayLevelsView:
    """Record a new version of the table (with its audit entry), then make the store use it.
    `lock` serializes changes, so the store always ends on the newest version."""
    try:
        parse_delay_levels(levels)
    except ValueError as exc:
        raise InvalidRequestError(str(exc)) from None

    def intent(s: Session, _entry_id: int) -> dict:
        version = (s.scalar(select(func.max(ConfigVersion.version)).where(ConfigVersion.kind == DELAY_LEVELS))
                   or 0) + 1
        s.add(ConfigVersion(kind=DELAY_LEVELS, version=version, value=levels, created_at_ms=clock.now_ms(),
                            actor=actor.name))
        return {"version": version}

    def act(decided: dict) -> None:
        store.set_delay_levels(levels)

    def undo(s: Session, decided: dict) -> None:
        s.execute(delete(ConfigVersion).where(ConfigVersion.kind == DELAY_LEVELS,
                                              ConfigVersion.version == decided["version"]))

    with lock:
        current = get_delay_levels(store, sessions)
        if current.levels == levels:
            return current
        done = audit.perform(sessions, clock, actor=actor, action=SET_DELAY_LEVELS, target=DELAY_LEVELS,
                             request={"levels": levels}, intent=intent, act=act, undo=undo,
                             idempotency_key=idempotency_key, reason=reason)
    return DelayLevelsView(levels, done.result["version"])


def reconcile_delay_levels(store: MessageStore, sessions: sessionmaker[Session]) -> list[str]:
    """At start-up: make the store use the newest recorded table (finishing a change that a
    crash cut between its record and its act) and settle the audit entries left pending.
    Returns what was done, for the log."""
    done: list[str] = []
    with sessions.begin() as s:
        newest = latest(s, DELAY_LEVELS)
        if newest is not None and store.delay_levels.spec != newest.value:
            store.set_delay_levels(newest.value)
            done.append(f"delay level table version {newest.version} applied to the store")

        def settle(entry: AuditEntry, detail: dict) -> audit.Settlement:
            version = detail.get("result", {}).get("version")
            recorded = version is not None and s.scalar(
                select(func.count()).select_from(ConfigVersion)
                .where(ConfigVersion.kind == DELAY_LEVELS, ConfigVersion.version == version))
            if not recorded:
                return audit.FAILED, "interrupted before it was recorded", None
            if newest is not None and version == newest.version:
                return audit.OK, "completed at start-up", None
            return audit.FAILED, f"interrupted; version {newest.version if newest else '?'} replaced it", None

        done += audit.settle_pending(s, SET_DELAY_LEVELS, settle)
    return done
