"""Pull by queue offset (RocketMQ 4 push consumers pull underneath): a window of one queue's
messages from an offset, filtered by tag. The consume queue's tag hash is checked first and
the record's real tag after it, as broker and client do together."""

from __future__ import annotations

from dataclasses import dataclass

from store.errors import StoreError
from store.format import topics
from store.format.codec import StoredMessage
from store.format.javahash import tags_code

MAX_PULL_MESSAGES = 1024
SCAN_LIMIT_FACTOR = 16  # units looked at per wanted message before a filtered pull gives up


class NotReadableError(StoreError, ValueError):
    """The topic cannot be consumed (a dead-letter topic, or read permission withdrawn)."""


class PullRequestError(StoreError, ValueError):
    """A pull or subscription argument is out of range or malformed."""


class TagFilter:
    """A subscription expression: '*' (or nothing) takes every message, 'a || b' these tags."""

    def __init__(self, expression: str | None = None):
        text = (expression or "*").strip()
        if text == "*":
            self.tags: frozenset[str] | None = None
        else:
            wanted = [tag.strip() for tag in text.split("||")]
            if not all(wanted):
                raise PullRequestError(f"bad tag expression {expression!r}: use '*' or 'tagA || tagB'")
            self.tags = frozenset(wanted)
        self.codes = None if self.tags is None else frozenset(tags_code(t) for t in self.tags)
        self.expression = text

    def matches_code(self, code: int) -> bool:
        return self.codes is None or code in self.codes

    def matches(self, msg: StoredMessage) -> bool:
        return self.tags is None or msg.tags in self.tags


@dataclass(frozen=True)
class PullResult:
    messages: list[StoredMessage]
    next_offset: int  # where the next pull of this queue starts
    min_offset: int
    max_offset: int


def check_consumable(topic: str, readable: bool) -> None:
    if topics.holds_for_later(topic):
        raise NotReadableError(f"{topic} holds messages until their time or their transaction's end; it cannot be "
                               "consumed (they are delivered to their own topic then)")
    if topics.is_dlq_topic(topic):
        raise NotReadableError(f"{topic} is a dead-letter topic: resend its messages instead of consuming them")
    if not readable:
        raise NotReadableError(f"topic {topic} is not readable (permission)")


def check_pull_size(max_messages: int) -> None:
    if type(max_messages) is not int or not 1 <= max_messages <= MAX_PULL_MESSAGES:
        raise PullRequestError(f"max messages must be between 1 and {MAX_PULL_MESSAGES}")
