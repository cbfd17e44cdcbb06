"""The delay level table of a store another broker wrote, read back from its scheduled messages.

A broker's table (`messageDelayLevel` in its broker.conf) is not kept in the store. But every
unit of SCHEDULE_TOPIC_XXXX queue `level - 1` holds, as its tagsCode, the time the message is
due (its store time plus the level's delay), so each level that holds a message gives its delay
exactly. Levels without a message keep the fallback table's delay (RocketMQ's default unless the
caller passes another), and the source says which levels were seen."""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from store.errors import StoreError
from store.format import codec, topics
from store.format.delay_levels import DEFAULT_DELAY_LEVELS, MAX_DELAY_MS, UNIT_MS, parse_delay_levels

FILE_TABLE_TEXT = "the store's own table (config/delayLevels.json)"
GIVEN_TABLE_TEXT = "given when the store was opened"
DEFAULT_TABLE_TEXT = "RocketMQ's default table (no scheduled message to infer a table from)"
UNITS_READ_PER_LEVEL = 1000  # the newest units of each level: opening a large store stays quick
SPEC_UNITS = ("d", "h", "m", "s")


@dataclass(frozen=True)
class DelayTableSource:
    """Where the delay level table in use came from, for the console and `store check`."""

    kind: str  # "file" (the store's own config/delayLevels.json), "given", "inferred" or "default"
    text: str
    scheduled_messages: int = 0
    levels_seen: tuple[int, ...] = ()


@dataclass(frozen=True)
class InferredTable:
    spec: str
    source: DelayTableSource


def infer_delay_table(schedule_queues: Iterable, store_time_at: Callable[[int], int | None],
                      fallback_spec: str = DEFAULT_DELAY_LEVELS,
                      fallback_name: str = "RocketMQ's default table") -> InferredTable | None:
    """The table the scheduled messages of SCHEDULE_TOPIC_XXXX's queues imply, or None when
    no level gives a usable delay. `store_time_at(phys)` reads a record's store time (None when
    the record cannot be read)."""
    delays_by_level: dict[int, Counter] = {}
    messages = 0
    for cq in schedule_queues:
        level = cq.queue_id + 1
        first = max(cq.min_offset, cq.max_offset - UNITS_READ_PER_LEVEL)
        for unit in cq.units(first, cq.max_offset - first):
            stored_at = store_time_at(unit.phys_offset)
            if stored_at is None:
                continue
            messages += 1
            delay = unit.tags_code - stored_at
            if _expressible(delay):
                delays_by_level.setdefault(level, Counter())[delay] += 1
    if not delays_by_level:
        return None
    fallback = parse_delay_levels(fallback_spec)
    delays = list(fallback) + [fallback[-1]] * (max(delays_by_level) - len(fallback))
    for level, seen in delays_by_level.items():
        delays[level - 1] = seen.most_common(1)[0][0]
    levels = tuple(sorted(delays_by_level))
    unseen = len(delays) - len(levels)
    text = (f"inferred from {messages} scheduled message{'s' if messages != 1 else ''} "
            f"(level{'s' if len(levels) > 1 else ''} {_level_list(levels)})")
    if unseen:
        text += f"; the other {unseen} level{'s' if unseen > 1 else ''} from {fallback_name}"
    return InferredTable(" ".join(_token(d) for d in delays),
                         DelayTableSource("inferred", text, messages, levels))


def store_time_reader(commitlog) -> Callable[[int], int | None]:
    """store_time_at for infer_delay_table: the store time of the record at a physical offset,
    None for what cannot be read."""
    def store_time_at(phys: int) -> int | None:
        try:
            seg, pos = commitlog.view(phys)
            return codec.decode_for_dispatch(seg.buf, pos).store_timestamp
        except (StoreError, ValueError, struct.error):
            return None
    return store_time_at


def schedule_queues_of(queues) -> list:
    return [cq for cq in queues if cq.topic == topics.SCHEDULE_TOPIC]


def _expressible(delay_ms: int) -> bool:
    return 0 < delay_ms <= MAX_DELAY_MS and delay_ms % UNIT_MS["s"] == 0


def _token(delay_ms: int) -> str:
    for unit in SPEC_UNITS:
        if delay_ms % UNIT_MS[unit] == 0:
            return f"{delay_ms // UNIT_MS[unit]}{unit}"
    raise ValueError(f"{delay_ms} ms is not a whole number of seconds")


def _level_list(levels: tuple[int, ...]) -> str:
    if len(levels) == 1:
        return str(levels[0])
    return ", ".join(str(level) for level in levels[:-1]) + f" and {levels[-1]}"
