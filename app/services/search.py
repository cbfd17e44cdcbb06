"""The search box, paged: results newest first, a cursor to the next page that loses or repeats
no message even when many share one millisecond."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from app.services import lookup
from app.services.errors import InvalidRequestError
from store.format.codec import StoredMessage
from store.message_store import FAR_FUTURE_MS, MAX_QUERY_RESULTS

# Where the next page starts: below (store time, commit log offset) of the last message shown,
# and how many messages of that same millisecond have been shown so far.
CURSOR = re.compile(r"^(?P<ts>\d{1,19})-(?P<phys>\d{1,19})-(?P<shown>\d{1,5})$")


@dataclass(frozen=True)
class Cursor:
    store_timestamp: int
    phys_offset: int
    shown_in_ms: int

    def __str__(self) -> str:
        return f"{self.store_timestamp}-{self.phys_offset}-{self.shown_in_ms}"


def parse_cursor(text: str | None) -> Cursor | None:
    if not text:
        return None
    match = CURSOR.match(text)
    if not match:
        raise InvalidRequestError(f"malformed cursor {text[:40]!r}: use the next cursor of a results page")
    return Cursor(int(match["ts"]), int(match["phys"]), int(match["shown"]))


@dataclass(frozen=True)
class SearchPage:
    messages: list[StoredMessage] = field(default_factory=list)
    more: bool = False  # more messages match than this page holds
    next_cursor: str | None = None
    searched_topics: list[str] = field(default_factory=list)
    recognised_as: str | None = None
    problems: list[str] = field(default_factory=list)  # on a cluster: brokers that did not answer, and why


def search_page(source: lookup.Source, q: str, topic: str | None, begin: int | None, end: int | None,
                max_results: int, cursor: Cursor | None) -> SearchPage:
    window_end = end if end is not None else FAR_FUTURE_MS
    if cursor is not None:
        window_end = min(window_end, cursor.store_timestamp)
    # One more than a page tells whether there is a next page; the window still holds the
    # messages of the cursor's millisecond that were shown already.
    ask = min(MAX_QUERY_RESULTS, max_results + 1 + (cursor.shown_in_ms if cursor else 0))
    found = lookup.search(source, q, topic or None, begin or 0, window_end, ask)
    messages = found.messages
    if cursor is not None:
        below = (cursor.store_timestamp, cursor.phys_offset)
        messages = [m for m in messages if (m.store_timestamp, m.phys_offset) < below]
    more = len(messages) > max_results or (found.truncated and len(found.messages) >= ask and bool(messages))
    page = messages[:max_results]
    next_cursor = None
    if more and page:
        last = page[-1]
        shown = sum(1 for m in page if m.store_timestamp == last.store_timestamp)
        if cursor is not None and cursor.store_timestamp == last.store_timestamp:
            shown += cursor.shown_in_ms
        next_cursor = str(Cursor(last.store_timestamp, last.phys_offset, shown))
    return SearchPage(page, more, next_cursor, found.searched_topics, found.recognised_as,
                      found.problems)
