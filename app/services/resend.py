"""Resending a dead letter to the topic it came from, as an audited operator action: the audit
row (and idempotency key) is written before the store acts, the outcome after. A resend cut by
a crash between the two is settled at start-up from the store's trace."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from app.models import AuditEntry
from app.roles import Principal
from app.services import audit, lookup
from app.services.errors import InvalidRequestError, NotFoundError
from store import topics
from store.clock import Clock
from store.codec import StoredMessage
from store.errors import StoreError
from store.message_store import MessageStore, PutResult
from store.trace import TraceKind

RESEND_DEAD_LETTER = "resend_dead_letter"


@dataclass(frozen=True)
class Resent:
    dead_letter: str  # offset message id
    copy: dict  # the new message: offset_msg_id, unique_key, topic, queue_id, queue_offset, phys_offset, ...
    replayed: bool  # an earlier request with the same idempotency key did the work


def copy_facts(copy: PutResult | StoredMessage) -> dict:
    return {"offset_msg_id": copy.offset_msg_id, "unique_key": copy.unique_key, "topic": copy.topic,
            "queue_id": copy.queue_id, "queue_offset": copy.queue_offset, "phys_offset": copy.phys_offset,
            "store_timestamp": copy.store_timestamp}


def _dead_letter(store: MessageStore, offset_msg_id: str) -> StoredMessage:
    dead = lookup.by_offset_id(store, offset_msg_id.strip())  # malformed: 400; nothing there: 404
    if not topics.is_dlq_topic(dead.topic):
        raise InvalidRequestError(f"message {dead.offset_msg_id} is in {dead.topic}, not in a dead-letter topic")
    return dead


def resend(store: MessageStore, sessions: sessionmaker[Session], clock: Clock, offset_msg_id: str, *,
           actor: Principal, idempotency_key: str | None = None) -> Resent:
    """Put the dead letter back on its original topic (a fresh delivery, same unique key)."""
    dead = _dead_letter(store, offset_msg_id)
    request = {"offset_msg_id": dead.offset_msg_id}

    def intent(s: Session) -> dict:
        return {"dead_letter_topic": dead.topic}

    def act(decided: dict) -> dict:
        return {"resent": copy_facts(store.resend_dead_letter(dead.phys_offset, actor=actor.name))}

    done = audit.perform(sessions, clock, actor=actor, action=RESEND_DEAD_LETTER, target=dead.offset_msg_id,
                         request=request, intent=intent, act=act, idempotency_key=idempotency_key)
    return Resent(dead.offset_msg_id, done.result["resent"], done.replayed)


def _resent_copy(store: MessageStore, dead_letter_id: str, since_ms: int) -> StoredMessage | None:
    """The copy a resend of the dead letter made at or after `since_ms`, per the trace."""
    try:
        dead = _dead_letter(store, dead_letter_id)
    except (StoreError, InvalidRequestError, NotFoundError):
        return None
    why = f"resent from {dead.topic}"
    for event in store.timeline(dead.unique_key or dead.offset_msg_id):
        if (event.kind == TraceKind.RESENT and event.at_ms >= since_ms and (event.reason or "").startswith(why)
                and event.offset_msg_id):
            try:
                return store.get_by_offset_id(event.offset_msg_id)
            except StoreError:
                return None
    return None


def reconcile_resends(store: MessageStore, sessions: sessionmaker[Session]) -> list[str]:
    """At start-up: settle resends a crash left pending: ok when the trace shows the copy was
    written, else failed (the operator may resend again). Returns what was done, for the log."""

    def settle(entry: AuditEntry, detail: dict) -> audit.Settlement:
        copy = _resent_copy(store, detail.get("request", {}).get("offset_msg_id", ""), entry.at_ms)
        if copy is None:
            return audit.FAILED, "interrupted before the dead letter was resent", None
        return audit.OK, "completed before a restart (found in the trace)", {"resent": copy_facts(copy)}

    with sessions.begin() as s:
        return audit.settle_pending(s, RESEND_DEAD_LETTER, settle)
