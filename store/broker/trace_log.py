"""Writing the lifecycle trace and reading a message's events back.

Events are held in memory and written as packed records (store.broker.trace_pack): once
TRACE_BATCH_EVENTS are waiting, and always before a flush, a sync of the commit log for a
sync-flush change (the group committer asks), a timeline lookup and close. So a sync-flush
change returns once its events are on disk too, and concurrent changes' events share records."""

from __future__ import annotations

from collections.abc import Callable

from store.broker.record_builder import NewMessage, is_valid_key
from store.broker.trace import TraceEvent, TraceKind, ordered
from store.broker.trace_pack import FIELD_SEPARATOR, KIND_CODES, LINE_SEPARATOR, is_packed, pack, record_events
from store.clock import Clock
from store.errors import StoreError
from store.format import ids, topics
from store.format.codec import StoredMessage
from store.format.hosts import HostAddress

TRACE_BATCH_EVENTS = 512
_DEAD_LETTER_LINE = (LINE_SEPARATOR + KIND_CODES[TraceKind.DEAD_LETTER] + FIELD_SEPARATOR).encode()

Append = Callable[[list[NewMessage], int], object]  # (records, store time): the store appends them
Records = Callable[[str, int], list[StoredMessage]]  # (key, at most): trace records keyed by it, newest first
Read = Callable[[int], StoredMessage]  # the record at a commit log offset


class TraceWriter:
    """The events not yet written (the store lock guards it). `queued` counts every event handed
    over since the store opened; once `write` returns, all of them are in the commit log."""

    def __init__(self, clock: Clock, store_host: HostAddress, append: Append):
        self._clock = clock
        self._store_host = store_host
        self._append = append
        self._pending: list[TraceEvent] = []
        self.queued = 0

    @property
    def pending(self) -> int:
        return len(self._pending)

    def add(self, events: list[TraceEvent]) -> None:
        self._pending.extend(events)
        self.queued += len(events)
        if len(self._pending) >= TRACE_BATCH_EVENTS:
            self.write()

    def write(self) -> None:
        """Append the held events as packed records. When that fails they are dropped (and the
        error raised): a bad event must not fail every later change."""
        events, self._pending = self._pending, []
        if events:
            self._append(pack(events, self._store_host), self._clock.now_ms())


def events_of(records: Records, key: str, max_events: int) -> list[TraceEvent]:
    """The ordered events of `key` (a unique key; for old one-event records also the offset id
    of a copy), at most `max_events`, the newest when there are more."""
    found: list[tuple[tuple[int, int], TraceEvent]] = []
    for msg in records(key, max_events):
        for position, event in reversed(record_events(msg, key)):
            found.append(((msg.phys_offset, position), event))
            if len(found) == max_events:
                return ordered(found)
    return ordered(found)


def _copy_named(read: Read, offset_msg_id: str) -> StoredMessage | None:
    """The message copy an offset id names, if it is one and its record is there."""
    try:
        _, phys = ids.decode_offset_msg_id(offset_msg_id)
        msg = read(phys)
    except StoreError:
        return None
    if msg.offset_msg_id != offset_msg_id.upper() or msg.topic == topics.TRACE_TOPIC:
        return None
    return msg


def timeline(records: Records, read: Read, id_or_key: str, max_events: int) -> list[TraceEvent]:
    """The ordered lifecycle events of a message, given its unique key or the offset id of any of
    its copies: packed records are keyed by unique keys, so an offset id is resolved to its
    copy's. Older one-event records were keyed by the copy's offset id too: their unique key
    leads to the rest."""
    events = events_of(records, id_or_key, max_events)
    keys = {e.unique_key for e in events}
    if keys == {id_or_key}:
        return events
    copy = _copy_named(read, id_or_key)
    if copy is not None:
        key = copy.unique_key or copy.offset_msg_id
        if key != id_or_key and is_valid_key(key):
            return events_of(records, key, max_events)
    if len(keys) == 1 and id_or_key not in keys and is_valid_key(unique_key := keys.pop() or ""):
        return events_of(records, unique_key, max_events)
    return events


def dead_letter_reasons(msg: StoredMessage) -> list[tuple[str, int, int, str]]:
    """(dead-letter topic, queue id, queue offset, reason) of the DEAD_LETTER events a trace record holds."""
    if msg.topic != topics.TRACE_TOPIC or (is_packed(msg) and _DEAD_LETTER_LINE not in msg.body):
        return []
    return [(e.topic, e.queue_id, e.queue_offset, e.reason) for _, e in record_events(msg)
            if e.kind == TraceKind.DEAD_LETTER and e.topic and e.queue_id is not None
            and e.queue_offset is not None and e.reason]
