"""Browsing one queue of any topic (system topics and dead letters too) page by page, by queue
offset or from the first message stored at or after a time. Reading records nothing."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.presenters import message_summary
from app.services.queue_view import existing_queue
from store.errors import StoreError
from store.message_store import MessageStore


@dataclass(frozen=True)
class QueuePage:
    topic: str
    queue_id: int
    queue_count: int
    min_offset: int
    max_offset: int
    requested_offset: int  # the offset asked for (or found for the time asked for)
    offset: int  # where the page starts: the requested offset, or the queue's min when it was older
    page_size: int
    at_ms: int | None
    messages: list[dict] = field(default_factory=list)
    unreadable: list[int] = field(default_factory=list)  # offsets whose unit names no readable message

    @property
    def expired(self) -> bool:
        return self.requested_offset < self.min_offset

    @property
    def past_end(self) -> bool:
        return self.offset >= self.max_offset

    @property
    def end_offset(self) -> int:
        return min(self.max_offset, self.offset + self.page_size)

    @property
    def prev_offset(self) -> int | None:
        if self.offset <= self.min_offset:
            return None
        return max(self.min_offset, min(self.offset, self.max_offset) - self.page_size)

    @property
    def next_offset(self) -> int | None:
        return self.end_offset if self.end_offset < self.max_offset else None

    @property
    def last_page_offset(self) -> int:
        return max(self.min_offset, self.max_offset - self.page_size)


def browse_queue(store: MessageStore, topic: str, queue_id: int, offset: int | None, at_ms: int | None,
                 page_size: int) -> QueuePage:
    """Up to `page_size` messages of the queue from `offset`, or from the first stored at or after
    `at_ms`, or from the queue's first message."""
    config = existing_queue(store, topic, queue_id)
    bounds = {q: (lo, hi) for q, lo, hi in store.topics().get(topic, [])}
    lo, hi = bounds.get(queue_id, (0, 0))
    if at_ms is not None:
        requested = _offset_at(store, topic, queue_id, lo, hi, at_ms)
    else:
        requested = lo if offset is None else offset
    page = QueuePage(topic, queue_id, config.queues, lo, hi, requested, max(requested, lo), page_size, at_ms)
    for queue_offset in range(page.offset, page.end_offset):
        try:
            page.messages.append(message_summary(store.get_by_queue_offset(topic, queue_id, queue_offset)))
        except StoreError:  # a scheduling filler unit, or deleted by retention meanwhile
            page.unreadable.append(queue_offset)
    return page


def _offset_at(store: MessageStore, topic: str, queue_id: int, lo: int, hi: int, at_ms: int) -> int:
    if hi <= lo:
        return hi
    try:
        return store.queue_offset_by_time(topic, queue_id, at_ms)
    except StoreError:
        return lo
