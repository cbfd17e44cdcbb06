"""Resetting a group's consumer offsets of a topic, to its earliest or latest message, a time or
an exact offset, for one queue or all: previewed (lag per queue before and after), then applied
as an audited action; pull consumers and receives (pop) both go on from the new offsets."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from sqlalchemy.orm import Session, sessionmaker

from app.models import AuditEntry
from app.roles import Principal
from app.services import audit, queue_view
from app.services.errors import InvalidRequestError, NotFoundError
from backend.embedded import EmbeddedBackend
from backend.protocol import ResetTarget
from store.clock import Clock
from store.format import topics
from store.message_store import MessageStore

RESET_OFFSETS = "reset_offsets"


@dataclass(frozen=True)
class QueueReset:
    queue_id: int
    min_offset: int
    max_offset: int
    before: int | None  # the committed offset now (None: never committed)
    after: int
    lag_before: int
    lag_after: int


def parse_target(to: object) -> tuple[str, int | None]:
    """("earliest" | "latest" | "time" | "offset", value)."""
    if to in ("earliest", "latest"):
        return str(to), None
    if isinstance(to, dict) and len(to) == 1:
        [(kind, value)] = to.items()
        if kind in ("time", "offset") and isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return kind, value
    raise InvalidRequestError('reset to "earliest", "latest", {"time": epoch ms} or {"offset": n}')


def plan(store: MessageStore, group: str, topic: str, to: object, queue_id: int | None = None) -> list[QueueReset]:
    store.metadata.group(group)  # checks the name
    topics.validate_topic(topic)
    kind, value = parse_target(to)
    queues = {q for q, _, _ in store.topics().get(topic, [])}
    if not queues:
        raise NotFoundError(f"topic {topic} has no messages to reset to")
    if queue_id is not None and queue_id not in queues:
        raise NotFoundError(f"topic {topic} has no queue {queue_id}")
    planned = EmbeddedBackend(store).plan_offset_reset(group, topic, ResetTarget(kind, value), queue_id)
    return [QueueReset(r.queue_id, r.min_offset, r.max_offset, r.before, r.after, r.lag_before, r.lag_after)
            for r in planned.queues]


def reset(store: MessageStore, sessions: sessionmaker[Session], clock: Clock, group: str, topic: str, to: object, *,
          actor: Principal, queue_id: int | None = None, reason: str | None = None,
          idempotency_key: str | None = None) -> list[QueueReset]:
    rows = plan(store, group, topic, to, queue_id)
    request = {"topic": topic, "to": to, "queue_id": queue_id}

    def act(decided: dict) -> None:
        store.reset_consumer_offset(group, topic, {row.queue_id: row.after for row in rows})

    audit.perform(sessions, clock, actor=actor, action=RESET_OFFSETS, target=f"group:{group}", request=request,
                  intent=lambda s, _: {"topic": topic, "queues": [asdict(row) for row in rows]}, act=act,
                  reason=reason, idempotency_key=idempotency_key)
    return rows


def set_queue_offset(store: MessageStore, sessions: sessionmaker[Session], clock: Clock, group: str, topic: str,
                     queue_id: int, offset: int, *, actor: Principal, reason: str | None = None) -> QueueReset:
    """The reset of one queue to an exact offset (PUT .../offsets): the same audited action, but
    an offset beyond the queue's end is refused rather than clamped."""
    store.metadata.group(group)  # checks the name
    queue_view.existing_queue(store, topic, queue_id)
    [row] = plan(store, group, topic, {"offset": offset}, queue_id)
    if offset > row.max_offset:
        raise InvalidRequestError(f"offset {offset} is outside queue {topic}:{queue_id} [0, {row.max_offset}]")
    [row] = reset(store, sessions, clock, group, topic, {"offset": offset}, actor=actor, queue_id=queue_id,
                  reason=reason)
    return row


def reconcile_resets(store: MessageStore, sessions: sessionmaker[Session]) -> list[str]:
    """At start-up: a reset a crash cut is ok when the group's offsets are the planned ones."""

    def settle(entry: AuditEntry, detail: dict) -> audit.Settlement:
        result = detail.get("result", {})
        group = entry.target.removeprefix("group:")
        now = store.offsets.of_group(group).get(result.get("topic", ""), {})
        if all(now.get(row["queue_id"]) == row["after"] for row in result.get("queues", [])):
            return audit.OK, "completed before a restart", None
        return audit.FAILED, "interrupted before the offsets were moved", None

    with sessions.begin() as s:
        return audit.settle_pending(s, RESET_OFFSETS, settle)
