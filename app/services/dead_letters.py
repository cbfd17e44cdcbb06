"""The dead-letter inbox: a group's dead letters (or every group's), newest first, with why each
failed, how long retention keeps it, and what became of a resend: waiting, resent (when, by
whom, the copy consumed or still pending) or resent and failed again."""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field

from sqlalchemy import Row
from sqlalchemy.orm import Session, sessionmaker

from app.services.errors import InvalidRequestError, NotFoundError
from app.services.resend import RESENT_FROM_PROPERTY, group_of, resent_before, resent_ids
from store.broker.retry import origin_topic
from store.broker.trace import TraceKind
from store.clock import Clock
from store.errors import StoreError
from store.format import topics
from store.format.codec import StoredMessage
from store.message_store import MessageStore

STATES = ("waiting", "resent", "failed_again")
MAX_LIMIT = 500
MAX_SCAN = 200_000  # dead letters looked at per request
MERGES_KEPT = 16  # inboxes (a group's, or every group's) whose merged list is kept between requests
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
    truncated: bool  # more than MAX_SCAN dead letters: the oldest were not looked at


@dataclass(frozen=True, slots=True)
class Summary:
    """What the inbox filters, counts and sorts a dead letter by; a page's rows read the record."""

    store_timestamp: int
    phys_offset: int
    offset_msg_id: str
    unique_key: str | None
    keys: tuple[str, ...]
    tags: str | None
    resent_from: str | None  # the dead letter whose resent copy this one is

    @classmethod
    def of(cls, msg: StoredMessage) -> Summary:
        return cls(msg.store_timestamp, msg.phys_offset, msg.offset_msg_id, msg.unique_key, tuple(msg.keys),
                   msg.tags, msg.properties.get(RESENT_FROM_PROPERTY))


@dataclass
class _QueueSummaries:
    first: int  # queue offset of summaries[0]
    summaries: list[Summary | None]  # None: expired or unreadable when it was read


class DeadLetterCache:
    """What never changes once a dead letter is written: its summary and why it failed. The
    summaries of each dead-letter queue are kept from one request to the next, so a request reads
    only the dead letters written since the last one, not the whole queue (nor holds it)."""

    def __init__(self, reasons: int = 100_000):
        self._reasons: OrderedDict[int, str] = OrderedDict()
        self._size = reasons
        self._queues: dict[tuple[str, int], _QueueSummaries] = {}
        # The newest-first merge of the queues' summaries, per list of topics, with what it was
        # made of: rebuilt only when a queue gained or lost dead letters.
        self._merged: OrderedDict[tuple[str, ...], tuple[tuple, list[Summary], bool]] = OrderedDict()
        self._lock = threading.Lock()
        self._reading = threading.Lock()

    def reason(self, store: MessageStore, msg: Summary | StoredMessage) -> str:
        with self._lock:
            if msg.phys_offset in self._reasons:
                return self._reasons[msg.phys_offset]
        reason = _reason_from_trace(store, msg)
        with self._lock:
            self._reasons[msg.phys_offset] = reason
            if len(self._reasons) > self._size:
                self._reasons.popitem(last=False)
        return reason

    def summaries(self, store: MessageStore, names: list[str]) -> tuple[list[Summary], bool]:
        """Every dead letter of the topics, newest first (at most MAX_SCAN per queue); True when
        older ones were left out. The list is shared with other requests: read it, never change it."""
        queues = store.topics()
        with self._reading:
            parts = [(name, queue_id, lo, self._caught_up(store, name, queue_id, lo, hi))
                     for name in names for queue_id, lo, hi in queues.get(name, [])]
            made_of = tuple((name, queue_id, lo, kept.first, len(kept.summaries)) for name, queue_id, lo, kept in parts)
            key = tuple(names)
            cached = self._merged.get(key)
            if cached is not None and cached[0] == made_of:
                self._merged.move_to_end(key)
                return cached[1], cached[2]
            merged = [summary for *_, kept in parts for summary in kept.summaries if summary is not None]
            merged.sort(key=lambda m: (m.store_timestamp, m.phys_offset), reverse=True)
            truncated = any(kept.first > lo for _, _, lo, kept in parts)
            self._merged[key] = (made_of, merged, truncated)
            if len(self._merged) > MERGES_KEPT:
                self._merged.popitem(last=False)
            return merged, truncated

    def _caught_up(self, store: MessageStore, name: str, queue_id: int, lo: int, hi: int) -> _QueueSummaries:
        window = max(lo, hi - MAX_SCAN)  # a request looks at the newest MAX_SCAN of a queue
        kept = self._queues.get((name, queue_id))
        if kept is None or not window <= kept.first + len(kept.summaries) <= hi:  # new, cut back, or all expired
            kept = self._queues[(name, queue_id)] = _QueueSummaries(window, [])
        end = kept.first + len(kept.summaries)
        kept.summaries += [_summary(store, name, queue_id, offset) for offset in range(end, hi)]
        if window > kept.first:
            del kept.summaries[:window - kept.first]
            kept.first = window
        return kept


def _summary(store: MessageStore, name: str, queue_id: int, offset: int) -> Summary | None:
    try:
        return Summary.of(store.get_by_queue_offset(name, queue_id, offset))
    except StoreError:
        return None  # expired or unreadable: not in the inbox


def _reason_from_trace(store: MessageStore, msg: Summary | StoredMessage) -> str:
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


def _cursor(text: str | None) -> tuple[int, int] | None:
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


def copy_state(store: MessageStore, group: str, offset_msg_id: str | None) -> str:
    """What became of a resent copy for its group: consumed, pending or unknown (gone)."""
    if offset_msg_id is None:
        return "pending"
    try:
        copy = store.get_by_offset_id(offset_msg_id)
    except StoreError:
        return "unknown"
    committed = store.offsets.get(copy.topic, group, copy.queue_id)
    return "consumed" if committed is not None and committed > copy.queue_offset else "pending"


@dataclass
class _Matches:
    matching: list[tuple[Summary, str]]  # (dead letter, state), newest first: every match, or a page's
    total: int  # every match
    more: bool  # matches after the page's
    counts: dict[str, int]
    oldest_waiting: int | None
    truncated: bool
    dead_again: dict[str, str]


def _match(store: MessageStore, sessions: sessionmaker[Session], now: int, cache: DeadLetterCache,
           group: str | None, wanted: Filter, after: tuple[int, int] | None = None,
           limit: int | None = None) -> _Matches:
    """The dead letters the filter matches, counted; kept: those older than `after` (a page's
    cursor), at most `limit` of them (a request holds its page, not every dead letter)."""
    all_dead, truncated = cache.summaries(store, dead_letter_topics(store, group))
    dead_again: dict[str, str] = {}  # dead letter -> the newer dead letter of its resent copy
    for msg in all_dead:
        if msg.resent_from is not None and msg.resent_from not in dead_again:
            dead_again[msg.resent_from] = msg.offset_msg_id
    resent = resent_ids(sessions, group)
    end = wanted.end if wanted.end is not None else now + 365 * 24 * 3600 * 1000
    needle = wanted.reason.lower() if wanted.reason else None
    matching: list[tuple[Summary, str]] = []
    total = beyond = 0
    counts = dict.fromkeys(STATES, 0)
    oldest_waiting = None
    for msg in all_dead:
        if not wanted.begin <= msg.store_timestamp <= end:
            continue
        if wanted.key is not None and wanted.key not in msg.keys and wanted.key != msg.unique_key:
            continue
        if wanted.tag is not None and msg.tags != wanted.tag:
            continue
        if needle is not None and needle not in cache.reason(store, msg).lower():
            continue
        state = ("failed_again" if msg.offset_msg_id in dead_again
                 else "resent" if msg.offset_msg_id in resent else "waiting")
        counts[state] += 1
        if state == "waiting":
            oldest_waiting = msg.store_timestamp
        if wanted.state is not None and wanted.state != state:
            continue
        total += 1
        if after is not None and (msg.store_timestamp, msg.phys_offset) >= after:
            continue
        if limit is None or len(matching) < limit:
            matching.append((msg, state))
        else:
            beyond += 1
    return _Matches(matching, total, beyond > 0, counts, oldest_waiting, truncated, dead_again)


def inbox(store: MessageStore, sessions: sessionmaker[Session], clock: Clock, cache: DeadLetterCache,
          group: str | None, wanted: Filter, cursor: str | None = None, limit: int = 50) -> Inbox:
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequestError(f"limit is between 1 and {MAX_LIMIT}")
    now = clock.now_ms()
    found = _match(store, sessions, now, cache, group, wanted, _cursor(cursor), limit)
    page = found.matching
    rows = _rows(store, sessions, cache, found, page, now)
    next_cursor = f"{page[-1][0].store_timestamp}-{page[-1][0].phys_offset}" if found.more and page else None
    return Inbox(group, rows, next_cursor, found.total, found.counts, found.oldest_waiting, found.truncated)


def _rows(store: MessageStore, sessions: sessionmaker[Session], cache: DeadLetterCache, found: _Matches,
          page: list[tuple[Summary, str]], now: int) -> list[DeadLetter]:
    """The rows of these dead letters, each read whole, with its last resend; those that expired
    since they were summarized are left out."""
    resends = resent_before(sessions, [summary.offset_msg_id for summary, _ in page])
    rows = (_row(store, cache, found, resends, summary, state, now) for summary, state in page)
    return [row for row in rows if row is not None]


def _row(store: MessageStore, cache: DeadLetterCache, found: _Matches, resends: dict[str, Row], summary: Summary,
         state: str, now: int) -> DeadLetter | None:
    try:
        msg = store.read(summary.phys_offset)
    except StoreError:
        return None
    item = resends.get(msg.offset_msg_id)
    dead_again = found.dead_again.get(msg.offset_msg_id)
    group = group_of(msg.topic)
    expiry = store.expires_at(msg.phys_offset)
    resend = None
    if item is not None:
        resend = {"at_ms": item.at_ms, "actor": item.actor, "action_id": item.action_id,
                  "destination": item.destination, "new_offset_msg_id": item.new_offset_msg_id,
                  "copy_state": "failed_again" if dead_again else copy_state(store, group, item.new_offset_msg_id)}
    return DeadLetter(
        offset_msg_id=msg.offset_msg_id, unique_key=msg.unique_key, group=group, topic=msg.topic,
        original_topic=origin_topic(msg), keys=msg.keys, tags=msg.tags, reason=cache.reason(store, summary),
        reconsume_times=msg.reconsume_times, store_timestamp=msg.store_timestamp, age_ms=now - msg.store_timestamp,
        expires_at=expiry.at_ms if expiry is not None else None, state=state, resent_after=summary.resent_from,
        resend=resend, dead_again=dead_again, phys_offset=msg.phys_offset)


def matching_rows(store: MessageStore, sessions: sessionmaker[Session], clock: Clock, cache: DeadLetterCache,
                  group: str, wanted: Filter) -> Iterator[DeadLetter]:
    """Every dead letter the filter matches, newest first, from one scan (for the exports)."""
    now = clock.now_ms()
    found = _match(store, sessions, now, cache, group, wanted)
    for start in range(0, len(found.matching), MAX_LIMIT):
        yield from _rows(store, sessions, cache, found, found.matching[start:start + MAX_LIMIT], now)


def matching_ids(store: MessageStore, sessions: sessionmaker[Session], clock: Clock, cache: DeadLetterCache,
                 group: str, wanted: Filter) -> list[str]:
    """The offset ids of every dead letter the filter matches, newest first (for "resend all matching")."""
    return [msg.offset_msg_id for msg, _ in _match(store, sessions, clock.now_ms(), cache, group, wanted).matching]
