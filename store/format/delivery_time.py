"""Arbitrary delivery times (RocketMQ 5's TIMER_DELIVER_MS, epoch milliseconds): the rules for a
producer's time, and the deliver time a record of the timer topic carries.

A time at or before now is delivered at once: the message goes straight to its topic. A later
one waits in the timer topic, at most MAX_DELAY_MS (40 days) ahead; RocketMQ 5 refuses times
beyond its own bound (timerMaxDelaySec, 3 days by default) in the same way."""

from __future__ import annotations

import re

from store.errors import InvalidMessageError
from store.format import topics
from store.format.delay_levels import MAX_DELAY_MS

_EPOCH_MS = re.compile(r"[0-9]{1,18}")


def parse_deliver_ms(text: str | None) -> int | None:
    """The epoch milliseconds a TIMER_DELIVER_MS value holds, None when it is not a plain number."""
    if text is None or not _EPOCH_MS.fullmatch(text):
        return None
    return int(text)


def requested_deliver_ms(properties: dict[str, str], now_ms: int) -> int | None:
    """The delivery time a producer asked for, None when it asked for none. Raises
    InvalidMessageError for a malformed time or one more than MAX_DELAY_MS ahead."""
    text = properties.get(topics.TIMER_DELIVER_MS)
    if text is None:
        return None
    deliver_ms = parse_deliver_ms(text)
    if deliver_ms is None:
        raise InvalidMessageError(f"{topics.TIMER_DELIVER_MS} must be epoch milliseconds, got {text!r}")
    if deliver_ms - now_ms > MAX_DELAY_MS:
        raise InvalidMessageError(f"delivery time {deliver_ms} is more than {MAX_DELAY_MS // 86_400_000} days ahead")
    return deliver_ms


def timer_deliver_ms(properties: dict[str, str], store_timestamp: int) -> int:
    """ConsumeQueue tagsCode of a timer topic record: its delivery time, or its store time (due
    at once) when the record carries none."""
    deliver_ms = parse_deliver_ms(properties.get(topics.TIMER_DELIVER_MS))
    return store_timestamp if deliver_ms is None else deliver_ms
