"""Where a failed message goes next: RocketMQ's consumer send-back rules (consumerSendMsgBack)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from store.broker.metadata import GroupConfig
from store.format import topics
from store.format.codec import StoredMessage
from store.format.resend_plan import origin_topic  # noqa: F401  (read from here by earlier callers)

FIRST_RETRY_DELAY_LEVEL = 3  # reconsume #n waits level 2 + n: 10s, 30s, 1m, ...


@dataclass(frozen=True)
class SendBack:
    """The copy to put for a failed delivery."""

    topic: str  # %RETRY%group (after the delay) or %DLQ%group
    queue_id: int
    reconsume_times: int
    properties: dict[str, str]  # in the order RocketMQ's HashMap received the names
    dead_letter: bool
    delay_level: int  # 0 for a dead letter


def retry_delay_level(reconsume_times: int) -> int:
    """The delay level a message waits before reconsume #(reconsume_times + 1)."""
    return FIRST_RETRY_DELAY_LEVEL + reconsume_times


def with_retry_origin(original: StoredMessage) -> dict[str, str]:
    """The original's properties plus where it was first consumed: RETRY_TOPIC and ORIGIN_MESSAGE_ID
    (kept when an earlier copy set them)."""
    props = dict(original.properties)
    props.setdefault(topics.RETRY_TOPIC, original.topic)
    props[topics.ORIGIN_MESSAGE_ID] = props.get(topics.ORIGIN_MESSAGE_ID) or original.offset_msg_id
    return props


def route_send_back(original: StoredMessage, group: GroupConfig, delay_level: int = 0,
                    max_reconsume_times: int | None = None, rng: random.Random | None = None,
                    reconsume_times: int | None = None) -> SendBack:
    """The send-back of `original` by `group`: to the DLQ once its reconsume times reach the
    group's maximum or when `delay_level` is negative, else to the retry topic after delay level
    `delay_level`, or 3 + reconsume times when it is 0. `reconsume_times` stands for the
    record's own count when the consumer kept count itself (orderly retries in place)."""
    limit = group.max_reconsume_times if max_reconsume_times is None else max_reconsume_times
    reconsumed = original.reconsume_times if reconsume_times is None else reconsume_times
    props = dict(original.properties)
    if topics.RETRY_TOPIC not in props:
        props[topics.RETRY_TOPIC] = original.topic
    props[topics.WAIT] = "false"
    dead = reconsumed >= limit or delay_level < 0
    if dead:
        topic, queue_id, level = topics.dlq_topic(group.name), 0, 0
    else:
        topic = topics.retry_topic(group.name)
        queue_id = (rng or random).randrange(group.retry_queues)
        level = delay_level if delay_level > 0 else retry_delay_level(reconsumed)
    props[topics.DELAY] = str(level)
    props[topics.ORIGIN_MESSAGE_ID] = props.get(topics.ORIGIN_MESSAGE_ID) or original.offset_msg_id
    return SendBack(topic, queue_id, reconsumed + 1, props, dead, level)
