"""Revealing a message body to someone whose role shows bodies masked (the viewer role): each
reveal is an audit row, and it lasts a while for that person and that message only."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.models import AuditEntry
from app.roles import Permission, Principal
from app.services import audit
from store.clock import Clock
from store.format.codec import StoredMessage

REVEAL_BODY = "reveal_body"
REVEAL_LASTS_MS = 15 * 60 * 1000
CHUNK = 500  # message ids per query


def _target(msg: StoredMessage) -> str:
    return f"message:{msg.offset_msg_id}"


def reveal(sessions: sessionmaker[Session], clock: Clock, msg: StoredMessage, *, actor: Principal,
           reason: str | None = None) -> None:
    """Record that `actor` asked to see the body of `msg`."""
    with sessions.begin() as s:
        audit.record(s, clock, actor=actor, action=REVEAL_BODY, target=_target(msg),
                     detail={"topic": msg.topic, "unique_key": msg.unique_key, "size_bytes": len(msg.body)},
                     reason=reason)


def revealed(sessions: sessionmaker[Session], clock: Clock, principal: Principal, owners: set[str]) -> set[str]:
    """Of these messages (offset ids), those whose bodies the principal sees: all of them for a
    role that reads bodies, else those it revealed in the last 15 minutes."""
    if principal.can(Permission.READ_BODIES):
        return set(owners)
    if not owners or not principal.can(Permission.READ) or principal.kind == "anonymous":
        return set()
    since = clock.now_ms() - REVEAL_LASTS_MS
    targets = sorted(f"message:{owner}" for owner in owners)
    found: set[str] = set()
    with sessions() as s:
        for start in range(0, len(targets), CHUNK):
            found.update(s.scalars(select(AuditEntry.target).where(
                AuditEntry.action == REVEAL_BODY, AuditEntry.actor == principal.name,
                AuditEntry.target.in_(targets[start:start + CHUNK]), AuditEntry.at_ms >= since)))
    return {target.removeprefix("message:") for target in found}
