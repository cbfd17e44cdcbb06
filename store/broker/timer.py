"""Delivery at arbitrary times: a message put with a delivery time (TIMER_DELIVER_MS) waits in
the timer topic (rmq_sys_wheel_timer, queue 0), whose consume queue tagsCode is that time, and
is put again, as a new record with the same UNIQ_KEY, to its real topic and queue when due.

Waiting messages are kept in a min-heap of (deliver time, queue offset), and delivered in that
order. Progress, in config/timerProgress.json, is two numbers whatever the number waiting:

- the cursor, the (deliver time, queue offset) of the last message delivered: everything
  before it has been delivered and nothing after it. A message put later never lands before
  it, as the record builder sends a time at or before the cursor's straight to its topic;
- the watermark, the queue offset below which everything is delivered, where the scan that
  rebuilds the heap on open starts.

Saved after a clean close, nothing is delivered twice; after a crash, what was delivered
since the last save is delivered again (at least once). A record that reaches the timer queue
already behind the cursor (written by another broker, or without a delivery time) is
delivered at once; on open it counts as delivered."""

from __future__ import annotations

import heapq
from collections.abc import Callable
from pathlib import Path

from store.broker.schedule import FILLER_UNIT_SIZE, MAX_DELIVERIES_PER_PASS, DueMessage
from store.errors import StoreError
from store.format import topics
from store.format.codec import StoredMessage
from store.log.config_file import ConfigFileError, StateFile, read_config
from store.projections.consume_queue import ConsumeQueue, ConsumeQueues

TIMER_PROGRESS_FILE = "timerProgress.json"
TIMER_QUEUE_ID = 0
NOTHING_DELIVERED = (-(2**63), -1)


class TimerProgressError(StoreError):
    """timerProgress.json is unreadable."""


class TimerService(StateFile):
    def __init__(self, config_dir: Path, queues: ConsumeQueues):
        super().__init__(Path(config_dir) / TIMER_PROGRESS_FILE)
        self.queues = queues
        try:
            content = read_config(self.path) or {}
            self._watermark = int(content.get("watermark", 0))
            through = content.get("deliveredThrough")
            self._cursor = NOTHING_DELIVERED if through is None else (int(through[0]), int(through[1]))
        except (ConfigFileError, TypeError, ValueError, IndexError, AttributeError) as exc:
            raise TimerProgressError(f"{self.path}: unreadable timer progress ({exc})") from None
        self._heap: list[tuple[int, int, int]] = []  # (deliver time, queue offset, commit log offset)
        self._waiting: set[int] = set()  # queue offsets not delivered yet, at or above the watermark
        self._loaded_to = self._watermark
        self._load(on_open=True)

    @property
    def floor_ms(self) -> int:
        """The deliver time of the last message delivered (a later put goes after it)."""
        return max(self._cursor[0], 0)

    def _queue(self) -> ConsumeQueue | None:
        return self.queues.get(topics.TIMER_TOPIC, TIMER_QUEUE_ID)

    def _load(self, *, on_open: bool = False) -> None:
        """Push the queue's new units onto the heap."""
        cq = self._queue()
        if cq is None or self._loaded_to >= cq.max_offset:
            return
        start = max(self._loaded_to, cq.min_offset)
        for unit in cq.units(start, cq.max_offset - start):
            if unit.size == FILLER_UNIT_SIZE or (on_open and (unit.tags_code, unit.queue_offset) <= self._cursor):
                continue
            heapq.heappush(self._heap, (unit.tags_code, unit.queue_offset, unit.phys_offset))
            self._waiting.add(unit.queue_offset)
        with self.lock:
            self._loaded_to = cq.max_offset
            self._watermark = max(self._watermark, cq.min_offset)
            self._raise_watermark()

    def _raise_watermark(self) -> None:
        start = self._watermark
        while self._watermark < self._loaded_to and self._watermark not in self._waiting:
            self._watermark += 1
        if self._watermark != start:
            self.mark_changed()

    def pending(self) -> int:
        """Messages waiting for their delivery time (read only: callable without the store lock)."""
        cq = self._queue()
        return len(self._heap) + (max(0, cq.max_offset - self._loaded_to) if cq is not None else 0)

    def next_due_ms(self) -> int | None:
        """The earliest delivery time waiting, None when nothing waits."""
        self._load()
        return self._heap[0][0] if self._heap else None

    def due(self, now_ms: int, read: Callable[[int], StoredMessage],
            limit: int = MAX_DELIVERIES_PER_PASS) -> tuple[list[DueMessage], list[tuple[int, str]]]:
        """The messages due at `now_ms` in delivery order, keyed (deliver time, queue offset),
        taken off the heap: hand them to `delivered` once their copies are written, or back to
        `requeue`. An unreadable one comes without its message and is listed as skipped."""
        self._load()
        due, skipped = [], []
        while self._heap and len(due) < limit and self._heap[0][0] <= now_ms:
            deliver_ms, offset, phys = heapq.heappop(self._heap)
            try:
                msg = read(phys)
            except StoreError as exc:
                skipped.append((phys, f"unreadable: {exc}"))
                msg = None
            due.append(DueMessage((deliver_ms, offset), deliver_ms, msg))
        return due, skipped

    def requeue(self, items: list[DueMessage]) -> None:
        for item in items:
            heapq.heappush(self._heap, (item.deliver_ms, item.key[1], item.message.phys_offset if item.message
                                        else self._queue().get(item.key[1]).phys_offset))

    def delivered(self, items: list[DueMessage]) -> None:
        if not items:
            return
        with self.lock:
            for item in items:
                self._cursor = max(self._cursor, item.key)
                self._waiting.discard(item.key[1])
            self._raise_watermark()
            self.mark_changed()

    def content_json(self) -> dict:
        through = None if self._cursor == NOTHING_DELIVERED else list(self._cursor)
        return {"watermark": self._watermark, "deliveredThrough": through}
