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


def _target(msg: StoredMessage) -> str:
    return f"message:{msg.offset_msg_id}"


def reveal(sessions: sessionmaker[Session], clock: Clock, msg: StoredMessage, *, actor: Principal,
           reason: str | None = None) -> None:
    """Record that `actor` asked to see the body of `msg`."""
    with sessions.begin() as s:
        audit.record(s, clock, actor=actor, action=REVEAL_BODY, target=_target(msg),
                     detail={"topic": msg.topic, "unique_key": msg.unique_key, "size_bytes": len(msg.body)},
                     reason=reason)


def shows_body(sessions: sessionmaker[Session], clock: Clock, msg: StoredMessage, principal: Principal) -> bool:
    """The principal sees the body: by role, or by a reveal of this message in the last 15 minutes."""
    if principal.can(Permission.READ_BODIES):
        return True
    if not principal.can(Permission.READ) or principal.kind == "anonymous":
        return False
    since = clock.now_ms() - REVEAL_LASTS_MS
    with sessions() as s:
        found = s.scalars(select(AuditEntry.id)
                          .where(AuditEntry.action == REVEAL_BODY, AuditEntry.actor == principal.name,
                                 AuditEntry.target == _target(msg), AuditEntry.at_ms >= since).limit(1)).first()
    return found is not None
