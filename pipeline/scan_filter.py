"""Filters Spark pushes into the commit log scan: topic, store time and physical offset.

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

_BOUNDED = ("store_timestamp", "phys_offset")


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


@dataclass
class ScanFilter:
    topics: frozenset[str] | None = None  # None: every topic
    store_timestamp: Range = field(default_factory=Range)
    phys_offset: Range = field(default_factory=Range)

    def take(self, filters: list[Filter]) -> list[Filter]:
        """Absorb the filters this scan can apply; returns the others, for Spark to apply."""
        left = []
        for f in filters:
            attribute = getattr(f, "attribute", ())  # Not, And and Or name no single column
            column = attribute[0] if len(attribute) == 1 else None
            if column == "topic" and isinstance(f, EqualTo) and isinstance(f.value, str):
                self._only_topics({f.value})
            elif column == "topic" and isinstance(f, In) and all(isinstance(v, str) for v in f.value):
                self._only_topics(set(f.value))
            elif (column in _BOUNDED and type(f) in (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan,
                                                     LessThanOrEqual)
                  and isinstance(f.value, int) and not isinstance(f.value, bool)):
                getattr(self, column).narrow(type(f), f.value)
            else:
                left.append(f)
        return left

    def _only_topics(self, names: set[str]) -> None:
        self.topics = frozenset(names) if self.topics is None else self.topics & names

    @property
    def empty(self) -> bool:
        return (self.topics is not None and not self.topics) or self.store_timestamp.low > self.store_timestamp.high \
            or self.phys_offset.low > self.phys_offset.high

    def matches(self, topic: str, store_timestamp: int, phys_offset: int) -> bool:
        return ((self.topics is None or topic in self.topics) and store_timestamp in self.store_timestamp
                and phys_offset in self.phys_offset)
