"""The delay level table ('1s 5s 10s ...'): level n (1-based) -> delay in milliseconds."""

from __future__ import annotations

import numpy as np

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


class DelayLevels:
    def __init__(self, spec: str = DEFAULT_DELAY_LEVELS):
        self.spec = spec
        self.delays_ms = parse_delay_levels(spec)

    @property
    def max_level(self) -> int:
        return len(self.delays_ms)

    def clamp(self, level: int) -> int:
        return min(level, self.max_level)

    def delay_ms(self, level: int) -> int | None:
        if 1 <= level <= self.max_level:
            return self.delays_ms[level - 1]
        return None

    def deliver_time(self, level: int, store_timestamp: int) -> int:
        """ConsumeQueue tagsCode of a scheduled message (an unknown level waits one second)."""
        delay = self.delay_ms(self.clamp(level))
        return store_timestamp + (delay if delay is not None else 1000)

    def deliver_times(self, levels: np.ndarray, store_timestamps: np.ndarray) -> np.ndarray:
        """deliver_time of many positive levels at once."""
        table = np.asarray(self.delays_ms, dtype=np.int64)
        return store_timestamps + table[np.minimum(levels, self.max_level) - 1]


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
        result.append(int(number) * unit)
    return result
