"""RocketMQ's client-side message trace (enableMsgTrace), as the 4.9.x Java client writes it into
RMQ_SYS_TRACE_TOPIC, decoded without touching the store.

A trace message's body is UTF-8 text holding several *contexts*. Each context ends with the
character U+0002, and its fields are separated by U+0001; the first field names the context type.
Numbers are decimal, booleans "true"/"false", and a Java null is written as the text "null".

    Pub             type, time stamp, region, producer group, topic, msgId, tags, keys,
                    store host (ip:port), body length, cost ms, message type, offsetMsgId, success
                    (14 fields; older clients wrote 13, without offsetMsgId)
    SubBefore       type, time stamp, region, consumer group, request id, msgId, retry times, keys
                    (8 fields: written when a consumer is handed the message)
    SubAfter        type, request id, msgId, cost ms, success, keys, context code, time stamp,
                    consumer group (9 fields in 4.9.8; older clients wrote the first 6 or 7)
    EndTransaction  type, time stamp, region, producer group, topic, msgId, tags, keys, store
                    host, message type, transaction id, transaction state, from a check
                    (13 fields: the producer's commit / rollback / unknown answer)

A SubAfter shares its request id with the SubBefore of the same delivery. Its context code is
the consume result's position in SUCCESS, TIME_OUT, EXCEPTION, RETURNNULL, FAILED; the message
type is one of MESSAGE_TYPES by position; the transaction state is COMMIT_MESSAGE,
ROLLBACK_MESSAGE or UNKNOW (sic). A client batches contexts of any messages into one trace
message and sets its KEYS to every msgId and keys text it holds (space separated), so an index
lookup of a msgId in the trace topic finds the records that mention it. The trace message's own
born host is the client's host. A batch send is traced by a single Pub whose msgId and offsetMsgId
are its messages' ids joined by commas (and whose record is keyed by that joined text, so a
lookup of one of them does not find it); a Pub's body length is that of the body as sent, after
the client compressed a large one.

mqlens writes its own lifecycle trace into the same topic (store.broker.trace_pack: tag
topics.TRACE_PACK_TAG); neither those records nor anything else that does not read as client trace data is
decoded here. No record content makes these functions raise: parse_context raises ClientTraceError
for a context it cannot read, and the others leave such contexts and records out."""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import StrEnum

from store.errors import StoreError
from store.format import topics
from store.format.codec import StoredMessage

CONTEXT_END = "\x02"  # ends each context (RocketMQ's FIELD_SPLITOR)
FIELD_SEPARATOR = "\x01"  # between the fields of a context (RocketMQ's CONTENT_SPLITOR)
JAVA_NULL = "null"
MESSAGE_TYPES = ("Normal_Msg", "Trans_Msg_Half", "Trans_msg_Commit", "Delay_Msg", "Order_Msg")
CONSUME_RESULTS = ("SUCCESS", "TIME_OUT", "EXCEPTION", "RETURNNULL", "FAILED")
MAX_BODY_BYTES = 16 * 1024 * 1024  # a compressed body inflating past this is not read
DEFAULT_MAX_RECORDS = 1024

_INTEGER = re.compile(r"[+-]?[0-9]{1,19}")
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)


class ClientTraceError(StoreError):
    """A context that is not client trace data RocketMQ could read."""


class TraceType(StrEnum):
    PUB = "Pub"
    SUB_BEFORE = "SubBefore"
    SUB_AFTER = "SubAfter"
    END_TRANSACTION = "EndTransaction"


class TransactionState(StrEnum):
    COMMIT = "COMMIT_MESSAGE"
    ROLLBACK = "ROLLBACK_MESSAGE"
    UNKNOWN = "UNKNOW"  # RocketMQ's spelling


# Fewest fields each type is read with (the client of 4.9.8 writes 14, 8, 9 and 13).
MIN_FIELDS = {TraceType.PUB: 13, TraceType.SUB_BEFORE: 8, TraceType.SUB_AFTER: 6, TraceType.END_TRANSACTION: 13}


@dataclass(frozen=True)
class TraceRecord:
    """The trace message a context was read from."""

    msg_id: str | None  # its own UNIQ_KEY: what a RocketMQ client reports as its msgId
    offset_msg_id: str
    phys_offset: int
    client_host: str  # the address it was born at (the tracing client), without the port
    store_timestamp: int


@dataclass(frozen=True)
class ClientTraceContext:
    """One context; a field the type does not carry (or a Java null) is None."""

    type: TraceType
    msg_id: str  # the traced message's unique key
    keys: str | None = None  # as the producer set them: space separated
    group: str | None = None  # producer group (Pub, EndTransaction) or consumer group
    timestamp: int | None = None  # ms: send start, consume start (SubBefore), consume end (SubAfter)
    region: str | None = None
    request_id: str | None = None  # pairs a SubBefore with its SubAfter
    topic: str | None = None
    tags: str | None = None
    store_host: str | None = None  # the broker that stored the message, ip:port
    offset_msg_id: str | None = None
    body_length: int | None = None
    cost_time: int | None = None  # ms
    success: bool | None = None
    context_code: int | None = None  # the consume result (CONSUME_RESULTS)
    retry_times: int | None = None  # the delivered copy's reconsume times
    message_type: int | None = None  # position in MESSAGE_TYPES
    transaction_id: str | None = None
    transaction_state: TransactionState | None = None
    from_transaction_check: bool | None = None  # the answer was to the broker's check
    record: TraceRecord | None = None
    position: int = 0  # the context's place in its record's body

    @property
    def key_list(self) -> list[str]:
        return [key for key in (self.keys or "").split(" ") if key]

    @property
    def msg_ids(self) -> list[str]:
        """The msgIds the context names: a batch send's Pub names all of its messages."""
        return [msg_id for msg_id in self.msg_id.split(",") if msg_id]

    @property
    def message_type_name(self) -> str | None:
        known = self.message_type is not None and 0 <= self.message_type < len(MESSAGE_TYPES)
        return MESSAGE_TYPES[self.message_type] if known else None

    @property
    def consume_result(self) -> str | None:
        known = self.context_code is not None and 0 <= self.context_code < len(CONSUME_RESULTS)
        return CONSUME_RESULTS[self.context_code] if known else None


def _text(value: str) -> str | None:
    return None if value == JAVA_NULL else value


def _number(value: str, bounds: tuple[int, int], name: str) -> int:
    if not _INTEGER.fullmatch(value):
        raise ClientTraceError(f"{name} is not a number: {value[:40]!r}")
    number = int(value)
    if not bounds[0] <= number <= bounds[1]:
        raise ClientTraceError(f"{name} is out of range: {value!r}")
    return number


def _flag(value: str) -> bool:
    return value.lower() == "true"  # as Java's Boolean.parseBoolean reads it


def parse_context(text: str) -> ClientTraceContext:
    """One context's text (without its U+0002): ClientTraceError when it is not one."""
    fields = text.split(FIELD_SEPARATOR)
    try:
        kind = TraceType(fields[0])
    except ValueError:
        raise ClientTraceError(f"not a client trace context type: {fields[0][:40]!r}") from None
    if len(fields) < MIN_FIELDS[kind]:
        raise ClientTraceError(f"a {kind} context has {len(fields)} fields, fewer than {MIN_FIELDS[kind]}")
    f = fields
    if kind is TraceType.SUB_AFTER:
        return ClientTraceContext(
            kind, f[2], keys=_text(f[5]), request_id=_text(f[1]), cost_time=_number(f[3], _INT32, "cost time"),
            success=_flag(f[4]),
            context_code=_number(f[6], _INT32, "context code") if len(f) > 6 else None,
            timestamp=_number(f[7], _INT64, "time stamp") if len(f) > 7 else None,
            group=_text(f[8]) if len(f) > 8 else None)
    common = {"timestamp": _number(f[1], _INT64, "time stamp"), "region": _text(f[2]), "group": _text(f[3])}
    if kind is TraceType.SUB_BEFORE:
        return ClientTraceContext(kind, f[5], keys=_text(f[7]), request_id=_text(f[4]),
                                  retry_times=_number(f[6], _INT32, "retry times"), **common)
    common.update(topic=_text(f[4]), tags=_text(f[6]), keys=_text(f[7]), store_host=_text(f[8]))
    if kind is TraceType.PUB:
        with_offset_id = len(f) >= 14
        return ClientTraceContext(
            kind, f[5], body_length=_number(f[9], _INT32, "body length"), cost_time=_number(f[10], _INT32, "cost time"),
            message_type=_number(f[11], _INT32, "message type"),
            offset_msg_id=_text(f[12]) if with_offset_id else None,
            success=_flag(f[13] if with_offset_id else f[12]), **common)
    try:
        state = TransactionState(f[11])
    except ValueError:
        raise ClientTraceError(f"not a transaction state: {f[11][:40]!r}") from None
    return ClientTraceContext(kind, f[5], message_type=_number(f[9], _INT32, "message type"),
                              transaction_id=_text(f[10]), transaction_state=state,
                              from_transaction_check=_flag(f[12]), **common)


def decode_trace_body(body: bytes | bytearray | str, record: TraceRecord | None = None) -> list[ClientTraceContext]:
    """The contexts a trace message body holds, in order; contexts that do not read (a foreign or
    damaged body) are left out, so this never raises. `record` is attached to each context."""
    text = body if isinstance(body, str) else bytes(body).decode("utf-8", errors="replace")
    found = []
    for position, part in enumerate(text.split(CONTEXT_END)):
        if not part:
            continue
        try:
            context = parse_context(part)
        except ClientTraceError:
            continue
        found.append(replace(context, record=record, position=position))
    return found


def _body(msg: StoredMessage, limit: int = MAX_BODY_BYTES, whole: bool = True) -> bytes | None:
    """The record's body; None when it does not inflate, or (`whole`) inflates past `limit`
    bytes or stops short. With `whole` False, a compressed body's first `limit` bytes will do."""
    if not msg.compressed:
        return msg.stored_body
    inflater = zlib.decompressobj()
    try:
        body = inflater.decompress(msg.stored_body, limit)
    except zlib.error:
        return None
    return None if whole and not inflater.eof else body


_OPENINGS = tuple((kind.value + FIELD_SEPARATOR).encode() for kind in TraceType)


def is_client_trace_record(msg: StoredMessage) -> bool:
    """Whether a record holds RocketMQ client trace data (its body opens with a context type), and
    not mqlens's own lifecycle trace. The topic is not checked: a client may trace to another."""
    if msg.tags == topics.TRACE_PACK_TAG:
        return False
    opening = _body(msg, limit=32, whole=False)
    return opening is not None and opening.startswith(_OPENINGS)


def trace_record_of(msg: StoredMessage) -> TraceRecord:
    return TraceRecord(msg.unique_key, msg.offset_msg_id, msg.phys_offset, msg.born_host.host_text(),
                       msg.store_timestamp)


def record_contexts(msg: StoredMessage) -> list[ClientTraceContext]:
    """The contexts of one stored trace record, each knowing its record; [] for any other record."""
    if not is_client_trace_record(msg):
        return []
    body = _body(msg)
    return [] if body is None else decode_trace_body(body, trace_record_of(msg))


def contexts_about(records: Iterable[StoredMessage], msg_id: str) -> list[ClientTraceContext]:
    """The contexts about the message with unique key `msg_id` in these trace records (any may be
    another message's, or no trace at all), each once, ordered by their time stamp, then by where
    they are in their broker's commit log."""
    found: dict[tuple[str, int], ClientTraceContext] = {}
    for msg in records:
        for context in record_contexts(msg):
            if context.msg_id == msg_id:
                found[(msg.offset_msg_id, context.position)] = context
    return [context for _, context in sorted(found.items(), key=lambda item: (_sort_time(item[1]), item[0]))]


def _sort_time(context: ClientTraceContext) -> int:
    if context.timestamp is not None:
        return context.timestamp
    return context.record.store_timestamp if context.record else 0
