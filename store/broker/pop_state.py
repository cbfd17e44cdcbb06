"""In-flight state of pop-style receive, per consumer group and topic: the next queue offset
to hand out of each queue, every message handed out and not yet done, and the timers that
make them visible again. Saved as config/popState.json.

An entry is either out with a consumer (`receipt_handle` set, `due_ms` = invisible until) or
waiting to be delivered again (`receipt_handle` None, `due_ms` = visible again at). Whether
the store's backoff follows an expiry is chosen per delivery (`backoff_after_timeout`), saved
only when it is not the default, so that older files load as they always did. Each entry has one
live timer: heap items whose sequence number is not the entry's are stale and
dropped when they surface, so a change never searches a heap."""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from store.errors import StoreError
from store.log.config_file import StateFile, read_config

STATE_FILE = "popState.json"
STATE_VERSION = 1

EntryKey = tuple[int, int]  # (queue id, queue offset)
COMPACT_AFTER_STALE = 4096


class PopStateError(StoreError):
    """popState.json holds something this store did not write."""


@dataclass(slots=True)
class InFlight:
    queue_id: int
    queue_offset: int
    phys_offset: int
    unique_key: str  # the message's UNIQ_KEY, else its offset id: the key of its trace events
    offset_msg_id: str
    attempt: int  # deliveries so far: the current one while handed out
    generation: int  # receipt handles issued so far
    receipt_handle: str | None
    due_ms: int
    last_failure: str | None = None
    timer_seq: int = -1
    backoff_after_timeout: bool = True  # of the latest delivery: False, visible again as soon as it expires

    @property
    def key(self) -> EntryKey:
        return (self.queue_id, self.queue_offset)

    @property
    def handed_out(self) -> bool:
        return self.receipt_handle is not None

    def capture(self) -> tuple:
        """The saved fields, cheap enough to take under the store lock (`entry_json` makes the JSON)."""
        return (self.queue_id, self.queue_offset, self.phys_offset, self.unique_key, self.offset_msg_id,
                self.attempt, self.generation, self.receipt_handle, self.due_ms, self.last_failure,
                self.backoff_after_timeout)

    @classmethod
    def from_json(cls, data: dict) -> InFlight:
        handle = data.get("receiptHandle")
        due = data["invisibleUntilMs"] if handle is not None else data["visibleAtMs"]
        entry = cls(int(data["queueId"]), int(data["queueOffset"]), int(data["physOffset"]), str(data["uniqueKey"]),
                    str(data["offsetMsgId"]), int(data["attempt"]), int(data["generation"]),
                    None if handle is None else str(handle), int(due),
                    None if data.get("lastFailure") is None else str(data["lastFailure"]))
        backoff = data.get("backoffAfterTimeout", True)
        if type(backoff) is not bool:
            raise ValueError("backoffAfterTimeout is true or false")
        entry.backoff_after_timeout = backoff
        if entry.attempt < 1 or entry.generation < 1 or entry.queue_id < 0 or entry.queue_offset < 0:
            raise ValueError("attempts, generations, queue ids and offsets are positive")
        return entry


@dataclass
class Subscription:
    """What one group has of one topic."""

    group: str
    topic: str
    cursors: dict[int, int] = field(default_factory=dict)  # queue id -> next offset to hand out
    entries: dict[EntryKey, InFlight] = field(default_factory=dict)
    committed: dict[int, int] = field(default_factory=dict)  # queue id -> consumer offset last committed
    next_queue: int = 0  # where the next receive starts its round over the queues
    _invisible: list[tuple[int, int, EntryKey]] = field(default_factory=list)  # (due, seq, key) of handed out
    _waiting: list[tuple[int, int, EntryKey]] = field(default_factory=list)  # (due, seq, key) of waiting
    _outstanding: dict[int, list[int]] = field(default_factory=dict)  # queue id -> heap of entry offsets
    _stale: int = 0  # timer items that no longer match their entry, still in the heaps

    def add(self, entry: InFlight) -> None:
        """Track a new entry (its timer is armed by `set_timer`)."""
        self.entries[entry.key] = entry
        heapq.heappush(self._outstanding.setdefault(entry.queue_id, []), entry.queue_offset)

    def remove(self, entry: InFlight) -> None:
        del self.entries[entry.key]
        self._disarm(entry)

    def reset_queue(self, queue_id: int, offset: int) -> list[InFlight]:
        """An operator moved the group's offset: hand out from `offset` on, forget what was in
        flight on the queue (it is delivered again from the new offset, or skipped). Returns
        the entries forgotten."""
        dropped = [entry for key, entry in self.entries.items() if key[0] == queue_id]
        for entry in dropped:
            del self.entries[entry.key]
        self.cursors[queue_id] = offset
        self.committed[queue_id] = offset
        self._compact()
        return dropped

    def set_timer(self, entry: InFlight, seq: int) -> None:
        """Arm the entry's one timer at its due time (the old one goes stale)."""
        self._disarm(entry)
        entry.timer_seq = seq
        heapq.heappush(self._invisible if entry.handed_out else self._waiting, (entry.due_ms, seq, entry.key))

    def _disarm(self, entry: InFlight) -> None:
        if entry.timer_seq >= 0:
            entry.timer_seq = -1
            self._stale += 1
            if self._stale > COMPACT_AFTER_STALE and self._stale > len(self.entries):
                self._compact()

    def _compact(self) -> None:
        """Rebuild the heaps from the live entries, so acked or re-armed ones do not pile up
        until their old due times (hours, with long invisible times)."""
        self._invisible = [(e.due_ms, e.timer_seq, e.key) for e in self.entries.values()
                           if e.timer_seq >= 0 and e.handed_out]
        self._waiting = [(e.due_ms, e.timer_seq, e.key) for e in self.entries.values()
                         if e.timer_seq >= 0 and not e.handed_out]
        self._outstanding = {}
        for queue_id, queue_offset in self.entries:
            self._outstanding.setdefault(queue_id, []).append(queue_offset)
        for heap in (self._invisible, self._waiting, *self._outstanding.values()):
            heapq.heapify(heap)
        self._stale = 0

    def pop_expired(self, now_ms: int) -> InFlight | None:
        """The next handed-out entry whose invisible time ran out by `now_ms`."""
        return self._pop_due(self._invisible, now_ms, handed_out=True)

    def pop_visible(self, now_ms: int) -> InFlight | None:
        """The next waiting entry that is visible again at `now_ms`."""
        return self._pop_due(self._waiting, now_ms, handed_out=False)

    def _pop_due(self, heap: list, now_ms: int, *, handed_out: bool) -> InFlight | None:
        while heap and heap[0][0] <= now_ms:
            _, seq, key = heapq.heappop(heap)
            entry = self.entries.get(key)
            if entry is not None and entry.timer_seq == seq and entry.handed_out == handed_out:
                entry.timer_seq = -1  # fired: no longer in a heap
                return entry
            self._stale -= 1
        return None

    def next_expiry_ms(self) -> int | None:
        """The earliest time an invisible time of this subscription may run out (stale items included)."""
        return self._invisible[0][0] if self._invisible else None

    def next_due_ms(self) -> int | None:
        """The earliest time a timer of this subscription may fire (stale items included)."""
        heads = [heap[0][0] for heap in (self._invisible, self._waiting) if heap]
        return min(heads) if heads else None

    def low_water(self, queue_id: int) -> int | None:
        """The lowest offset of the queue that is not done yet: its first entry, else its cursor."""
        heap = self._outstanding.get(queue_id)
        while heap and (queue_id, heap[0]) not in self.entries:
            heapq.heappop(heap)
        if heap:
            return heap[0]
        return self.cursors.get(queue_id)

    def capture(self) -> tuple:
        return (self.group, self.topic, dict(self.cursors), [e.capture() for e in self.entries.values()])


def entry_json(captured: tuple) -> dict:
    (queue_id, queue_offset, phys_offset, unique_key, offset_msg_id, attempt, generation, handle, due, failure,
     backoff_after_timeout) = captured
    data = {"queueId": queue_id, "queueOffset": queue_offset, "physOffset": phys_offset, "uniqueKey": unique_key,
            "offsetMsgId": offset_msg_id, "attempt": attempt, "generation": generation, "lastFailure": failure}
    if not backoff_after_timeout:
        data["backoffAfterTimeout"] = False
    if handle is not None:
        data["receiptHandle"] = handle
        data["invisibleUntilMs"] = due
    else:
        data["visibleAtMs"] = due
    return data


class PopState:
    """Every subscription, by (group, topic), and the timer sequence they share."""

    def __init__(self) -> None:
        self.subscriptions: dict[tuple[str, str], Subscription] = {}
        self._seq = itertools.count()

    def next_seq(self) -> int:
        return next(self._seq)

    def get(self, group: str, topic: str) -> Subscription | None:
        return self.subscriptions.get((group, topic))

    def subscription(self, group: str, topic: str) -> Subscription:
        sub = self.subscriptions.get((group, topic))
        if sub is None:
            sub = self.subscriptions[(group, topic)] = Subscription(group, topic)
        return sub

    def __iter__(self) -> Iterator[Subscription]:
        return iter(list(self.subscriptions.values()))

    def capture(self) -> list[tuple]:
        """Everything to save, as plain tuples (store lock held); `state_json` turns it into the file."""
        return [sub.capture() for sub in self.subscriptions.values()]


def state_json(captured: list[tuple]) -> dict:
    subscriptions = [{"group": group, "topic": topic, "nextOffsets": {str(q): o for q, o in sorted(cursors.items())},
                      "inFlight": [entry_json(e) for e in sorted(entries, key=lambda e: (e[0], e[1]))]}
                     for group, topic, cursors, entries in sorted(captured, key=lambda c: (c[0], c[1]))]
    return {"version": STATE_VERSION, "subscriptions": subscriptions}


def load_state(config_dir: Path, queue_bounds: Callable[[str, int], tuple[int, int] | None],
               unit_phys: Callable[[str, int, int], int | None]) -> PopState:
    """The saved state, fitted to the queues as they are now. `queue_bounds(topic, queue_id)`
    gives (min offset, max offset) or None; `unit_phys(topic, queue_id, offset)` the commit log
    offset a queue unit points at. Entries for units that are gone (a crash lost the tail,
    retention deleted the head) or that point elsewhere are dropped, and cursors are kept
    inside the queue, so a cursor never stands past a message written after a crash."""
    path = Path(config_dir) / STATE_FILE
    content = read_config(path)
    state = PopState()
    if content is None:
        return state
    try:
        if content.get("version") != STATE_VERSION:
            raise ValueError(f"unknown version {content.get('version')!r}")
        for data in content["subscriptions"]:
            sub = state.subscription(str(data["group"]), str(data["topic"]))
            for queue_id, offset in data["nextOffsets"].items():
                bounds = queue_bounds(sub.topic, int(queue_id))
                if bounds is not None:
                    sub.cursors[int(queue_id)] = min(max(int(offset), bounds[0]), bounds[1])
            for item in data["inFlight"]:
                entry = InFlight.from_json(item)
                bounds = queue_bounds(sub.topic, entry.queue_id)
                cursor = sub.cursors.get(entry.queue_id)
                if (bounds is None or cursor is None or not bounds[0] <= entry.queue_offset < cursor
                        or unit_phys(sub.topic, entry.queue_id, entry.queue_offset) != entry.phys_offset):
                    continue
                sub.add(entry)
                sub.set_timer(entry, state.next_seq())
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise PopStateError(f"{path}: unreadable pop state: {exc}") from None
    return state


class PopStateFile(StateFile):
    """config/popState.json. Its `lock` is the store lock the state is changed under; a snapshot
    is the cheap capture, made JSON when written."""

    compact = True

    def __init__(self, config_dir: Path, state: PopState, store_lock: threading.RLock):
        super().__init__(Path(config_dir) / STATE_FILE)
        self.lock = store_lock
        self.state = state

    def content_json(self) -> list[tuple]:
        return self.state.capture()

    def to_json(self, captured: list[tuple]) -> dict:
        return state_json(captured)
