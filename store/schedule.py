"""Delivery of delayed messages: each delay level's queue of SCHEDULE_TOPIC_XXXX is walked from
its saved progress, and every message whose deliver time has come is put again, as a new
record, to its real topic and queue (RocketMQ's ScheduleMessageService).

The delivered record keeps the scheduled record's properties string as it is (DELAY,
REAL_TOPIC and REAL_QID included), as RocketMQ's does. Progress is saved in
config/delayOffset.json ({"offsetTable": {level: next queue offset}}); a crash between a
delivery and the next save delivers that message again (at least once)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from store import topics
from store.codec import StoredMessage
from store.config_file import OffsetTableFile
from store.consume_queue import ConsumeQueues
from store.delay_levels import DelayLevels
from store.errors import StoreError

PROGRESS_FILE = "delayOffset.json"
MAX_DELIVERIES_PER_PASS = 10_000


class ScheduleProgressError(StoreError):
    """delayOffset.json holds something other than {level: offset}."""


@dataclass
class DeliveryPass:
    delivered: list = field(default_factory=list)  # PutResults of the new records
    skipped: list[tuple[int, str]] = field(default_factory=list)  # (commit log offset, why)


class ScheduleService(OffsetTableFile):
    def __init__(self, config_dir: Path, queues: ConsumeQueues, delay_levels: DelayLevels):
        super().__init__(Path(config_dir) / PROGRESS_FILE, ScheduleProgressError)
        self.queues = queues
        self.delay_levels = delay_levels
        try:
            self._progress = {int(level): int(offset) for level, offset in self.read_table().items()}
        except (TypeError, ValueError):
            raise ScheduleProgressError(f"{self.path}: levels and offsets must be integers") from None

    def progress(self) -> dict[int, int]:
        with self.lock:
            return dict(self._progress)

    def pending(self) -> dict[int, int]:
        """Messages waiting per delay level."""
        waiting = {}
        for level in range(1, self.delay_levels.max_level + 1):
            cq = self.queues.get(topics.SCHEDULE_TOPIC, level - 1)
            if cq is not None:
                waiting[level] = max(0, cq.max_offset - max(self._progress.get(level, 0), cq.min_offset))
        return waiting

    def due(self, now_ms: int, read: Callable[[int], StoredMessage],
            limit: int = MAX_DELIVERIES_PER_PASS) -> tuple[list[tuple[int, StoredMessage, int]], list]:
        """The scheduled messages due at `now_ms`, in level and queue order, as
        (level, message, next offset of its level), and those that cannot be delivered."""
        due, skipped = [], []
        for level in range(1, self.delay_levels.max_level + 1):
            cq = self.queues.get(topics.SCHEDULE_TOPIC, level - 1)
            if cq is None:
                continue
            offset = max(self._progress.get(level, 0), cq.min_offset)
            delay = self.delay_levels.delay_ms(level) or 0
            while offset < cq.max_offset and len(due) < limit:
                unit = cq.get(offset)
                deliver_at = unit.tags_code if unit is not None else now_ms
                if deliver_at - now_ms > delay:  # further ahead than its delay: treat as due now
                    deliver_at = now_ms
                if deliver_at > now_ms:
                    break
                offset += 1
                try:
                    msg = read(unit.phys_offset)
                except StoreError as exc:
                    skipped.append((unit.phys_offset, f"unreadable: {exc}"))
                    self.advance(level, offset)
                    continue
                due.append((level, msg, offset))
        return due, skipped

    def advance(self, level: int, offset: int) -> None:
        with self.lock:
            if offset > self._progress.get(level, 0):
                self._progress[level] = offset
                self.mark_changed()

    def table_json(self) -> dict:
        return {str(level): offset for level, offset in sorted(self._progress.items())}
