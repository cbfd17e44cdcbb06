"""The delay level table ('1s 5s 10s ...'): level n (1-based) -> delay in milliseconds.

The table can change while the store runs. A scheduled message keeps the deliver time of the
table in force when it was written, so every table is kept with the commit log offset from
which it applies (saved by store.log.delay_levels_file)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from store.errors import InvalidConfigError

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
# The longest any message waits, by delay level or delivery time. The scheduler relies on it:
# a deliver time further ahead than this can only come from a clock that went back.
MAX_DELAY_MS = 40 * 86_400_000
MAX_LEVELS = 1024  # one SCHEDULE_TOPIC_XXXX queue per level, and a topic has at most 1024
UNKNOWN_LEVEL_DELAY_MS = 1000


@dataclass(frozen=True)
class DelayTable:
    """A table and the commit log offset from which it applies."""

    from_phys_offset: int
    spec: str
    delays_ms: tuple[int, ...]


class DelayLevels:
    def __init__(self, spec: str = DEFAULT_DELAY_LEVELS, tables: list[DelayTable] | None = None):
        self.use_tables(tables or [DelayTable(0, spec, tuple(parse_delay_levels(spec)))])

    def use_tables(self, tables: list[DelayTable]) -> None:
        starts = np.array([t.from_phys_offset for t in tables], dtype=np.int64)
        self._state = (list(tables), starts)  # one assignment: readers never see a half-changed table

    @property
    def tables(self) -> list[DelayTable]:
        return list(self._state[0])

    @property
    def spec(self) -> str:
        return self._state[0][-1].spec

    @property
    def delays_ms(self) -> list[int]:
        return list(self._state[0][-1].delays_ms)

    @property
    def max_level(self) -> int:
        return len(self._state[0][-1].delays_ms)

    @property
    def most_levels(self) -> int:
        """The number of levels of the longest table ever used (its levels may still hold messages)."""
        return max(len(t.delays_ms) for t in self._state[0])

    def clamp(self, level: int) -> int:
        return min(level, self.max_level)

    def delay_ms(self, level: int) -> int | None:
        delays = self._state[0][-1].delays_ms
        if 1 <= level <= len(delays):
            return delays[level - 1]
        return None

    def _delays_at(self, phys_offset: int | None) -> tuple[int, ...]:
        tables, starts = self._state
        if phys_offset is None or len(tables) == 1:
            return tables[-1].delays_ms
        return tables[max(0, int(np.searchsorted(starts, phys_offset, side="right")) - 1)].delays_ms

    def deliver_time(self, level: int, store_timestamp: int, phys_offset: int | None = None) -> int:
        """ConsumeQueue tagsCode of a scheduled message written at `phys_offset` (the current
        table when None): an unknown level waits one second."""
        delays = self._delays_at(phys_offset)
        level = min(level, len(delays))
        return store_timestamp + (delays[level - 1] if level >= 1 else UNKNOWN_LEVEL_DELAY_MS)

    def deliver_times(self, levels: np.ndarray, store_timestamps: np.ndarray,
                      phys_offsets: np.ndarray | None = None) -> np.ndarray:
        """deliver_time of many positive levels at once."""
        tables, starts = self._state
        if phys_offsets is None or len(tables) == 1:
            return store_timestamps + _lookup(tables[-1].delays_ms, levels)
        which = np.maximum(np.searchsorted(starts, phys_offsets, side="right") - 1, 0)
        delays = np.empty(len(levels), dtype=np.int64)
        for i in np.unique(which).tolist():
            rows = which == i
            delays[rows] = _lookup(tables[i].delays_ms, levels[rows])
        return store_timestamps + delays

    def changed_to(self, spec: str, from_phys_offset: int) -> list[DelayTable]:
        """The tables after `spec` becomes the table of messages written from `from_phys_offset`
        on (not applied: see `use_tables`). Raises InvalidConfigError for a bad table."""
        try:
            delays = tuple(parse_delay_levels(spec))
        except ValueError as exc:
            raise InvalidConfigError(str(exc)) from None
        tables = self.tables
        if from_phys_offset < tables[-1].from_phys_offset:
            raise InvalidConfigError("a delay level table cannot apply from before the current one")
        if from_phys_offset == tables[-1].from_phys_offset and len(tables) > 1:
            tables.pop()  # nothing was written under the table it replaces
        if tables[-1].delays_ms != delays:
            tables.append(DelayTable(from_phys_offset, spec, delays))
        return tables



def _lookup(delays: tuple[int, ...], levels: np.ndarray) -> np.ndarray:
    table = np.asarray(delays, dtype=np.int64)
    return table[np.minimum(levels, len(delays)) - 1]


def parse_delay_levels(spec: str) -> list[int]:
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError("the delay level table is empty")
    result = []
    for token in spec.split(" "):
        if not token:
            raise ValueError(f"delay level table {spec!r} has a double space")
        unit = UNIT_MS.get(token[-1])
        number = token[:-1]
        if unit is None or not number.isdigit() or int(number) <= 0:
            raise ValueError(f"bad delay level {token!r}: use a positive number with s, m, h or d")
        if int(number) * unit > MAX_DELAY_MS:
            raise ValueError(f"delay level {token!r} is longer than {MAX_DELAY_MS // UNIT_MS['d']} days")
        result.append(int(number) * unit)
    if len(result) > MAX_LEVELS:
        raise ValueError(f"the delay level table has {len(result)} levels; at most {MAX_LEVELS}")
    return result
