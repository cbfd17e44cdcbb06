"""The delay level table of a live cluster's brokers (their `messageDelayLevel`): read from every
broker, written to all of them as a recorded, audited version, rolled back the same way. RocketMQ
4.x reads the table when a broker starts: a table written now applies after each broker's restart.

The versions are kept in the operator database apart from the embedded store's (kind
"cluster_delay_levels"); version 0 is the brokers' table before the first change made here."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session, sessionmaker

from app.models import ConfigVersion
from app.roles import Principal
from app.services import audit
from app.services.config import VersionView, checked_levels, latest, refuse_stale_version, version_views
from app.services.errors import NotFoundError
from backend.protocol import DELAY_LEVEL_SETTING, Backend, BackendUnavailable, BrokerSettingValue
from store.clock import Clock

CLUSTER_DELAY_LEVELS = "cluster_delay_levels"
SET_BROKER_DELAY_LEVELS = "set_broker_delay_levels"
ROLLBACK_BROKER_DELAY_LEVELS = "rollback_broker_delay_levels"
BROKERS_TABLE_BEFORE = "the brokers' table before any change here"


@dataclass(frozen=True)
class BrokerDelayLevels:
    levels: str  # the brokers' table; the first broker's when they differ
    version: int  # the newest version recorded here; 0: never changed through mqlens
    brokers: list[BrokerSettingValue]
    differ: bool
    problems: list[str] = field(default_factory=list)


def get_delay_levels(backend: Backend, sessions: sessionmaker[Session]) -> BrokerDelayLevels:
    setting = backend.broker_setting(DELAY_LEVEL_SETTING)
    if not setting.values:
        raise BackendUnavailable("no broker told its delay level table: "
                                 + ("; ".join(setting.problems) or "none has messageDelayLevel"))
    with sessions() as s:
        newest = latest(s, CLUSTER_DELAY_LEVELS)
    return BrokerDelayLevels(setting.values[0], newest.version if newest else 0, setting.brokers, setting.differ,
                             setting.problems)


def set_delay_levels(backend: Backend, sessions: sessionmaker[Session], clock: Clock, levels: str, *,
                     actor: Principal, lock: threading.Lock, idempotency_key: str | None = None,
                     reason: str | None = None, expected_version: int | None = None,
                     rollback_to: int | None = None) -> BrokerDelayLevels:
    """Record a new version (with its audit entry: the table before and after), then write it to
    every broker. A broker that did not take it is named in `problems`; none taking it fails the
    change. With `expected_version`, a table changed here since that version is refused (409)."""
    checked_levels(levels)
    reason = audit.checked_reason(reason)

    def intent(s: Session, _entry_id: int) -> dict:
        newest = s.scalar(select(func.max(ConfigVersion.version)).where(ConfigVersion.kind == CLUSTER_DELAY_LEVELS))
        if newest is None:
            s.add(ConfigVersion(kind=CLUSTER_DELAY_LEVELS, version=0, value=current.levels,
                                created_at_ms=clock.now_ms(), actor="", reason=BROKERS_TABLE_BEFORE))
        version = (newest or 0) + 1
        s.add(ConfigVersion(kind=CLUSTER_DELAY_LEVELS, version=version, value=levels, created_at_ms=clock.now_ms(),
                            actor=actor.name, reason=reason))
        result = {"version": version, "first": newest is None,
                  "before": {"version": current.version, "levels": current.levels, "differ": current.differ},
                  "after": {"version": version, "levels": levels}, "applies_after_restart": True}
        if rollback_to is not None:
            result.update(from_version=current.version, to_version=rollback_to)
        return result

    def act(decided: dict) -> dict:
        written = backend.update_broker_setting(DELAY_LEVEL_SETTING, levels)
        missed = [b.broker for b in written.brokers if b.value != levels]
        if len(missed) == len(written.brokers):
            raise BackendUnavailable(f"no broker took the table: {'; '.join(written.problems) or 'none answered'}")
        return {"brokers_missed": missed, "problems": written.problems}

    def undo(s: Session, decided: dict) -> None:
        made = [decided["version"], *([0] if decided["first"] else [])]
        s.execute(delete(ConfigVersion).where(ConfigVersion.kind == CLUSTER_DELAY_LEVELS,
                                              ConfigVersion.version.in_(made)))

    with lock:
        current = get_delay_levels(backend, sessions)
        refuse_stale_version(sessions, expected_version, current.version, f"is the newest ({current.levels})",
                             idempotency_key)
        if current.levels == levels and not current.differ and not current.problems:
            return current
        action, request = ((SET_BROKER_DELAY_LEVELS, {"levels": levels}) if rollback_to is None
                           else (ROLLBACK_BROKER_DELAY_LEVELS, {"version": rollback_to}))
        done = audit.perform(sessions, clock, actor=actor, action=action, target=CLUSTER_DELAY_LEVELS,
                             request=request, intent=intent, act=act, undo=undo,
                             idempotency_key=idempotency_key, reason=reason)
        after = get_delay_levels(backend, sessions)
    return replace(after, problems=sorted({*after.problems, *done.result.get("problems", [])}))


def history(sessions: sessionmaker[Session]) -> list[VersionView]:
    """Every version, newest first, each with what changed from the one before; empty until the
    first change made here."""
    with sessions() as s:
        rows = list(s.scalars(select(ConfigVersion).where(ConfigVersion.kind == CLUSTER_DELAY_LEVELS)
                              .order_by(ConfigVersion.version)))
    if not rows:
        return []
    original, *changed = rows
    return version_views(VersionView(0, original.value, None, "", original.reason, []), changed)


def rollback(backend: Backend, sessions: sessionmaker[Session], clock: Clock, version: int, *, actor: Principal,
             lock: threading.Lock, reason: str | None = None, expected_version: int | None = None,
             idempotency_key: str | None = None) -> BrokerDelayLevels:
    """Write an earlier version's table to the brokers again, as a new version."""
    with sessions() as s:
        row = s.scalars(select(ConfigVersion).where(ConfigVersion.kind == CLUSTER_DELAY_LEVELS,
                                                    ConfigVersion.version == version)).first()
    if row is None:
        raise NotFoundError(f"no delay level version {version} recorded for this cluster")
    why = f"rollback to version {version}" + (f": {reason.strip()}" if reason and reason.strip() else "")
    return set_delay_levels(backend, sessions, clock, row.value, actor=actor, lock=lock, reason=why,
                            expected_version=expected_version, idempotency_key=idempotency_key, rollback_to=version)
