"""What a client token (a producing or consuming service's credentials) may touch: never the
broker's own topics but its group's retry topics (the trace topic, another group's retries),
and only the topics and groups of its scope when it has one. Other roles are not limited here:
they may read everything through the console anyway."""

from __future__ import annotations

from app.roles import Principal, Role
from app.services.errors import ForbiddenError
from store.format import topics
from store.message_store import MessageStore


def _limited(principal: Principal) -> bool:
    return principal.role is Role.CLIENT


def _names(names: frozenset[str]) -> str:
    return ", ".join(sorted(names))


def check_group(principal: Principal, group: str) -> None:
    """The client may consume as `group` (receive, ack, nack, change the invisible time)."""
    if _limited(principal) and principal.groups is not None and group not in principal.groups:
        raise ForbiddenError(f"{principal.name} (client) may not consume as group {group}: its token is for "
                             f"group {_names(principal.groups)} only")


def check_topic(principal: Principal, topic: str) -> None:
    """The client may produce to or consume `topic` by its scope."""
    if _limited(principal) and principal.topics is not None and topic not in principal.topics:
        raise ForbiddenError(f"{principal.name} (client) may not use topic {topic}: its token is for topic "
                             f"{_names(principal.topics)} only")


def own_retry_origin(store: MessageStore, group: str, topic: str) -> str | None:
    """For a retry topic of `group`: the topic its messages came from ("" for %RETRY%group, which
    holds retries of every topic the group consumes); None when it is not one of the group's."""
    if topic == topics.retry_topic(group):
        return ""
    prefix = topics.retry_topic(group) + "_"
    origin = topic[len(prefix):] if topic.startswith(prefix) else ""
    if origin and store.metadata.topic(origin) is not None and not topics.is_system_topic(origin):
        return origin  # the pop retry topic %RETRY%group_topic
    return None


def check_receive(principal: Principal, store: MessageStore, group: str, topic: str) -> None:
    """The client may receive `topic` as `group`: its group, and a topic of its scope or a retry
    topic of its group (of a topic of its scope); never another broker topic."""
    if not _limited(principal):
        return
    check_group(principal, group)
    if topics.is_system_topic(topic):
        origin = own_retry_origin(store, group, topic) if topics.is_retry_topic(topic) else None
        if origin is None:
            raise ForbiddenError(f"{principal.name} (client) may not receive {topic}: a client receives its "
                                 f"topics and the retry topics of its own group ({topics.retry_topic(group)}) only")
        if origin:
            check_topic(principal, origin)
        return
    check_topic(principal, topic)
