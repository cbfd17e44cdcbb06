"""The dead-letter index: per dead-letter queue, what the inbox sorts and filters by (commit log
offset, store time, tag hash, reason, store host), one fixed unit per dead letter in queue order,
so that a page of the inbox reads its page of records and no others.

It is a projection like the consume queues: it follows the dead-letter queues' units (kept up to
date by dispatch), reads each new dead letter once, and is cut back with them. A store open for
writing keeps it under DEAD_LETTER_DIR; a read-only store builds it in memory and writes nothing.

Per queue directory: `units` (DEAD_LETTER_UNIT each), `reasons` and `hosts` (one JSON value a
line; a unit names its line), `again` (one JSON line per dead letter of a resent copy: the dead
letter it was resent from, then its own commit log offset and offset id). A torn last unit or
line is cut at load; the next catch-up adds the dead letters again from the consume queue."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from store.errors import StoreError
from store.format import ids, topics
from store.format.codec import StoredMessage, decode_for_dispatch, store_host_for_dispatch
from store.format.hosts import HostAddress
from store.format.javahash import tags_code
from store.format.layouts import DEAD_LETTER_UNIT
from store.log.commitlog import CommitLog
from store.log.paths import (
    DEAD_LETTER_AGAIN_FILE,
    DEAD_LETTER_HOSTS_FILE,
    DEAD_LETTER_REASONS_FILE,
    DEAD_LETTER_UNITS_FILE,
    StorePaths,
)
from store.projections.consume_queue import ConsumeQueues

UNIT_DTYPE = np.dtype([("queue_offset", ">i8"), ("phys", ">i8"), ("store_ts", ">i8"), ("tags", ">i8"),
                       ("size", ">i4"), ("reason", ">i4"), ("host", ">i4")])
assert UNIT_DTYPE.itemsize == DEAD_LETTER_UNIT.size
SCAN_CHUNK = 65_536  # units looked at together, newest first
ADD_BATCH = 4_096  # dead letters read, then indexed and written together

# The dead-letter reasons a trace record tells: (dead-letter topic, queue id, queue offset, reason).
Reasons = Callable[[StoredMessage], list[tuple[str, int, int, str]]]


class DeadLetterRecord(NamedTuple):
    """What the index reads of a dead letter's record."""

    phys_offset: int
    store_timestamp: int
    size: int
    properties: dict[str, str]
    store_host: HostAddress


def _read(commitlog: CommitLog, phys_offset: int) -> DeadLetterRecord:
    """The record's head and properties, its body left alone."""
    seg, pos = commitlog.view(phys_offset)
    view = decode_for_dispatch(seg.buf, pos, path=str(seg.path))
    return DeadLetterRecord(view.phys_offset, view.store_timestamp, view.size, view.properties,
                            store_host_for_dispatch(seg.buf, pos, view.sys_flag))


class _Lines:
    """An append-only file of JSON values, one a line (in memory only without a path)."""

    def __init__(self, path: Path | None):
        self.path = path
        self.values: list = []
        if path is None or not path.exists():
            return
        data = path.read_bytes()
        whole = data[:data.rfind(b"\n") + 1]
        if len(whole) < len(data):
            os.truncate(path, len(whole))
        self.values = [json.loads(line) for line in whole.splitlines()]

    def append(self, value) -> int:
        if self.path is not None:
            with open(self.path, "ab") as f:
                f.write(json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\n")
        self.values.append(value)
        return len(self.values) - 1

    def rewrite(self, values: list) -> None:
        self.values = []
        if self.path is not None:
            self.path.write_bytes(b"")
        for value in values:
            self.append(value)


class _Names:
    """Texts numbered in the order first seen (reasons, hosts), kept in a _Lines file."""

    def __init__(self, path: Path | None):
        self._lines = _Lines(path)
        self.by_name = {name: number for number, name in enumerate(self._lines.values)}

    @property
    def names(self) -> list[str]:
        return self._lines.values

    def number(self, name: str) -> int:
        found = self.by_name.get(name)
        if found is None:
            found = self.by_name[name] = self._lines.append(name)
        return found


@dataclass(frozen=True)
class DeadLetterUnits:
    """A queue's dead letters as of one moment: read it, never change it."""

    topic: str
    queue_id: int
    units: np.ndarray  # UNIT_DTYPE, in queue (and commit log) order
    reasons: list[str]  # by number; append-only, so later numbers may be there too
    hosts: list[str]
    again: dict[str, tuple[int, str]]  # resent dead letter's offset id -> (phys, offset id) of its copy's dead letter

    def offset_msg_id(self, row: int) -> str:
        unit = self.units[row]
        return ids.create_offset_msg_id(HostAddress.parse(self.hosts[int(unit["host"])]), int(unit["phys"]))

    def reason(self, row: int) -> str:
        return self.reasons[int(self.units[row]["reason"])]

    def reason_numbers(self, needle: str) -> np.ndarray:
        """Which reason numbers contain `needle` (case-insensitive): a table to index by number."""
        wanted = needle.lower()
        table = np.zeros(len(self.reasons) + 1, dtype=bool)
        for number, reason in enumerate(self.reasons):
            if wanted in reason.lower():
                table[number] = True
        return table

    def newest_first(self, before_phys: int | None, keep: Callable[[np.ndarray], np.ndarray],
                     limit: int) -> Iterator[int]:
        """Rows older than `before_phys` (all with None) that `keep` (units -> bool mask) keeps,
        newest first, looked at SCAN_CHUNK units at a time; at most `limit` of them."""
        units = self.units
        end = len(units) if before_phys is None else int(np.searchsorted(units["phys"], before_phys, "left"))
        found = 0
        while end > 0 and found < limit:
            start = max(0, end - SCAN_CHUNK)
            rows = np.flatnonzero(keep(units[start:end]))[::-1][:limit - found] + start
            found += len(rows)
            yield from rows.tolist()
            end = start


class DeadLetterQueue:
    """One dead-letter queue's units, in memory, and on disk when `directory` is given."""

    def __init__(self, topic: str, queue_id: int, directory: Path | None):
        self.topic = topic
        self.queue_id = queue_id
        self.directory = directory
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
        self._units_path = directory / DEAD_LETTER_UNITS_FILE if directory is not None else None
        self.reasons = _Names(directory / DEAD_LETTER_REASONS_FILE if directory is not None else None)
        self.hosts = _Names(directory / DEAD_LETTER_HOSTS_FILE if directory is not None else None)
        self._host_numbers: dict[HostAddress, int] = {}
        self._again_lines = _Lines(directory / DEAD_LETTER_AGAIN_FILE if directory is not None else None)
        self.again = {resent_from: (phys, offset_id) for resent_from, phys, offset_id in self._again_lines.values}
        self._units = np.zeros(0, dtype=UNIT_DTYPE)
        self.count = 0
        self._load_units()

    def _load_units(self) -> None:
        if self._units_path is None or not self._units_path.exists():
            return
        data = self._units_path.read_bytes()
        whole = len(data) - len(data) % UNIT_DTYPE.itemsize
        if whole < len(data):
            os.truncate(self._units_path, whole)
        units = np.frombuffer(data[:whole], dtype=UNIT_DTYPE).copy()
        known = (units["reason"] < len(self.reasons.names)) & (units["host"] < len(self.hosts.names))
        if not known.all():  # a unit whose reason or host line was lost: read again from the queue
            units = units[:int(np.argmin(known))]
            os.truncate(self._units_path, len(units) * UNIT_DTYPE.itemsize)
        self._units = units
        self.count = len(units)

    def _host_number(self, host: HostAddress) -> int:
        found = self._host_numbers.get(host)
        if found is None:
            found = self._host_numbers[host] = self.hosts.number(str(host))
        return found

    @property
    def next_offset(self) -> int | None:
        """The queue offset after the last unit (None when there is none)."""
        return int(self._units[self.count - 1]["queue_offset"]) + 1 if self.count else None

    def add(self, found: list[tuple[int, DeadLetterRecord]]) -> None:
        """Index these dead letters: (queue offset, record), in queue order, after the last unit."""
        if not found:
            return
        units = np.zeros(len(found), dtype=UNIT_DTYPE)
        rows = []
        for queue_offset, msg in found:
            resent_from = msg.properties.get(topics.RESENT_FROM)
            if resent_from is not None:
                offset_msg_id = ids.create_offset_msg_id(msg.store_host, msg.phys_offset)
                self._again_lines.append([resent_from, msg.phys_offset, offset_msg_id])
                self.again[resent_from] = (msg.phys_offset, offset_msg_id)
            rows.append((queue_offset, msg.phys_offset, msg.store_timestamp,
                         tags_code(msg.properties.get(topics.TAGS)), msg.size,
                         self.reasons.number(msg.properties.get(topics.DLQ_REASON, "")),
                         self._host_number(msg.store_host)))
        units[:] = rows
        if self.count + len(units) > len(self._units):
            grown = np.zeros(max(1024, 2 * (self.count + len(units))), dtype=UNIT_DTYPE)
            grown[:self.count] = self._units[:self.count]
            self._units = grown  # readers keep the array they were given
        self._units[self.count:self.count + len(units)] = units
        self.count += len(units)
        if self._units_path is not None:
            with open(self._units_path, "ab") as f:
                f.write(units.tobytes())

    def explain(self, queue_offset: int, reason: str) -> None:
        """The reason of a dead letter indexed without one (its record carries none: the trace said)."""
        row = int(np.searchsorted(self._units["queue_offset"][:self.count], queue_offset, "left"))
        if row == self.count or int(self._units[row]["queue_offset"]) != queue_offset:
            return
        if self.reasons.names[int(self._units[row]["reason"])]:
            return
        self._units["reason"][row] = self.reasons.number(reason)  # readers see "" or the reason
        if self._units_path is not None:
            with open(self._units_path, "r+b") as f:
                f.seek(row * UNIT_DTYPE.itemsize)
                f.write(DEAD_LETTER_UNIT.pack(*self._units[row].tolist()))

    def truncate_from(self, queue_offset: int) -> None:
        """Drop the units from `queue_offset` on (the consume queue was cut back by recovery)."""
        keep = int(np.searchsorted(self._units["queue_offset"][:self.count], queue_offset, "left"))
        if keep == self.count:
            return
        cut_phys = int(self._units[keep]["phys"])
        self._units = self._units[:keep].copy()
        self.count = keep
        if self._units_path is not None:
            os.truncate(self._units_path, keep * UNIT_DTYPE.itemsize)
        kept = [line for line in self._again_lines.values if line[1] < cut_phys]
        if len(kept) < len(self._again_lines.values):
            self._again_lines.rewrite(kept)
            self.again = {resent_from: (phys, offset_id) for resent_from, phys, offset_id in kept}

    def snapshot(self) -> DeadLetterUnits:
        return DeadLetterUnits(self.topic, self.queue_id, self._units[:self.count], self.reasons.names,
                               self.hosts.names, self.again)


class DeadLetterIndex:
    """Every dead-letter queue's units. `catch_up` follows the consume queues (dispatch calls it)."""

    def __init__(self, paths: StorePaths, *, writable: bool):
        self._paths = paths
        self._writable = writable
        self._queues: dict[tuple[str, int], DeadLetterQueue] = {}
        self._lock = threading.Lock()
        # Until the store has opened: the lowest commit log offset of a dead letter indexed without
        # a reason (its trace, written before, is read once the index is built).
        self.unexplained_from: int | None = None
        self.opening = True

    def queue(self, topic: str, queue_id: int) -> DeadLetterQueue:
        found = self._queues.get((topic, queue_id))
        if found is None:
            directory = self._paths.dead_letter_dir(topic, queue_id) if self._writable else None
            found = self._queues[(topic, queue_id)] = DeadLetterQueue(topic, queue_id, directory)
        return found

    def catch_up(self, queues: ConsumeQueues, commitlog: CommitLog) -> int:
        """Add the dead letters the consume queues hold and the index lacks; drop the units the
        queues no longer reach. Returns how many dead letters were read."""
        added = 0
        with self._lock:
            for topic, topic_queues in queues.topics().items():
                if not topics.is_dlq_topic(topic):
                    continue
                for cq in topic_queues:
                    added += self._follow(cq, commitlog)
        return added

    def _follow(self, cq, commitlog: CommitLog) -> int:
        index = self.queue(cq.topic, cq.queue_id)
        start = index.next_offset
        if start is not None and start > cq.max_offset:
            index.truncate_from(cq.max_offset)
            start = index.next_offset
        start = max(start if start is not None else 0, cq.min_offset)
        added = 0
        for first in range(start, cq.max_offset, ADD_BATCH):
            found = []
            for queue_offset in range(first, min(first + ADD_BATCH, cq.max_offset)):
                unit = cq.get(queue_offset)
                if unit is None or unit.size <= 0 or unit.size == 0x7FFFFFFF:
                    continue
                try:
                    msg = _read(commitlog, unit.phys_offset)
                except StoreError:
                    continue  # gone with retention: not in the inbox
                found.append((queue_offset, msg))
                if self.opening and topics.DLQ_REASON not in msg.properties:
                    self.unexplained_from = min(self.unexplained_from or msg.phys_offset, msg.phys_offset)
            index.add(found)
            added += len(found)
        return added

    def explain(self, reasons: list[tuple[str, int, int, str]]) -> None:
        """(dead-letter topic, queue id, queue offset, reason) for dead letters whose records carry no reason."""
        with self._lock:
            for topic, queue_id, queue_offset, reason in reasons:
                found = self._queues.get((topic, queue_id))
                if found is not None:
                    found.explain(queue_offset, reason)

    def snapshot(self, topic: str) -> list[DeadLetterUnits]:
        with self._lock:
            return [q.snapshot() for (name, _), q in sorted(self._queues.items()) if name == topic]
