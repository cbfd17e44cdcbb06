"""Finding messages: by offset id, by business key or unique key (in one topic or in all of
them, retry, schedule and dead-letter topics included), by queue offset, and one search box
that recognises which of these it was given. Results say plainly when they were cut short."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from app.services.errors import InvalidRequestError, NotFoundError
from backend.embedded import EmbeddedBackend
from backend.protocol import Backend
from store.errors import InvalidIdError, MessageNotFoundError
from store.format import ids, topics
from store.format.codec import StoredMessage
from store.message_store import DEFAULT_QUERY_MAX, FAR_FUTURE_MS, MAX_QUERY_RESULTS, MessageStore

QUEUE_ADDRESS = re.compile(r"^(?P<topic>[%|a-zA-Z0-9_-]+):(?P<queue>\d{1,4}):(?P<offset>\d{1,19})$")
HEX_ID = re.compile(r"^[0-9A-Fa-f]{32}$|^[0-9A-Fa-f]{56}$")
MAX_KEY_CHARS = 512

Source = Backend | MessageStore  # callers that hold the embedded store may pass it as it is


@dataclass
class Found:
    messages: list[StoredMessage]
    truncated: bool = False  # more matched than `max`, or a topic's index walk stopped early
    searched_topics: list[str] = field(default_factory=list)
    recognised_as: str = ""  # what the search box took the query for
    problems: list[str] = field(default_factory=list)  # on a cluster: brokers that did not answer, and why


def backend_of(source: Source) -> Backend:
    return EmbeddedBackend(source) if isinstance(source, MessageStore) else source


def _check_key(key: str) -> str:
    if not key or len(key) > MAX_KEY_CHARS or " " in key:
        raise InvalidRequestError(f"a key is 1 to {MAX_KEY_CHARS} characters without spaces")
    return key


def _topics_to_search(backend: Backend, topic: str | None) -> list[str]:
    if topic is not None:
        topics.validate_topic(topic)
        if topic not in backend.topic_names():
            raise NotFoundError(f"no topic {topic}")
        return [topic]
    return [name for name in backend.topic_names() if name != topics.TRACE_TOPIC]


def by_offset_id(source: Source, offset_msg_id: str) -> StoredMessage:
    try:
        ids.decode_offset_msg_id(offset_msg_id)
    except InvalidIdError as exc:
        raise InvalidRequestError(f"malformed offset message id {offset_msg_id[:64]!r}: {exc}") from None
    try:
        return backend_of(source).read_by_offset_id(offset_msg_id)
    except MessageNotFoundError as exc:
        raise NotFoundError(str(exc)) from None


def stored_or_none(source: Source, offset_msg_id: str) -> StoredMessage | None:
    """The record an offset message id names, if the id is one and the record is there."""
    try:
        return by_offset_id(source, offset_msg_id)
    except (InvalidRequestError, NotFoundError):
        return None


def all_copies(source: Source, unique_keys: list[str], anchor: StoredMessage | None = None) -> list[StoredMessage]:
    """Every copy with one of the unique keys in any topic, the anchor, and the copies their
    ORIGIN_MESSAGE_ID names, oldest first."""
    return copies_of(source, unique_keys, anchor).messages


def copies_of(source: Source, unique_keys: list[str], anchor: StoredMessage | None = None,
              topic_names: list[str] | None = None) -> Found:
    """all_copies, looked up in these topics only when they are given, with the problems of a
    cluster's brokers that did not answer."""
    backend = backend_of(source)
    found: dict[str, StoredMessage] = {}
    if anchor is not None:
        found[anchor.offset_msg_id] = anchor
    truncated, problems = False, []
    for key in dict.fromkeys(unique_keys):
        try:
            if topic_names is None:
                matches = by_unique_key(backend, key, max_results=MAX_QUERY_RESULTS)
            else:
                matches = backend.query_key(_check_key(key), topic_names, 0, FAR_FUTURE_MS, MAX_QUERY_RESULTS, True)
        except InvalidRequestError:  # a key the index cannot be asked for (spaces, too long)
            continue
        truncated |= matches.truncated
        problems += [p for p in matches.problems if p not in problems]
        for msg in matches.messages:
            found[msg.offset_msg_id] = msg
    for msg in list(found.values()):
        origin = msg.properties.get(topics.ORIGIN_MESSAGE_ID)
        if origin and (named := stored_or_none(backend, origin)) is not None:
            found.setdefault(named.offset_msg_id, named)
    copies = sorted(found.values(), key=lambda m: (m.store_timestamp, m.phys_offset))
    return Found(copies, truncated, topic_names or [], problems=problems)


def by_queue_offset(source: Source, topic: str, queue_id: int, queue_offset: int,
                    broker: str | None = None) -> StoredMessage:
    topics.validate_topic(topic)
    try:
        return backend_of(source).read_at(topic, queue_id, queue_offset, broker)
    except MessageNotFoundError as exc:
        raise NotFoundError(str(exc)) from None


def _query_all(source: Source, key: str, topic: str | None, begin: int, end: int, max_results: int,
               unique: bool) -> Found:
    _check_key(key)
    backend = backend_of(source)
    matches = backend.query_key(key, _topics_to_search(backend, topic), begin, end, max_results, unique)
    return Found(matches.messages, matches.truncated, matches.searched_topics, problems=matches.problems)


def by_key(source: Source, key: str, topic: str | None = None, begin: int = 0, end: int = FAR_FUTURE_MS,
           max_results: int = DEFAULT_QUERY_MAX) -> Found:
    """Messages whose KEYS hold `key`, newest first."""
    return _query_all(source, key, topic, begin, end, max_results, unique=False)


def by_unique_key(source: Source, unique_key: str, topic: str | None = None, begin: int = 0,
                  end: int = FAR_FUTURE_MS, max_results: int = DEFAULT_QUERY_MAX) -> Found:
    """Every copy with this UNIQ_KEY (original, scheduled, retry, dead letter), newest first."""
    return _query_all(source, unique_key, topic, begin, end, max_results, unique=True)


def search(source: Source, query: str, topic: str | None = None, begin: int = 0, end: int = FAR_FUTURE_MS,
           max_results: int = DEFAULT_QUERY_MAX) -> Found:
    """One search box: `topic:queue:offset`, an offset message id, a unique key or a business key."""
    text = (query or "").strip()
    if not text:
        raise InvalidRequestError("type an offset message id, a unique key, a key or topic:queue:offset")
    address = QUEUE_ADDRESS.fullmatch(text)
    if address:
        msg = by_queue_offset(source, address["topic"], int(address["queue"]), int(address["offset"]))
        return Found([msg], False, [address["topic"]], "queue offset")
    if HEX_ID.fullmatch(text):
        try:
            return Found([by_offset_id(source, text)], False, [], "offset message id")
        except (InvalidRequestError, NotFoundError):
            pass  # a unique key has the same shape
        copies = by_unique_key(source, text.upper(), topic, begin, end, max_results)
        if copies.messages:
            copies.recognised_as = "unique key"
            return copies
    found = by_key(source, text, topic, begin, end, max_results)
    found.recognised_as = "key"
    return found
