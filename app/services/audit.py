"""Operator actions: intent and audit row in one transaction, then the act, then the outcome.

A request repeated with the same idempotency key acts once: the repeat gets the first one's
result. Entries left pending by a crash are settled by the owner of the action at start-up."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from app.models import AuditEntry
from app.roles import Principal
from app.services.errors import ConflictError, InvalidRequestError
from store.clock import Clock

MAX_IDEMPOTENCY_KEY = 255
PENDING, OK, FAILED = "pending", "ok", "failed"


@dataclass(frozen=True)
class ActionResult:
    entry_id: int
    result: dict  # what the intent recorded (a new version number...)
    replayed: bool  # True: an earlier request with the same idempotency key did the work


def _replay(entry: AuditEntry, action: str, target: str, request: dict) -> ActionResult:
    detail = json.loads(entry.detail)
    if entry.action != action or entry.target != target[:512] or detail.get("request") != request:
        raise ConflictError("this idempotency key was already used for a different request")
    if entry.outcome == PENDING:
        raise ConflictError("a request with this idempotency key is still in progress")
    if entry.outcome == FAILED:
        raise ConflictError(f"a request with this idempotency key failed: {entry.outcome_detail}")
    return ActionResult(entry.id, detail.get("result", {}), True)


def used_key(sessions: sessionmaker[Session], key: str | None) -> bool:
    """An earlier request came with this idempotency key (a repeat gets its answer)."""
    return key is not None and _find(sessions, key) is not None


def _find(sessions: sessionmaker[Session], key: str) -> AuditEntry | None:
    with sessions() as s:
        return s.scalars(select(AuditEntry).where(AuditEntry.idempotency_key == key)).first()


MAX_REASON = 2000


def checked_reason(reason: str | None) -> str | None:
    """The operator's why (a sentence or a ticket), bounded; blank is none."""
    if reason is None or not reason.strip():
        return None
    if len(reason) > MAX_REASON:
        raise InvalidRequestError(f"a reason has at most {MAX_REASON} characters")
    return reason.strip()


def _new_entry(clock: Clock, actor: Principal, action: str, target: str, detail: dict, *, outcome: str,
               reason: str | None, idempotency_key: str | None = None) -> AuditEntry:
    return AuditEntry(at_ms=clock.now_ms(), actor=actor.name, role=actor.role.value if actor.role else None,
                      action=action, target=target[:512], detail=json.dumps(detail), idempotency_key=idempotency_key,
                      outcome=outcome, reason=checked_reason(reason))


def record(session: Session, clock: Clock, *, actor: Principal, action: str, target: str, detail: dict,
           reason: str | None = None, outcome: str = OK) -> AuditEntry:
    """An action done within this transaction (a user added, a body revealed): one finished row."""
    entry = _new_entry(clock, actor, action, target, detail, outcome=outcome, reason=reason)
    session.add(entry)
    return entry


def perform(sessions: sessionmaker[Session], clock: Clock, *, actor: Principal, action: str, target: str,
            request: dict, intent: Callable[[Session], dict], act: Callable[[dict], dict | None],
            undo: Callable[[Session, dict], None] | None = None, idempotency_key: str | None = None,
            reason: str | None = None) -> ActionResult:
    """Record the intent (intent(session, entry id) adds its rows, returns what it decided) with a pending
    audit row, run act(decided), then record the outcome; what act returns (a dict, e.g. the new
    copy a resend made) joins the recorded result. When act raises, undo(session, decided)
    runs in the transaction that marks the entry failed, and the error propagates."""
    if idempotency_key is not None:
        if not idempotency_key or len(idempotency_key) > MAX_IDEMPOTENCY_KEY:
            raise InvalidRequestError(f"an idempotency key has 1 to {MAX_IDEMPOTENCY_KEY} characters")
        earlier = _find(sessions, idempotency_key)
        if earlier is not None:
            return _replay(earlier, action, target, request)
    try:
        with sessions.begin() as s:
            entry = _new_entry(clock, actor, action, target, {"request": request}, outcome=PENDING, reason=reason,
                               idempotency_key=idempotency_key)
            s.add(entry)
            s.flush()
            decided = intent(s, entry.id)
            entry.detail = json.dumps({"request": request, "result": decided})
            s.flush()
            entry_id = entry.id
    except IntegrityError:
        earlier = _find(sessions, idempotency_key) if idempotency_key is not None else None
        if earlier is not None:
            return _replay(earlier, action, target, request)
        raise ConflictError("a concurrent change got there first; retry") from None
    try:
        acted = act(decided)
    except Exception as exc:
        with sessions.begin() as s:
            entry = s.get_one(AuditEntry, entry_id)
            entry.outcome, entry.outcome_detail = FAILED, f"{type(exc).__name__}: {exc}"[:2000]
            if undo is not None:
                undo(s, decided)
        raise
    with sessions.begin() as s:
        entry = s.get_one(AuditEntry, entry_id)
        entry.outcome = OK
        if acted:
            decided = {**decided, **acted}
            entry.detail = json.dumps({"request": request, "result": decided})
    return ActionResult(entry_id, decided, False)


# (outcome, outcome detail, facts that join the recorded result or None), for one pending entry and its detail
Settlement = tuple[str, str, dict | None]


def settle_pending(session: Session, action: str, settle: Callable[[AuditEntry, dict], Settlement]) -> list[str]:
    """At start-up: give each entry of `action` a crash left pending the outcome settle(entry,
    detail) decides. Returns what was done, for the log."""
    done: list[str] = []
    for entry in session.scalars(select(AuditEntry).where(AuditEntry.action == action, AuditEntry.outcome == PENDING)
                                 .order_by(AuditEntry.id)).all():
        detail = json.loads(entry.detail)
        entry.outcome, entry.outcome_detail, found = settle(entry, detail)
        if found:
            entry.detail = json.dumps({**detail, "result": {**detail.get("result", {}), **found}})
        done.append(f"audit entry {entry.id} settled: {entry.outcome}")
    return done
