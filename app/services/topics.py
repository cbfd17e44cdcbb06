"""Topics: the list with queue offsets, creating and changing one, and which a producer may use."""

from __future__ import annotations

from sqlalchemy.orm import Session, sessionmaker

from app.models import AuditEntry
from app.roles import Principal
from app.services import audit
from app.services.errors import ForbiddenError
from backend.embedded import EmbeddedBackend
from backend.protocol import Backend, TopicList, TopicView
from store.broker.metadata import TopicConfig
from store.clock import Clock
from store.format import topics
from store.message_store import MessageStore

UPDATE_TOPIC = "update_topic"


def check_producer_topic(name: str) -> str:
    """A topic a producer may send to: a valid name (else 400) that is not a system topic (else 403)."""
    topics.validate_topic(name)
    if topics.is_system_topic(name):
        raise ForbiddenError(f"topic {name} is a system topic: producers cannot send to it")
    return name


def list_topics(backend: Backend) -> TopicList:
    """Every topic with its settings and the offsets of each queue, by name; on a live cluster
    also the brokers that did not answer."""
    return backend.list_topics()


def get_topic(store: MessageStore, name: str) -> TopicView | None:
    return EmbeddedBackend(store).get_topic(name)


def put_topic(store: MessageStore, sessions: sessionmaker[Session], clock: Clock, name: str, *, actor: Principal,
              queues: int | None = None, perm: int | None = None, reason: str | None = None
              ) -> tuple[TopicView, bool]:
    """Create a topic or change its queue count or permission; (the topic, whether it was
    created). Audited with the settings before and after."""
    topics.validate_topic(name)
    if topics.is_system_topic(name):
        raise ForbiddenError(f"topic {name} is a system topic: the broker manages it")
    current = store.metadata.topic(name)
    base = current if current is not None else TopicConfig(name, queues=store.config.default_queue_count)
    config = TopicConfig(name, queues=base.queues if queues is None else queues,
                         perm=base.perm if perm is None else perm)
    before = None if current is None else {"queues": current.queues, "perm": current.perm}

    def act(decided: dict) -> dict:
        store.put_topic(config)
        return {"after": {"queues": config.queues, "perm": config.perm}}

    audit.perform(sessions, clock, actor=actor, action=UPDATE_TOPIC, target=f"topic:{name}",
                  request={"queues": config.queues, "perm": config.perm}, intent=lambda s, _: {"before": before},
                  act=act, reason=reason)
    view = get_topic(store, name)
    assert view is not None
    return view, current is None


def reconcile_topic_updates(store: MessageStore, sessions: sessionmaker[Session]) -> list[str]:
    """At start-up: a topic change a crash cut is ok when the topic has the settings it asked for."""

    def settle(entry: AuditEntry, detail: dict) -> audit.Settlement:
        config = store.metadata.topic(entry.target.removeprefix("topic:"))
        asked = detail.get("request", {})
        if config is not None and (config.queues, config.perm) == (asked.get("queues"), asked.get("perm")):
            return audit.OK, "completed before a restart", {"after": asked}
        return audit.FAILED, "interrupted before the topic was changed", None

    with sessions.begin() as s:
        return audit.settle_pending(s, UPDATE_TOPIC, settle)
