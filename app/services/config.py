"""Broker configuration kept in versions: the delay level table, its history with who, when,
why and what changed, rollback, and a preview of the retry schedule a table gives a group."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session, sessionmaker

from app.models import AuditEntry, ConfigVersion
from app.roles import Principal
from app.services import audit
from app.services.errors import ConflictError, InvalidRequestError, NotFoundError
from store.broker.metadata import DEFAULT_RETRY_MAX_TIMES
from store.broker.retry import retry_delay_level
from store.clock import Clock
from store.format import topics
from store.format.delay_levels import parse_delay_levels
from store.message_store import MessageStore

DELAY_LEVELS = "delay_levels"
SET_DELAY_LEVELS = "set_delay_levels"
ROLLBACK_DELAY_LEVELS = "rollback_delay_levels"


@dataclass(frozen=True)
class DelayLevelsView:
    levels: str
    version: int  # 0: the table the store was opened with, never changed through mqlens
    source: str = ""  # where version 0 came from: the store's file, given, inferred or RocketMQ's default


ORIGINAL_TABLE_TEXT = "the store's table before any change here"


@dataclass(frozen=True)
class VersionView:
    version: int  # 0: the table the store had before the first change (no time, no actor)
    levels: str
    created_at_ms: int | None
    actor: str
    reason: str | None
    changes: list[str]  # against the version before it: "level 3: 10s -> 20s", "level 17 added: 3h"


def latest(session: Session, kind: str) -> ConfigVersion | None:
    return session.scalars(select(ConfigVersion).where(ConfigVersion.kind == kind)
                           .order_by(ConfigVersion.version.desc()).limit(1)).first()


def get_delay_levels(store: MessageStore, sessions: sessionmaker[Session]) -> DelayLevelsView:
    with sessions() as s:
        row = latest(s, DELAY_LEVELS)
        if row is not None:
            return DelayLevelsView(row.value, row.version)
    return DelayLevelsView(store.delay_levels.spec, 0, store.delay_levels_source.text)


def original_delay_levels(store: MessageStore) -> str:
    """Version 0: the table the store had before any change (its file keeps it as the table of
    the oldest messages)."""
    return store.delay_levels.tables[0].spec


def levels_in_use(store: MessageStore) -> dict[int, int]:
    """Delay levels whose SCHEDULE_TOPIC_XXXX queue ever held a message: level -> messages waiting now."""
    progress = store.scheduler.progress()
    used = {}
    for queue_id, lo, hi in store.topics().get(topics.SCHEDULE_TOPIC, []):
        if hi > 0:
            used[queue_id + 1] = max(0, hi - max(lo, progress.get(queue_id + 1, 0)))
    return used


def checked_levels(levels: str) -> None:
    """A table that is no valid delay level table is refused (400), saying why."""
    try:
        parse_delay_levels(levels)
    except ValueError as exc:
        raise InvalidRequestError(str(exc)) from None


def dropped_levels(store: MessageStore, levels: str) -> dict[int, int]:
    """The levels in use that the table `levels` lacks: level -> messages waiting there now."""
    count = len(parse_delay_levels(levels))
    return {level: waiting for level, waiting in levels_in_use(store).items() if level > count}


def refuse_stale_version(sessions: sessionmaker, expected_version: int | None, current_version: int,
                         current_words: str, idempotency_key: str | None) -> None:
    """A change made from an older version of the delay levels is refused (a repeat of a request
    already carried out, by its idempotency key, is not)."""
    if expected_version is not None and expected_version != current_version and not audit.used_key(
            sessions, idempotency_key):
        raise ConflictError(f"the delay levels changed since version {expected_version}: version "
                            f"{current_version} {current_words}; start from it")


def set_delay_levels(store: MessageStore, sessions: sessionmaker[Session], clock: Clock, levels: str, *,
                     actor: Principal, lock: threading.Lock, idempotency_key: str | None = None,
                     reason: str | None = None, expected_version: int | None = None,
                     allow_dropped_levels: bool = False, rollback_to: int | None = None) -> DelayLevelsView:
    """Record a new version of the table (with its audit entry: the table before and after, and
    for a rollback, `rollback_to`, from which version to which), then make the store use it.
    `lock` serializes changes, so the store always ends on the newest version. With
    `expected_version`, a table changed since that version is refused (409) with the current
    one. A table without levels the store has used is refused unless `allow_dropped_levels`:
    producers asking for those levels get the last level's delay."""
    checked_levels(levels)
    reason = audit.checked_reason(reason)

    def intent(s: Session, _entry_id: int) -> dict:
        version = (s.scalar(select(func.max(ConfigVersion.version)).where(ConfigVersion.kind == DELAY_LEVELS))
                   or 0) + 1
        s.add(ConfigVersion(kind=DELAY_LEVELS, version=version, value=levels, created_at_ms=clock.now_ms(),
                            actor=actor.name, reason=reason))
        result = {"version": version, "before": {"version": current.version, "levels": current.levels},
                  "after": {"version": version, "levels": levels}}
        if rollback_to is not None:
            result.update(from_version=current.version, to_version=rollback_to)
        return result

    def act(decided: dict) -> None:
        store.set_delay_levels(levels)

    def undo(s: Session, decided: dict) -> None:
        s.execute(delete(ConfigVersion).where(ConfigVersion.kind == DELAY_LEVELS,
                                              ConfigVersion.version == decided["version"]))

    with lock:
        current = get_delay_levels(store, sessions)
        refuse_stale_version(sessions, expected_version, current.version, f"is now in use ({current.levels})",
                             idempotency_key)
        if current.levels == levels:
            return current
        dropped = dropped_levels(store, levels)
        if dropped and not allow_dropped_levels:
            names = ", ".join(f"{level} ({waiting} waiting)" for level, waiting in sorted(dropped.items()))
            raise ConflictError(f"the new table drops levels in use: {names}; messages waiting keep their time, "
                                "but producers asking for those levels would get the last level's delay. Allow "
                                "dropped levels to do it anyway")
        action, request = ((SET_DELAY_LEVELS, {"levels": levels}) if rollback_to is None
                           else (ROLLBACK_DELAY_LEVELS, {"version": rollback_to}))
        done = audit.perform(sessions, clock, actor=actor, action=action, target=DELAY_LEVELS,
                             request=request, intent=intent, act=act, undo=undo,
                             idempotency_key=idempotency_key, reason=reason)
    return DelayLevelsView(levels, done.result["version"])


def reconcile_delay_levels(store: MessageStore, sessions: sessionmaker[Session]) -> list[str]:
    """At start-up: make the store's table file hold the newest recorded table (finishing a
    change that a crash cut between its record and its act, or while the file was written) and
    settle the audit entries left pending. Returns what was done, for the log."""
    done: list[str] = []
    with sessions.begin() as s:
        newest = latest(s, DELAY_LEVELS)
        if newest is not None and store.saved_delay_level_table() != newest.value:
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

        for action in (SET_DELAY_LEVELS, ROLLBACK_DELAY_LEVELS):
            done += audit.settle_pending(s, action, settle)
    return done


def table_changes(before: str, after: str) -> list[str]:
    """What changed from one table to the next, level by level."""
    new, new_words = parse_delay_levels(after), after.split()  # a word per level, as the table was written
    old, old_words = parse_delay_levels(before), before.split()
    changes = []
    for level in range(1, max(len(old), len(new)) + 1):
        if level > len(old):
            changes.append(f"level {level} added: {new_words[level - 1]}")
        elif level > len(new):
            changes.append(f"level {level} removed (was {old_words[level - 1]})")
        elif old[level - 1] != new[level - 1]:
            changes.append(f"level {level}: {old_words[level - 1]} -> {new_words[level - 1]}")
    return changes


def history(sessions: sessionmaker[Session], store: MessageStore) -> list[VersionView]:
    """Every version of the table, newest first, each with what changed from the one before;
    once the table was changed, version 0 (the store's table before) closes the list."""
    with sessions() as s:
        rows = list(s.scalars(select(ConfigVersion).where(ConfigVersion.kind == DELAY_LEVELS)
                              .order_by(ConfigVersion.version)))
    if not rows:
        return []
    return version_views(VersionView(0, original_delay_levels(store), None, "", ORIGINAL_TABLE_TEXT, []), rows)


def version_views(first: VersionView, rows: list[ConfigVersion]) -> list[VersionView]:
    """`first`, then each recorded row with what changed from the one before, newest first."""
    views, before = [first], first.levels
    for row in rows:
        try:
            changes = table_changes(before, row.value)
        except ValueError:
            changes = []
        views.append(VersionView(row.version, row.value, row.created_at_ms, row.actor, row.reason, changes))
        before = row.value
    return list(reversed(views))


def rollback(store: MessageStore, sessions: sessionmaker[Session], clock: Clock, version: int, *, actor: Principal,
             lock: threading.Lock, reason: str | None = None, expected_version: int | None = None,
             allow_dropped_levels: bool = False, idempotency_key: str | None = None) -> DelayLevelsView:
    """Make the table of an earlier version current again, as a new version (version 0: the
    store's table before any change)."""
    with sessions() as s:
        row = s.scalars(select(ConfigVersion).where(ConfigVersion.kind == DELAY_LEVELS,
                                                    ConfigVersion.version == version)).first()
    if row is not None:
        levels = row.value
    elif version == 0:
        levels = original_delay_levels(store)
    else:
        raise NotFoundError(f"no delay level version {version}")
    why = f"rollback to version {version}" + (f": {reason.strip()}" if reason and reason.strip() else "")
    return set_delay_levels(store, sessions, clock, levels, actor=actor, lock=lock, reason=why,
                            expected_version=expected_version, allow_dropped_levels=allow_dropped_levels,
                            idempotency_key=idempotency_key, rollback_to=version)


def preview(store: MessageStore, levels: str, max_reconsume_times: int = DEFAULT_RETRY_MAX_TIMES) -> dict:
    """What a table would do: each level's delay and messages waiting there now, the retry
    schedule of a group with `max_reconsume_times` (attempt, its delay, time since the first
    failure), when a message would reach the dead-letter queue, and warnings."""
    try:
        delays = parse_delay_levels(levels)
    except ValueError as exc:
        return {"valid": False, "error": str(exc), "levels": [], "schedule": [], "warnings": []}
    in_use = levels_in_use(store)
    words = levels.split()
    rows = [{"level": n, "delay_ms": delay, "label": words[n - 1], "waiting": in_use.get(n, 0)}
            for n, delay in enumerate(delays, start=1)]
    schedule, elapsed = [], 0
    for retry in range(1, max_reconsume_times + 1):
        asked = retry_delay_level(retry - 1)
        level = min(asked, len(delays))
        elapsed += delays[level - 1]
        schedule.append({"retry": retry, "level": level, "clamped": asked > len(delays),
                         "delay_ms": delays[level - 1], "since_first_failure_ms": elapsed})
    warnings = []
    dropped = {level: waiting for level, waiting in in_use.items() if level > len(delays)}
    if dropped:
        warnings.append("drops levels in use: " + ", ".join(f"{level} ({waiting} waiting)"
                                                            for level, waiting in sorted(dropped.items()))
                        + "; producers asking for them would get the last level's delay")
    clamped = [row["retry"] for row in schedule if row["clamped"]]
    if clamped:
        warnings.append(f"retries {clamped[0]} to {clamped[-1]} ask for levels past the table's end and all wait "
                        f"the last level ({words[-1]})")
    return {"valid": True, "error": None, "levels": rows, "schedule": schedule, "warnings": warnings,
            "dead_letter_after_ms": elapsed, "max_reconsume_times": max_reconsume_times, "dropped": dropped}
