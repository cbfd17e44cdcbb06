"""Delivery of delayed messages: each delay level's queue of SCHEDULE_TOPIC_XXXX is walked from
its saved progress, and every message whose deliver time has come is put again, as a new
record, to its real topic and queue (RocketMQ's ScheduleMessageService).

The delivered record keeps the scheduled record's properties string as it is (DELAY,
REAL_TOPIC and REAL_QID included), as RocketMQ's does. Progress is saved in
config/delayOffset.json ({"offsetTable": {level: next queue offset}}); a crash between a
delivery and the next save delivers that message again (at least once).

A level's queue is in deliver-time order while its delay stays the same, so only its head is
looked at. When the delay table shrinks a level's delay while messages wait in it, the
messages written after the change are due before some written earlier: the queue is split
there into runs, each in order with its own head. The heads of the later runs are saved
beside the offsetTable as "laterRuns" (RocketMQ ignores the key; it would walk from the
offsetTable's offset and deliver the later runs' delivered messages once more).

Every level with a queue on disk is delivered, also one the current table no longer has."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from store.errors import StoreError
from store.format import topics
from store.format.codec import StoredMessage
from store.format.delay_levels import MAX_DELAY_MS, DelayLevels
from store.log.config_file import OffsetTableFile
from store.projections.consume_queue import ConsumeQueue, ConsumeQueues

PROGRESS_FILE = "delayOffset.json"
LATER_RUNS_KEY = "laterRuns"
MAX_DELIVERIES_PER_PASS = 10_000
FILLER_UNIT_SIZE = 0x7FFFFFFF  # a consume queue unit that only keeps later units reachable


class ScheduleProgressError(StoreError):
    """delayOffset.json holds something other than {level: offset}."""


class DueMessage(NamedTuple):
    """A scheduled (or timed) message whose time has come."""

    key: tuple[int, int]  # where it waits, in the terms of the service that returned it
    deliver_ms: int
    message: StoredMessage


@dataclass
class DeliveryPass:
    delivered: list = field(default_factory=list)  # PutResults of the new records
    skipped: list[tuple[int, str]] = field(default_factory=list)  # (commit log offset, why)
    full: bool = False  # the pass delivered as many as one pass may: more may be due


def effective_deliver_ms(deliver_ms: int, now_ms: int) -> int:
    """A deliver time further ahead than any message may wait comes from a clock that went
    back: such a message is due now rather than stuck."""
    return now_ms if deliver_ms - now_ms > MAX_DELAY_MS else deliver_ms


class ScheduleService(OffsetTableFile):
    def __init__(self, config_dir: Path, queues: ConsumeQueues, delay_levels: DelayLevels):
        super().__init__(Path(config_dir) / PROGRESS_FILE, ScheduleProgressError)
        self.queues = queues
        self.delay_levels = delay_levels
        content = self.read_content()
        table = self.read_table(content)
        try:
            # level -> runs [first queue offset, head]; the first run's head is the offsetTable's
            self._runs = {int(level): [[0, int(offset)]] for level, offset in table.items()}
            for level, later in (content.get(LATER_RUNS_KEY) or {}).items():
                runs = self._runs.setdefault(int(level), [[0, 0]])
                runs.extend([int(start), int(head)] for start, head in later)
                if any(not (runs[i][1] <= runs[i + 1][0] <= runs[i + 1][1]) for i in range(len(runs) - 1)):
                    raise ValueError(f"level {level}: runs overlap")
        except (TypeError, ValueError, AttributeError) as exc:
            raise ScheduleProgressError(f"{self.path}: levels and offsets must be integers ({exc})") from None
        on_disk = [cq.queue_id for cq in queues.topics().get(topics.SCHEDULE_TOPIC, [])]
        self._levels_on_disk = max(on_disk, default=-1) + 1

    def progress(self) -> dict[int, int]:
        with self.lock:
            return {level: runs[0][1] for level, runs in self._runs.items()}

    def _levels(self) -> range:
        """Every level that may have a queue: those of every table used, and any on disk beyond."""
        while self.queues.get(topics.SCHEDULE_TOPIC, self._levels_on_disk) is not None:
            self._levels_on_disk += 1
        return range(1, max(self.delay_levels.most_levels, self._levels_on_disk) + 1)

    def _spans(self, level: int, cq: ConsumeQueue) -> list[tuple[int, int]]:
        """The waiting part of each run of a level: (first waiting offset, end)."""
        runs = self._runs.get(level) or [[0, 0]]
        spans = []
        for i, (start, head) in enumerate(runs):
            end = runs[i + 1][0] if i + 1 < len(runs) else cq.max_offset
            spans.append((max(start, head, cq.min_offset), end))
        return spans

    def pending(self) -> dict[int, int]:
        """Messages waiting per delay level."""
        waiting = {}
        with self.lock:
            for level in self._levels():
                cq = self.queues.get(topics.SCHEDULE_TOPIC, level - 1)
                if cq is not None:
                    waiting[level] = sum(max(0, end - first) for first, end in self._spans(level, cq))
        return waiting

    def due(self, now_ms: int, read: Callable[[int], StoredMessage],
            limit: int = MAX_DELIVERIES_PER_PASS) -> tuple[list[DueMessage], list[tuple[int, str]]]:
        """The scheduled messages due at `now_ms`, in level and queue order, keyed (level, queue
        offset), and those that cannot be read (passed over for good)."""
        due, skipped = [], []
        for level in self._levels():
            cq = self.queues.get(topics.SCHEDULE_TOPIC, level - 1)
            if cq is None:
                continue
            for offset, end in self._spans(level, cq):
                while offset < end and len(due) < limit:
                    unit = cq.get(offset)
                    if unit is None or unit.size == FILLER_UNIT_SIZE:
                        self._passed(level, offset)
                        offset += 1
                        continue
                    if effective_deliver_ms(unit.tags_code, now_ms) > now_ms:
                        break
                    try:
                        msg = read(unit.phys_offset)
                    except StoreError as exc:
                        skipped.append((unit.phys_offset, f"unreadable: {exc}"))
                        self._passed(level, offset)
                    else:
                        due.append(DueMessage((level, offset), unit.tags_code, msg))
                    offset += 1
        return due, skipped

    def next_due_ms(self, now_ms: int) -> int | None:
        """The earliest deliver time among the heads of all runs, None when nothing waits."""
        earliest = None
        for level in self._levels():
            cq = self.queues.get(topics.SCHEDULE_TOPIC, level - 1)
            if cq is None:
                continue
            for offset, end in self._spans(level, cq):
                unit = cq.get(offset) if offset < end else None
                if unit is not None:
                    deliver_ms = effective_deliver_ms(unit.tags_code, now_ms)
                    earliest = deliver_ms if earliest is None else min(earliest, deliver_ms)
        return earliest

    def delivered(self, items: list[DueMessage]) -> None:
        for item in items:
            self._passed(*item.key)

    def _passed(self, level: int, offset: int) -> None:
        """The message at `offset` of `level` is done with (delivered or undeliverable)."""
        with self.lock:
            runs = self._runs.setdefault(level, [[0, 0]])
            i = len(runs) - 1
            while i > 0 and runs[i][0] > offset:
                i -= 1
            if offset + 1 <= runs[i][1]:
                return
            runs[i][1] = offset + 1
            while i + 1 < len(runs) and runs[i][1] >= runs[i + 1][0]:  # a finished run joins the next
                runs[i][1] = max(runs[i][1], runs[i + 1][1])
                del runs[i + 1]
            self.mark_changed()

    def table_changed(self, now_ms: int) -> None:
        """After the delay table changed (store lock held): a level whose new delay makes a
        message written now due before the last one waiting starts a new run."""
        with self.lock:
            for level in range(1, self.delay_levels.max_level + 1):
                cq = self.queues.get(topics.SCHEDULE_TOPIC, level - 1)
                if cq is None or self._spans(level, cq)[-1][0] >= cq.max_offset:
                    continue
                last = cq.get(cq.max_offset - 1)
                if last is not None and last.tags_code > now_ms + self.delay_levels.delay_ms(level):
                    self._runs.setdefault(level, [[0, 0]]).append([cq.max_offset, cq.max_offset])
                    self.mark_changed()

    def table_json(self) -> dict:
        return {str(level): runs[0][1] for level, runs in sorted(self._runs.items())}

    def content_json(self) -> dict:
        content = {"offsetTable": self.table_json()}
        later = {str(level): [list(run) for run in runs[1:]] for level, runs in sorted(self._runs.items())
                 if len(runs) > 1}
        if later:
            content[LATER_RUNS_KEY] = later
        return content
