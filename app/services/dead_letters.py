"""The dead-letter inbox: a group's dead letters (or every group's), newest first, with why each
failed, how long retention keeps it, and what became of a resend: waiting, resent (when, by
whom, the copy consumed or still pending) or resent and failed again."""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
from sqlalchemy import Row
from sqlalchemy.orm import Session, sessionmaker

from app.services.errors import InvalidRequestError, NotFoundError
from app.services.lookup import Source, backend_of
from app.services.resend import (
    RESENT_FROM_PROPERTY,
    group_of,
    resend_items_version,
    resent_before,
    resent_ids,
)
from store.broker.trace import TraceKind
from store.clock import Clock
from store.errors import StoreError
from store.format import ids, topics
from store.format.codec import StoredMessage
from store.format.javahash import tags_code
from store.format.resend_plan import origin_topic
from store.message_store import MessageStore
from store.projections.dead_letters import DeadLetterUnits

STATES = ("waiting", "resent", "failed_again")
MAX_LIMIT = 500
KEY_MATCHES_MAX = 1_000  # dead letters a key filter finds in the key index, the newest
COUNT_CHUNK = 262_144  # index units counted together
CURSOR = re.compile(r"^(?P<ts>\d{1,19})-(?P<phys>\d{1,19})$")


@dataclass(frozen=True)
class Filter:
    begin: int = 0
    end: int | None = None
    key: str | None = None
    tag: str | None = None
    reason: str | None = None  # text the failure reason contains (case-insensitive)
    state: str | None = None

    def __post_init__(self) -> None:
        if self.state is not None and self.state not in STATES:
            raise InvalidRequestError(f"unknown state {self.state[:20]!r}: use one of {', '.join(STATES)}")
        if self.end is not None and self.begin > self.end:
            raise InvalidRequestError("the time window begins after it ends")
        for name in ("key", "tag", "reason"):
            value = getattr(self, name)
            if value is not None and len(value) > 255:
                raise InvalidRequestError(f"{name} is longer than 255 characters")

    def as_query(self) -> dict:
        return {name: value for name, value in (("begin", self.begin or None), ("end", self.end), ("key", self.key),
                                                ("tag", self.tag), ("reason", self.reason), ("state", self.state))
                if value not in (None, "")}


@dataclass
class DeadLetter:
    offset_msg_id: str
    unique_key: str | None
    group: str
    topic: str
    original_topic: str | None
    keys: list[str]
    tags: str | None
    reason: str
    reconsume_times: int
    store_timestamp: int
    age_ms: int
    expires_at: int | None
    state: str  # waiting | resent | failed_again
    resent_after: str | None = None  # the dead letter whose resent copy this one is
    resend: dict | None = None  # the last resend: at_ms, actor, action_id, new_offset_msg_id, copy_state
    dead_again: str | None = None  # failed_again: the newer dead letter's offset id
    phys_offset: int = field(default=0, repr=False)


@dataclass(frozen=True)
class Inbox:
    group: str | None
    messages: list[DeadLetter]
    next_cursor: str | None
    total: int  # matching the filter
    counts: dict[str, int]  # per state, among those matching the filter but its state
    oldest_waiting_ms: int | None  # store time of the oldest waiting one
    truncated: bool  # embedded: always False (every dead letter is in the index); cluster: total is a bound
    problems: list[str] = field(default_factory=list)  # on a cluster: brokers that did not answer, and why


@dataclass(frozen=True)
class _Resent:
    version: tuple  # (items, newest item id) of the group's ok or pending resend items
    phys: np.ndarray  # commit log offsets of the dead letters they resent, sorted


class DeadLetterCache:
    """What the inbox keeps between requests: the commit log offsets of the resent dead letters
    per group (asked of the database again only when its resend items changed), and the counts
    of a filter until a dead letter, a resend or retention changes them. The dead letters
    themselves are in the store's dead-letter index (store.projections.dead_letters)."""

    def __init__(self, counts: int = 64):
        self._resent: dict[str | None, _Resent] = {}
        self._counts: OrderedDict[tuple, tuple[int, dict[str, int], int | None]] = OrderedDict()
        self._counts_kept = counts
        self._lock = threading.Lock()

    def resent(self, sessions: sessionmaker[Session], group: str | None) -> _Resent:
        version = resend_items_version(sessions, group)
        with self._lock:
            kept = self._resent.get(group)
        if kept is not None and kept.version == version:
            return kept
        phys = np.array(sorted(_phys_of(i) for i in resent_ids(sessions, group)), dtype=np.int64)
        kept = _Resent(version, phys)
        with self._lock:
            self._resent[group] = kept
        return kept

    def reason(self, store: MessageStore, msg: StoredMessage) -> str:
        """Why a dead letter failed, as the inbox says it."""
        return dead_letter_reason(store, msg)

    def counts(self, key: tuple, count: Callable[[], tuple[int, dict[str, int], int | None]]
               ) -> tuple[int, dict[str, int], int | None]:
        with self._lock:
            found = self._counts.get(key)
            if found is not None:
                self._counts.move_to_end(key)
                return found
        found = count()
        with self._lock:
            self._counts[key] = found
            if len(self._counts) > self._counts_kept:
                self._counts.popitem(last=False)
        return found


def _phys_of(offset_msg_id: str) -> int:
    try:
        return ids.decode_offset_msg_id(offset_msg_id)[1]
    except StoreError:
        return -1


def dead_letter_reason(store: MessageStore, msg: StoredMessage) -> str:
    """Why a dead letter failed: as its queue's dead-letter index says, else as its trace does."""
    indexed = ""
    if topics.is_dlq_topic(msg.topic):
        for units in store.dead_letter_units(msg.topic):
            row = int(np.searchsorted(units.units["phys"], msg.phys_offset))
            if row < len(units.units) and int(units.units[row]["phys"]) == msg.phys_offset:
                indexed = units.reason(row)
    return _reason(store, msg, indexed)


def _reason(store: MessageStore, msg: StoredMessage, indexed: str) -> str:
    """Why the dead letter failed: as indexed (its DLQ_REASON property, or its trace's DEAD_LETTER
    event), else what the rest of its trace says."""
    return indexed or _reason_from_trace(store, msg)


def _reason_from_trace(store: MessageStore, msg: StoredMessage) -> str:
    try:
        events = store.timeline(msg.unique_key or msg.offset_msg_id)
    except StoreError:
        return ""
    last_failure = ""
    for event in events:
        if event.kind in (TraceKind.FAILED, TraceKind.INVISIBLE_TIMEOUT) and event.reason:
            last_failure = event.reason
        if event.kind == TraceKind.DEAD_LETTER and event.offset_msg_id == msg.offset_msg_id:
            return event.reason or last_failure
    return last_failure


def parse_cursor(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    match = CURSOR.match(text)
    if not match:
        raise InvalidRequestError(f"malformed cursor {text[:40]!r}: use next_cursor of the previous page")
    return int(match["ts"]), int(match["phys"])


def dead_letter_topics(store: MessageStore, group: str | None) -> list[str]:
    if group is not None:
        store.metadata.group(group)  # checks the name
        name = topics.dlq_topic(group)
        if store.metadata.topic(name) is None and name not in store.topics():
            if _known_group(store, group):
                return []  # a group that has not dead-lettered anything yet: an empty inbox
            raise NotFoundError(f"group {group} has no dead letters (no {name} topic)")
        return [name]
    return sorted(t for t in store.topics() if topics.is_dlq_topic(t))


def _known_group(store: MessageStore, group: str) -> bool:
    """Someone set the group up or it has consumed: not a typo of a group name."""
    return any(g.name == group for g in store.metadata.groups()) or bool(store.offsets.of_group(group))


def copy_state(source: Source, group: str, offset_msg_id: str | None) -> str:
    """What became of a resent copy for its group: consumed, pending or unknown (gone)."""
    if offset_msg_id is None:
        return "pending"
    return backend_of(source).copy_state(group, offset_msg_id)


@dataclass(frozen=True)
class _Found:
    """A dead letter the filter matched: where it is in the dead-letter index."""

    units: DeadLetterUnits
    row: int
    phys_offset: int
    store_timestamp: int
    state: str


class _Selection:
    """A filter over the dead-letter index of some topics: which units it keeps, their states,
    and the counts (cached until the index, the resends or retention change)."""

    def __init__(self, store: MessageStore, sessions: sessionmaker[Session], now: int, cache: DeadLetterCache,
                 group: str | None, wanted: Filter):
        names = dead_letter_topics(store, group)
        lows = {(name, queue_id): lo for name, queues in store.topics().items() if name in names
                for queue_id, lo, _ in queues}
        self.parts = [(units, lows.get((units.topic, units.queue_id), 0))
                      for name in names for units in store.dead_letter_units(name)]
        self.wanted = wanted
        self.end = wanted.end if wanted.end is not None else now + 365 * 24 * 3600 * 1000
        self.resent = cache.resent(sessions, group)
        self.again_phys = np.array(sorted(_phys_of(i) for units, _ in self.parts for i in units.again), dtype=np.int64)
        self.key_phys = self._keyed(store, names) if wanted.key is not None else None
        self._tags = tags_code(wanted.tag) if wanted.tag is not None else None
        self._reasons = {id(units): units.reason_numbers(wanted.reason) for units, _ in self.parts} \
            if wanted.reason else None
        shape = tuple((units.topic, units.queue_id, lo, len(units.units)) for units, lo in self.parts)
        self.total, self.counts, self.oldest_waiting = cache.counts(
            (shape, self.resent.version, len(self.again_phys), wanted.begin, wanted.end, wanted.key, wanted.tag,
             wanted.reason, wanted.state), self._count)

    def _keyed(self, store: MessageStore, names: list[str]) -> np.ndarray:
        """Dead letters whose keys or unique key are the key, from the store's key index."""
        key = self.wanted.key
        found = [m.phys_offset for name in names
                 for m in (*store.query_by_key(name, key, max_results=KEY_MATCHES_MAX).messages,
                           *store.query_by_unique_key(name, key, max_results=KEY_MATCHES_MAX).messages)]
        return np.array(sorted(set(found)), dtype=np.int64)

    def _kept(self, units: DeadLetterUnits, lo: int, chunk: np.ndarray) -> np.ndarray:
        """Every filter but the state's."""
        mask = chunk["queue_offset"] >= lo
        mask &= (chunk["store_ts"] >= self.wanted.begin) & (chunk["store_ts"] <= self.end)
        if self._tags is not None:
            mask &= chunk["tags"] == self._tags
        if self._reasons is not None:
            mask &= self._reasons[id(units)][chunk["reason"]]
        if self.key_phys is not None:
            mask &= np.isin(chunk["phys"], self.key_phys)
        return mask

    def _states(self, chunk: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(failed again, resent) masks of the units."""
        again = np.isin(chunk["phys"], self.again_phys)
        return again, np.isin(chunk["phys"], self.resent.phys) & ~again

    def _keep(self, units: DeadLetterUnits, lo: int) -> Callable[[np.ndarray], np.ndarray]:
        def keep(chunk: np.ndarray) -> np.ndarray:
            mask = self._kept(units, lo, chunk)
            if self.wanted.state is not None:
                again, resent = self._states(chunk)
                mask &= {"failed_again": again, "resent": resent, "waiting": ~again & ~resent}[self.wanted.state]
            return mask
        return keep

    def _count(self) -> tuple[int, dict[str, int], int | None]:
        counts = dict.fromkeys(STATES, 0)
        oldest_waiting = None
        for units, lo in self.parts:
            for start in range(0, len(units.units), COUNT_CHUNK):
                chunk = units.units[start:start + COUNT_CHUNK]
                mask = self._kept(units, lo, chunk)
                again, resent = self._states(chunk)
                waiting = mask & ~again & ~resent
                counts["failed_again"] += int(np.count_nonzero(mask & again))
                counts["resent"] += int(np.count_nonzero(mask & resent))
                counts["waiting"] += int(np.count_nonzero(waiting))
                if waiting.any():
                    oldest = int(chunk["store_ts"][waiting].min())
                    oldest_waiting = oldest if oldest_waiting is None else min(oldest_waiting, oldest)
        total = counts[self.wanted.state] if self.wanted.state is not None else sum(counts.values())
        return total, counts, oldest_waiting

    def newest_first(self, before_phys: int | None, limit: int) -> list[_Found]:
        """At most `limit` matches older than `before_phys`, newest (highest commit log offset) first."""
        found = []
        for units, lo in self.parts:
            rows = np.fromiter(units.newest_first(before_phys, self._keep(units, lo), limit), dtype=np.int64)
            chosen = units.units[rows]
            again, resent = self._states(chosen)
            for row, phys, store_ts, is_again, is_resent in zip(
                    rows.tolist(), chosen["phys"].tolist(), chosen["store_ts"].tolist(), again.tolist(),
                    resent.tolist(), strict=True):
                state = "failed_again" if is_again else "resent" if is_resent else "waiting"
                found.append(_Found(units, row, phys, store_ts, state))
        found.sort(key=lambda f: f.phys_offset, reverse=True)
        return found[:limit]

    def pages(self, page: int = MAX_LIMIT) -> Iterator[list[_Found]]:
        """Every match, newest first, a page at a time."""
        before = None
        while True:
            found = self.newest_first(before, page)
            if found:
                yield found
            if len(found) < page:
                return
            before = found[-1].phys_offset


def inbox(store: MessageStore, sessions: sessionmaker[Session], clock: Clock, cache: DeadLetterCache,
          group: str | None, wanted: Filter, cursor: str | None = None, limit: int = 50) -> Inbox:
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequestError(f"limit is between 1 and {MAX_LIMIT}")
    after = parse_cursor(cursor)
    now = clock.now_ms()
    selection = _Selection(store, sessions, now, cache, group, wanted)
    found = selection.newest_first(after[1] if after is not None else None, limit + 1)
    page = found[:limit]
    rows = _rows(store, sessions, page, now)
    next_cursor = f"{page[-1].store_timestamp}-{page[-1].phys_offset}" if len(found) > limit else None
    return Inbox(group, rows, next_cursor, selection.total, selection.counts, selection.oldest_waiting, False)


def _rows(store: MessageStore, sessions: sessionmaker[Session], page: list[_Found], now: int) -> list[DeadLetter]:
    """The rows of these dead letters, each read whole, with its last resend; those that expired
    since they were indexed are left out."""
    read = []
    for found in page:
        try:
            read.append((found, store.read(found.phys_offset)))
        except StoreError:
            continue
    resends = resent_before(sessions, [msg.offset_msg_id for _, msg in read])
    return [_row(store, resends, found, msg, now) for found, msg in read]


def _row(store: MessageStore, resends: dict[str, Row], found: _Found, msg: StoredMessage, now: int) -> DeadLetter:
    item = resends.get(msg.offset_msg_id)
    again = found.units.again.get(msg.offset_msg_id)
    dead_again = again[1] if again is not None else None
    group = group_of(msg.topic)
    expiry = store.expires_at(msg.phys_offset)
    resend = None
    if item is not None:
        resend = {"at_ms": item.at_ms, "actor": item.actor, "action_id": item.action_id,
                  "destination": item.destination, "new_offset_msg_id": item.new_offset_msg_id,
                  "copy_state": "failed_again" if dead_again else copy_state(store, group, item.new_offset_msg_id)}
    return DeadLetter(
        offset_msg_id=msg.offset_msg_id, unique_key=msg.unique_key, group=group, topic=msg.topic,
        original_topic=origin_topic(msg), keys=msg.keys, tags=msg.tags,
        reason=_reason(store, msg, found.units.reason(found.row)),
        reconsume_times=msg.reconsume_times, store_timestamp=msg.store_timestamp, age_ms=now - msg.store_timestamp,
        expires_at=expiry.at_ms if expiry is not None else None, state=found.state,
        resent_after=msg.properties.get(RESENT_FROM_PROPERTY), resend=resend, dead_again=dead_again,
        phys_offset=msg.phys_offset)


def matching_rows(store: MessageStore, sessions: sessionmaker[Session], clock: Clock, cache: DeadLetterCache,
                  group: str, wanted: Filter) -> Iterator[DeadLetter]:
    """Every dead letter the filter matches, newest first, read a page at a time (for the exports)."""
    now = clock.now_ms()
    for page in _Selection(store, sessions, now, cache, group, wanted).pages():
        yield from _rows(store, sessions, page, now)


def matching_ids(store: MessageStore, sessions: sessionmaker[Session], clock: Clock, cache: DeadLetterCache,
                 group: str, wanted: Filter, at_most: int | None = None) -> list[str]:
    """The offset ids of every dead letter the filter matches (of the first `at_most` + 1 when
    given: enough to tell there are too many), newest first, from the index alone (for "resend
    all matching" and redrive jobs)."""
    found_ids: list[str] = []
    for page in _Selection(store, sessions, clock.now_ms(), cache, group, wanted).pages():
        found_ids += [found.units.offset_msg_id(found.row) for found in page]
        if at_most is not None and len(found_ids) > at_most:
            return found_ids[:at_most + 1]
    return found_ids
