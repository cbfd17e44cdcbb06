"""Filters Spark pushes into the commit log scan: topic, store time, physical offset, queue id,
copy kind and tags.

A pushed filter is applied exactly to every row the scan yields (Spark does not check it
again), and it lets the planner skip whole segments: by offset range, and by store time, which
rises along the log (RocketMQ's own time lookups assume the same)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
)

from store.format import topics
from store.format.codec import StoredMessage

_BOUNDED = ("store_timestamp", "phys_offset", "queue_id")
_TEXT_SETS = ("topic", "copy_kind", "tags")
_COMPARISONS = (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)


@dataclass
class Range:
    """An integer interval [low, high], both ends included."""

    low: float = -math.inf
    high: float = math.inf

    def narrow(self, kind: type, value: int) -> None:
        if kind is EqualTo:
            self.low, self.high = max(self.low, value), min(self.high, value)
        elif kind is GreaterThan:
            self.low = max(self.low, value + 1)
        elif kind is GreaterThanOrEqual:
            self.low = max(self.low, value)
        elif kind is LessThan:
            self.high = min(self.high, value - 1)
        elif kind is LessThanOrEqual:
            self.high = min(self.high, value)

    def overlaps(self, low: float, high: float) -> bool:
        return low <= self.high and high >= self.low

    def __contains__(self, value: int) -> bool:
        return self.low <= value <= self.high

    @property
    def unbounded(self) -> bool:
        return self.low == -math.inf and self.high == math.inf


def _strings(f: Filter) -> set[str] | None:
    """The values an EqualTo or In filter accepts, when they are all strings."""
    if isinstance(f, EqualTo) and isinstance(f.value, str):
        return {f.value}
    if isinstance(f, In) and all(isinstance(v, str) for v in f.value):
        return set(f.value)
    return None


@dataclass
class ScanFilter:
    topics: frozenset[str] | None = None  # None: every topic
    copy_kinds: frozenset[str] | None = None  # None: every copy kind
    tags: frozenset[str] | None = None  # None: any tags, none included; a set: records tagged with one of them
    store_timestamp: Range = field(default_factory=Range)
    phys_offset: Range = field(default_factory=Range)
    queue_id: Range = field(default_factory=Range)

    def take(self, filters: list[Filter]) -> list[Filter]:
        """Absorb the filters this scan can apply; returns the others, for Spark to apply."""
        left = []
        for f in filters:
            attribute = getattr(f, "attribute", ())  # Not, And and Or name no single column
            column = attribute[0] if len(attribute) == 1 else None
            values = _strings(f) if column in _TEXT_SETS else None
            if values is not None:
                self._only(column, values)
            elif (column in _BOUNDED and type(f) in _COMPARISONS
                  and isinstance(f.value, int) and not isinstance(f.value, bool)):
                getattr(self, column).narrow(type(f), f.value)
            else:
                left.append(f)
        return left

    def _only(self, column: str, values: set[str]) -> None:
        attribute = {"topic": "topics", "copy_kind": "copy_kinds", "tags": "tags"}[column]
        kept = getattr(self, attribute)
        setattr(self, attribute, frozenset(values) if kept is None else kept & values)

    @property
    def empty(self) -> bool:
        return (any(s is not None and not s for s in (self.topics, self.copy_kinds, self.tags))
                or any(r.low > r.high for r in (self.store_timestamp, self.phys_offset, self.queue_id)))

    def matches(self, msg: StoredMessage) -> bool:
        return ((self.topics is None or msg.topic in self.topics) and msg.store_timestamp in self.store_timestamp
                and msg.phys_offset in self.phys_offset and msg.queue_id in self.queue_id
                and (self.tags is None or msg.tags in self.tags)
                and (self.copy_kinds is None
                     or topics.message_copy_kind(msg.topic, msg.properties) in self.copy_kinds))
