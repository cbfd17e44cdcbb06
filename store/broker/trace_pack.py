"""The packed trace record: many lifecycle events (store.broker.trace) in one record of the trace
topic, so the trace costs a few dozen bytes per event instead of a record each.

A packed record is told apart by its tag, PACK_TAG, and the first field of its body, MAGIC
(which also names the layout's version). Older stores hold one-event records (JSON body, the
event kind as tag: trace.decode_trace); RocketMQ's own client message trace shares the topic
with bodies like `Pub\\u0002...`: neither has this tag and magic.

KEYS: the distinct unique keys of the record's events, in the order they first occur, those an
index can be asked for (store.broker.record_builder.is_valid_key). An event whose unique key is
not one (a client may put spaces in UNIQ_KEY) is keyed by its copy's offset id instead.

Body, UTF-8 text: a header line, then one line per event, lines joined by LF, fields by TAB.

    header:  MAGIC, base_ms, name 0, name 1, ...   (the topic, group and client names the events use)
    event:   kind, key, at, topic, queue_id, queue_offset, offset, group, attempt,
             reconsume_times, due, reason, real_topic, client

    kind             one letter of KIND_CODES
    key              the event's unique key: its position in KEYS (0-based), or "=" + the key
    at               at_ms - base_ms
    topic, group,    a position among the header's names (0-based)
    real_topic,
    client
    offset           the offset id of the copy: its commit log offset in upper-case hex when the
                     id names the trace record's own store host (the id is then the record's
                     offset id with its last 16 hex digits replaced), or "=" + the id
    due              due_ms - at_ms
    reason           "=" + the text
    queue_id, queue_offset, attempt, reconsume_times: decimal

Numbers are decimal unless said otherwise. An empty field is a null; trailing empty fields are
left out, so a line written before a field was added reads as that field's null (client came
last), and a reader ignores fields past those it knows. Text after "=" and names have "%", "+",
TAB, LF and CR written as %XX (upper-case hex): what a URL decoder (Spark's url_decode) reads
back as it was. A record holds at most MAX_EVENTS events, KEYS at most MAX_KEYS_BYTES bytes
(RocketMQ's properties hold 32767 bytes in all) and a body of about MAX_BODY_BYTES at most (an
event larger than that gets a record of its own)."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import unquote

from store.broker.record_builder import NewMessage, is_valid_key
from store.broker.trace import TraceEvent, TraceKind, decode_trace
from store.format import ids, topics
from store.format.codec import StoredMessage
from store.format.hosts import HostAddress

PACK_TAG = topics.TRACE_PACK_TAG
MAGIC = "MQLT1"
MAX_EVENTS = 128
MAX_KEYS_BYTES = 8192
MAX_BODY_BYTES = 64 * 1024
FIELD_SEPARATOR = "\t"
LINE_SEPARATOR = "\n"
TEXT_MARK = "="
OFFSET_HEX_DIGITS = 16  # the commit log offset's part at the end of an offset id

KIND_CODES = {
    TraceKind.STORED: "s", TraceKind.SCHEDULED: "w", TraceKind.RELEASED: "r", TraceKind.DELIVERED: "d",
    TraceKind.ACKED: "a", TraceKind.FAILED: "f", TraceKind.INVISIBLE_TIMEOUT: "t", TraceKind.RETRY: "y",
    TraceKind.DEAD_LETTER: "x", TraceKind.RESENT: "e", TraceKind.DUPLICATE: "u", TraceKind.COMMITTED: "c",
    TraceKind.ROLLED_BACK: "b", TraceKind.CHECKED: "k", TraceKind.DISCARDED: "z", TraceKind.INVISIBLE_CHANGED: "v",
}
KINDS_BY_CODE = {code: kind for kind, code in KIND_CODES.items()}
# Event line fields, by position.
FIELD_NAMES = ("kind", "key", "at", "topic", "queue_id", "queue_offset", "offset", "group", "attempt",
               "reconsume_times", "due", "reason", "real_topic", "client")
(KIND, KEY, AT, TOPIC, QUEUE_ID, QUEUE_OFFSET, OFFSET, GROUP, ATTEMPT, RECONSUME_TIMES, DUE, REASON, REAL_TOPIC,
 CLIENT) = range(len(FIELD_NAMES))
FIELDS = len(FIELD_NAMES)
HEADER_FIELDS = 2  # MAGIC and base_ms, then the names

_HEX_DIGITS = frozenset("0123456789ABCDEF")
_ESCAPES = str.maketrans({"%": "%25", "+": "%2B", "\t": "%09", "\n": "%0A", "\r": "%0D"})


def escape(text: str) -> str:
    return text.translate(_ESCAPES)


def unescape(text: str) -> str:
    return unquote(text) if "%" in text else text


def host_prefix(offset_msg_id: str) -> str:
    """An offset id without its commit log offset: the store host part."""
    return offset_msg_id[:-OFFSET_HEX_DIGITS]


def record_key(event: TraceEvent) -> str | None:
    """The KEYS entry that finds `event`: its unique key, else its copy's offset id, when valid."""
    for key in (event.unique_key, event.offset_msg_id):
        if key and is_valid_key(key) and len(key.encode("utf-8")) < MAX_KEYS_BYTES:
            return key
    return None


class _Record:
    """One packed record being filled."""

    def __init__(self, host: str, base_ms: int):
        self.host = host
        self.base_ms = base_ms
        self.keys: dict[str, int] = {}
        self.keys_bytes = 0
        self.names: dict[str, int] = {}
        self.lines: list[str] = []
        self.body_bytes = 0

    def takes(self, key: str | None, line_bytes: int) -> bool:
        if not self.lines:
            return True
        if len(self.lines) >= MAX_EVENTS or self.body_bytes + line_bytes > MAX_BODY_BYTES:
            return False
        return key is None or key in self.keys or self.keys_bytes + len(key.encode("utf-8")) + 1 <= MAX_KEYS_BYTES

    def add(self, event: TraceEvent, key: str | None) -> None:
        if key is not None and key not in self.keys:
            self.keys[key] = len(self.keys)
            self.keys_bytes += len(key.encode("utf-8")) + 1
        line = self._line(event)
        self.lines.append(line)
        self.body_bytes += len(line) + 1

    def _name(self, name: str | None) -> str:
        if name is None:
            return ""
        return str(self.names.setdefault(name, len(self.names)))

    def _line(self, e: TraceEvent) -> str:
        key = e.unique_key
        if key is None:
            key_field = ""
        elif key in self.keys:
            key_field = str(self.keys[key])
        else:
            key_field = TEXT_MARK + escape(key)
        offset = e.offset_msg_id
        if offset is None:
            offset_field = ""
        elif len(offset) == len(self.host) + OFFSET_HEX_DIGITS and offset.startswith(self.host) and \
                _HEX_DIGITS.issuperset(offset[len(self.host):]):
            offset_field = offset[len(self.host):].lstrip("0") or "0"
        else:
            offset_field = TEXT_MARK + escape(offset)
        fields = [
            KIND_CODES[e.kind], key_field, _number(e.at_ms - self.base_ms if e.at_ms is not None else None),
            self._name(e.topic), _number(e.queue_id), _number(e.queue_offset), offset_field, self._name(e.group),
            _number(e.attempt), _number(e.reconsume_times),
            _number(e.due_ms - e.at_ms if e.due_ms is not None and e.at_ms is not None else e.due_ms),
            "" if e.reason is None else TEXT_MARK + escape(e.reason), self._name(e.real_topic),
        ]
        if e.client is not None:
            fields.append(self._name(e.client))
        while fields and not fields[-1]:
            fields.pop()
        return FIELD_SEPARATOR.join(fields)

    def message(self) -> NewMessage:
        header = [MAGIC, str(self.base_ms), *(escape(name) for name in self.names)]
        text = LINE_SEPARATOR.join([FIELD_SEPARATOR.join(header), *self.lines])
        return NewMessage(topic=topics.TRACE_TOPIC, body=text.encode("utf-8", "replace"), tags=PACK_TAG,
                          keys=list(self.keys))


def _number(value: int | None) -> str:
    return "" if value is None else str(value)


def pack(events: list[TraceEvent], store_host: HostAddress) -> list[NewMessage]:
    """The packed records of `events`, in order, for a store that writes as `store_host`."""
    host = host_prefix(ids.create_offset_msg_id(store_host, 0))
    records: list[_Record] = []
    current: _Record | None = None
    for event in events:
        key = record_key(event)
        estimate = 64 + len(event.reason or "") * 3
        if current is None or not current.takes(key, estimate):
            current = _Record(host, event.at_ms or 0)
            records.append(current)
        current.add(event, key)
    return [record.message() for record in records]


def is_packed(msg: StoredMessage) -> bool:
    return msg.topic == topics.TRACE_TOPIC and msg.tags == PACK_TAG and msg.body.startswith(
        MAGIC.encode("ascii") + FIELD_SEPARATOR.encode("ascii"))


def _lines(msg: StoredMessage) -> tuple[list[str], list[str]]:
    """The header's fields and the event lines of a packed record."""
    lines = msg.body.decode("utf-8", "replace").split(LINE_SEPARATOR)
    return lines[0].split(FIELD_SEPARATOR), lines[1:]


def _place(items: list[str], text: str) -> str:
    """The item a position field names (ValueError, IndexError when none)."""
    place = int(text)
    if place < 0:
        raise IndexError(place)
    return items[place]


def _event(parts: list[str], keys: list[str], host: str, base_ms: int, names: list[str]) -> TraceEvent | None:
    kind = KINDS_BY_CODE.get(parts[KIND])
    if kind is None:  # a kind this reader does not know
        return None
    parts = parts + [""] * (FIELDS - len(parts))

    def number(i: int) -> int | None:
        return int(parts[i]) if parts[i] else None

    def name(i: int) -> str | None:
        return _place(names, parts[i]) if parts[i] else None

    key = parts[KEY]
    unique_key = (unescape(key[1:]) if key.startswith(TEXT_MARK) else _place(keys, key)) if key else None
    offset = parts[OFFSET]
    if not offset:
        offset_msg_id = None
    elif offset.startswith(TEXT_MARK):
        offset_msg_id = unescape(offset[1:])
    else:
        offset_msg_id = host + offset.rjust(OFFSET_HEX_DIGITS, "0")
    at_ms = base_ms + int(parts[AT]) if parts[AT] else None
    due = number(DUE)
    reason = parts[REASON]
    return TraceEvent(kind, unique_key, at_ms, name(TOPIC), number(QUEUE_ID), number(QUEUE_OFFSET), offset_msg_id,
                      name(GROUP), number(ATTEMPT), number(RECONSUME_TIMES),
                      due + at_ms if due is not None and at_ms is not None else due,
                      unescape(reason[1:]) if reason else None, name(REAL_TOPIC), name(CLIENT))


def unpack(msg: StoredMessage, key: str | None = None) -> Iterator[tuple[int, TraceEvent]]:
    """(position in the record, event) of a packed record's events: all, or those of `key` (a
    unique key, or the offset id that keys an event whose unique key is not a valid key).
    Events the record cannot tell are left out."""
    header, lines = _lines(msg)
    try:
        base_ms = int(header[1])
    except (IndexError, ValueError):
        return
    names = [unescape(name) for name in header[HEADER_FIELDS:]]
    keys = msg.keys
    host = host_prefix(msg.offset_msg_id)
    wanted = None
    if key is not None:
        if key not in keys:
            return
        wanted = str(keys.index(key))
    for position, line in enumerate(lines):
        parts = line.split(FIELD_SEPARATOR)
        own = parts[KEY] if len(parts) > KEY else ""
        if wanted is not None and own and own != wanted and not own.startswith(TEXT_MARK):
            continue  # another message's event (told without decoding it)
        try:
            event = _event(parts, keys, host, base_ms, names)
        except (ValueError, IndexError):
            continue
        if event is None:
            continue
        if wanted is not None and event.unique_key != key and not (
                not is_valid_key(event.unique_key or "") and event.offset_msg_id == key):
            continue
        yield position, event


def record_events(msg: StoredMessage, key: str | None = None) -> list[tuple[int, TraceEvent]]:
    """The events a trace record holds (of `key`, when given, for a record found by that key):
    a packed record's, an older one-event record's, none for anything else (RocketMQ's own
    message trace)."""
    if is_packed(msg):
        return list(unpack(msg, key))
    event = decode_trace(msg)
    return [] if event is None else [(0, event)]
