"""What resending a dead letter writes: a fresh delivery of the same message (reconsume times 0,
same body, keys, tags and unique key) on its origin topic or a retry topic of its group. Pure:
the embedded store writes the plan, a live cluster's backend sends it."""

from __future__ import annotations

from dataclasses import dataclass, replace

from store.errors import InvalidMessageError
from store.format import topics
from store.format.codec import COMPRESSED_FLAG, StoredMessage


def origin_topic(dead_letter: StoredMessage) -> str | None:
    """The topic a dead letter was consumed from (not a retry topic it passed through), if it says."""
    props = dead_letter.properties
    for name in (topics.DLQ_ORIGIN_TOPIC, topics.RETRY_TOPIC, topics.REAL_TOPIC):
        value = props.get(name)
        if value and not topics.is_retry_topic(value) and not topics.holds_for_later(value):
            return value
    return None


# Properties of the dead letter's routing that its fresh copy does not carry.
DROPPED = frozenset({topics.DELAY, topics.REAL_TOPIC, topics.REAL_QID, topics.WAIT, topics.RETRY_TOPIC,
                     topics.DLQ_ORIGIN_TOPIC, topics.DLQ_ORIGIN_MESSAGE_ID, topics.CLUSTER, topics.DLQ_REASON})


@dataclass(frozen=True)
class Resend:
    source: StoredMessage  # the dead letter, with the operator's body if one was given
    target: str
    properties: dict[str, str]  # in the order they go into RocketMQ's HashMap


def plan_resend(dead: StoredMessage, cluster: str, *, topic: str | None = None, marks: dict[str, str] | None = None,
                unique_key: str | None = None, body: bytes | None = None,
                property_changes: dict[str, str | None] | None = None) -> Resend:
    """The copy to write for dead letter `dead`; raises InvalidMessageError when it cannot be resent
    there. `marks` join its properties; `unique_key` is given to a dead letter that has none;
    `property_changes` set properties (None removes one); a new `body` is stored uncompressed."""
    if not topics.is_dlq_topic(dead.topic):
        raise InvalidMessageError(f"the message at {dead.phys_offset} is in {dead.topic}, not a dead-letter topic")
    origin = origin_topic(dead)
    if origin is None:
        raise InvalidMessageError(f"the dead letter at {dead.phys_offset} does not say which topic it came from")
    target = topic or origin
    if topics.is_dlq_topic(target) or target in (topics.SCHEDULE_TOPIC, topics.TIMER_TOPIC):
        raise InvalidMessageError(f"a dead letter cannot be resent to {target}")
    kept = {name: value for name, value in dead.properties.items() if name not in DROPPED}
    if topics.is_retry_topic(target):
        kept[topics.RETRY_TOPIC] = origin  # consumers of a retry topic learn the message's own topic
    if unique_key and not dead.unique_key:
        kept[topics.UNIQ_KEY] = unique_key
    for name, value in (property_changes or {}).items():
        if value is None:
            kept.pop(name, None)
        else:
            kept[name] = value
    kept.update(marks or {})
    kept[topics.CLUSTER] = cluster
    if body is not None:
        dead = replace(dead, stored_body=body, sys_flag=dead.sys_flag & ~COMPRESSED_FLAG)
    return Resend(dead, target, kept)
