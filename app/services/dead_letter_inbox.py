"""The dead-letter inbox over a backend: the embedded store's from its dead-letter index
(app.services.dead_letters), a live cluster's read from the brokers a page at a time
(Backend.dead_letter_page) with what the operator database says of each resend."""

from __future__ import annotations

from sqlalchemy.orm import Session, sessionmaker

from app.services import dead_letters
from app.services.dead_letters import MAX_LIMIT, STATES, DeadLetter, DeadLetterCache, Filter, Inbox
from app.services.errors import InvalidRequestError, NotFoundError
from app.services.lookup import Source
from app.services.resend import RESENT_FROM_PROPERTY, group_of, resend_items_version, resent_before
from backend.embedded import EmbeddedBackend
from backend.protocol import Backend, DeadLetterWindow
from store.broker.metadata import GroupConfig, checked_group
from store.clock import Clock
from store.format import topics
from store.format.codec import StoredMessage
from store.format.resend_plan import origin_topic
from store.message_store import MessageStore


def embedded_store(source: Source) -> MessageStore | None:
    if isinstance(source, MessageStore):
        return source
    return source.store if isinstance(source, EmbeddedBackend) else None


def inbox(source: Source, sessions: sessionmaker[Session], clock: Clock, cache: DeadLetterCache, group: str | None,
          wanted: Filter, cursor: str | None = None, limit: int = 50) -> Inbox:
    store = embedded_store(source)
    if store is not None:
        return dead_letters.inbox(store, sessions, clock, cache, group, wanted, cursor, limit)
    assert not isinstance(source, MessageStore)
    return _on_cluster(source, sessions, clock, group, wanted, cursor, limit)


def check_cluster_filter(wanted: Filter) -> DeadLetterWindow:
    """The filters a cluster's inbox serves (time, tag, key); the others need the embedded store."""
    for name, value in (("reason", wanted.reason), ("state", wanted.state)):
        if value is not None:
            raise InvalidRequestError(f"the {name} filter needs the embedded store: on a live cluster the inbox "
                                      "filters by time, tag and key")
    return DeadLetterWindow(wanted.begin, wanted.end, wanted.tag, wanted.key)


def _on_cluster(backend: Backend, sessions: sessionmaker[Session], clock: Clock, group: str | None, wanted: Filter,
                cursor: str | None, limit: int) -> Inbox:
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequestError(f"limit is between 1 and {MAX_LIMIT}")
    window = check_cluster_filter(wanted)
    before = dead_letters.parse_cursor(cursor)
    if group is not None:
        checked_group(GroupConfig(group))
    page = backend.dead_letter_page(group, window, before, limit)
    # Asked only when nothing was found: a group with dead letters exists, and asking first would
    # wait once more on a broker that does not answer.
    if group is not None and not page.messages and backend.get_topic(topics.dlq_topic(group)) is None \
            and not _known_group(backend, group):
        raise NotFoundError(f"group {group} has no dead letters (no {topics.dlq_topic(group)} topic)")
    now = clock.now_ms()
    rows = _rows(backend, sessions, page.messages, now)
    filtered = window != DeadLetterWindow()
    exact = not filtered or (page.whole and before is None)
    total = len(rows) if filtered and exact else page.held
    resent = min(total, resend_items_version(sessions, group)[0])
    counts = dict.fromkeys(STATES, 0) | {"waiting": total - resent, "resent": resent}
    next_cursor = f"{page.next_position[0]}-{page.next_position[1]}" if page.next_position else None
    return Inbox(group, rows, next_cursor, total, counts, None, not exact, page.problems)


def _known_group(backend: Backend, group: str) -> bool:
    """Some broker has the group's settings: not a typo of a group name."""
    return any(g.name == group for g in backend.list_groups())


def _rows(backend: Backend, sessions: sessionmaker[Session], messages: list[StoredMessage],
          now: int) -> list[DeadLetter]:
    resends = resent_before(sessions, [m.offset_msg_id for m in messages])
    dead_again = {m.properties[RESENT_FROM_PROPERTY]: m.offset_msg_id for m in messages
                  if RESENT_FROM_PROPERTY in m.properties}
    rows = []
    for msg in messages:
        group = group_of(msg.topic)
        item = resends.get(msg.offset_msg_id)
        again = dead_again.get(msg.offset_msg_id)
        resend = None
        if item is not None:
            state = "failed_again" if again else (
                backend.copy_state(group, item.new_offset_msg_id) if item.new_offset_msg_id else "pending")
            resend = {"at_ms": item.at_ms, "actor": item.actor, "action_id": item.action_id,
                      "destination": item.destination, "new_offset_msg_id": item.new_offset_msg_id,
                      "copy_state": state}
        rows.append(DeadLetter(
            offset_msg_id=msg.offset_msg_id, unique_key=msg.unique_key, group=group, topic=msg.topic,
            original_topic=origin_topic(msg), keys=msg.keys, tags=msg.tags,
            reason=msg.properties.get(topics.DLQ_REASON, ""), reconsume_times=msg.reconsume_times,
            store_timestamp=msg.store_timestamp, age_ms=now - msg.store_timestamp, expires_at=None,
            state="failed_again" if again else "resent" if item is not None else "waiting",
            resent_after=msg.properties.get(RESENT_FROM_PROPERTY), resend=resend, dead_again=again,
            phys_offset=msg.phys_offset))
    return rows

