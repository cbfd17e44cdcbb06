"""System topic names, property names and topic name rules."""

from __future__ import annotations

import re

from store.errors import InvalidMessageError

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
PERM_READ, PERM_WRITE = 4, 2  # a topic's permission bits (TopicConfig.perm), as RocketMQ numbers them
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
TRACE_PACK_TAG = "mqlens-trace"  # the tag of mqlens's own lifecycle trace records in TRACE_TOPIC
TIMER_TOPIC = "rmq_sys_wheel_timer"  # messages waiting for an arbitrary delivery time (RocketMQ 5)
MAX_TOPIC_BYTES = 127
DEFAULT_RETRY_MAX_TIMES = 16  # a group's maxReconsumeTimes when nobody set it: then its dead-letter topic
TOPIC_NAME = re.compile(r"^[%|a-zA-Z0-9_-]+$")

# MessageConst names used by the store and broker logic.
KEYS = "KEYS"
TAGS = "TAGS"
UNIQ_KEY = "UNIQ_KEY"
WAIT = "WAIT"
DELAY = "DELAY"
RETRY_TOPIC = "RETRY_TOPIC"
REAL_TOPIC = "REAL_TOPIC"
REAL_QID = "REAL_QID"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
CLUSTER = "CLUSTER"
TRAN_MSG = "TRAN_MSG"
TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"  # on a half message the broker's check put back
PRODUCER_GROUP = "PGROUP"  # on a half message: the producer group the broker asks for its outcome
TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"  # 5.x: on a dead letter, the topic it was consumed from
DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"  # 5.x: on a dead letter, the message id consumers saw


def retry_topic(group: str) -> str:
    return RETRY_PREFIX + group


def pop_retry_topic(group: str, topic: str) -> str:
    """Where a pop-consuming group's copies to consume again wait (RocketMQ 5's pop retry topic,
    %RETRY%group_topic): a receive of the topic by the group takes from it too."""
    return f"{RETRY_PREFIX}{group}_{topic}"


def dlq_topic(group: str) -> str:
    return DLQ_PREFIX + group


def is_retry_topic(topic: str) -> bool:
    return topic.startswith(RETRY_PREFIX)


def is_dlq_topic(topic: str) -> bool:
    return topic.startswith(DLQ_PREFIX)


# Properties of a dead letter's resent copy: the operator action that made it, and the dead letter.
RESEND_ACTION = "MQLENS_RESEND_ACTION"
RESENT_FROM = "MQLENS_RESENT_FROM"
# Property of a dead letter: why it was dead-lettered (what the inbox shows and filters on).
DLQ_REASON = "MQLENS_DLQ_REASON"
MAX_DLQ_REASON_CHARS = 1024
_PROPERTY_SEPARATORS = str.maketrans({"\x01": " ", "\x02": " "})


def dead_letter_reason_property(reason: str) -> str:
    """The reason as a property value: bounded, without the properties' separator characters."""
    return reason[:MAX_DLQ_REASON_CHARS].translate(_PROPERTY_SEPARATORS)


def message_copy_kind(topic: str, properties: dict[str, str]) -> str:
    """Which copy a stored message is: a resent dead letter's copy is "resent", a transaction's
    half message (held, or discarded after too many checks) "transaction_half", the broker's
    record of a settled half "transaction_op", else as its topic says."""
    if RESENT_FROM in properties and not is_dlq_topic(topic):
        return "resent"
    if topic in TRANSACTION_HALF_TOPICS:
        return "transaction_half"
    if topic == TRANS_OP_HALF_TOPIC:
        return "transaction_op"
    return copy_kind(topic)


def copy_kind(topic: str) -> str:
    """Which copy of a message a topic holds: original, scheduled, retry or dead letter."""
    if topic in (SCHEDULE_TOPIC, TIMER_TOPIC):
        return "scheduled"
    if is_retry_topic(topic):
        return "retry"
    if is_dlq_topic(topic):
        return "dead_letter"
    if topic == TRACE_TOPIC:
        return "trace"
    return "original"


def validate_topic(topic: str) -> str:
    """Reject names that RocketMQ rejects, so no topic can name a path it should not."""
    if not isinstance(topic, str) or not TOPIC_NAME.fullmatch(topic):
        raise InvalidMessageError(
            f"invalid topic {topic!r}: use letters, digits, '%', '|', '_' or '-'"
        )
    if len(topic.encode("utf-8")) > MAX_TOPIC_BYTES:
        raise InvalidMessageError(f"topic {topic[:20]!r}... is longer than {MAX_TOPIC_BYTES} bytes")
    return topic


# Topics of the broker's own machinery that RocketMQ keeps producers away from.
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"  # half messages checked too often, discarded
BROKER_TOPICS = frozenset({"TBW102", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT", TRANS_CHECK_MAX_TIME_TOPIC})
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"  # a transaction's half message, until its end
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"  # one record per half message settled (its queue offset)
TRANSACTION_HALF_TOPICS = (TRANS_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC)  # copies of a half message
TRANS_CHECK_GROUP = "CID_RMQ_SYS_TRANS"  # the broker's check progress over the half and op topics
SYSTEM_PREFIX = "RMQ_SYS_"  # rmq_sys_wheel_timer, RMQ_SYS_TRANS_HALF_TOPIC... (either case)


# Topics that hold messages until their time or their transaction's end: never consumed as such.
HELD_FOR_LATER = frozenset({SCHEDULE_TOPIC, TIMER_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC})


def holds_for_later(name: str) -> bool:
    return name in HELD_FOR_LATER


def is_system_topic(name: str) -> bool:
    """A topic only the broker writes: schedule, retry, dead-letter, trace, timer and the like."""
    return (name in (SCHEDULE_TOPIC, TRACE_TOPIC) or name in BROKER_TOPICS or is_retry_topic(name)
            or is_dlq_topic(name) or name.upper().startswith(SYSTEM_PREFIX))
