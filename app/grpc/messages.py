"""Messages between the protocol and the store: a client's message to put (SendMessage), and a
stored message handed to a consumer (ReceiveMessage, transaction checks)."""

from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from app.grpc.protocol import definition_pb2 as pb
from app.grpc.statuses import Code, RpcRefusal
from app.services.messages import RESERVED_PROPERTIES
from app.services.topics import check_producer_topic
from store.broker.record_builder import NewMessage, is_valid_key
from store.errors import InvalidMessageError
from store.format import topics
from store.format.codec import StoredMessage

SHARDING_KEY = "__SHARDINGKEY"  # RocketMQ 5's property for a FIFO message's message group
MAX_MESSAGE_ID_CHARS = 128
MAX_TAG_CHARS = 128
MAX_DELAY_MS = 24 * 3600 * 1000  # a delivery time at most this far ahead (RocketMQ 5's proxy default)
# Properties the broker keeps for itself: never shown to a consumer as the producer's own.
SYSTEM_PROPERTIES = RESERVED_PROPERTIES | {
    SHARDING_KEY, topics.TRANSACTION_CHECK_TIMES, topics.DLQ_ORIGIN_TOPIC, topics.DLQ_ORIGIN_MESSAGE_ID,
    "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "CONSUME_START_TIME", "REAL_TOPIC", "REAL_QID", "TRACE_ON",
    "MSG_REGION", "TIMER_OUT_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES", "POP_CK",
    "1ST_POP_TIME", "__transactionId__", "INSTANCE_ID",
}


# What each message type carries: (a message group, a delivery time).
_TYPE_NEEDS = {pb.NORMAL: (False, False), pb.TRANSACTION: (False, False), pb.FIFO: (True, False),
               pb.DELAY: (False, True)}


@dataclass(frozen=True)
class Outgoing:
    """A client's message, checked, as the store takes it."""

    message: NewMessage
    message_type: int
    message_group: str | None


def timestamp(ms: int) -> Timestamp:
    return Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def timestamp_ms(value: Timestamp) -> int:
    return value.seconds * 1000 + value.nanos // 1_000_000


def duration(ms: int) -> Duration:
    return Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def duration_ms(value: Duration) -> int:
    return value.seconds * 1000 + value.nanos // 1_000_000


def fifo_queue(message_group: str, queues: int) -> int:
    """The queue of a message group: the same for every message of the group."""
    return int.from_bytes(hashlib.sha256(message_group.encode("utf-8")).digest()[:8], "big") % queues


def _refuse(code: int, message: str) -> RpcRefusal:
    return RpcRefusal(code, message)


def _body(message: pb.Message, max_body_bytes: int) -> bytes:
    encoding = message.system_properties.body_encoding
    body = message.body
    if encoding == pb.GZIP:
        inflater = zlib.decompressobj(wbits=31)
        try:
            body = inflater.decompress(body, max_body_bytes + 1)
        except zlib.error as exc:
            raise _refuse(Code.MESSAGE_CORRUPTED, f"the body is not valid gzip: {exc}") from None
        if inflater.unconsumed_tail or not inflater.eof:
            raise _refuse(Code.MESSAGE_BODY_TOO_LARGE, f"the body inflates to more than {max_body_bytes} bytes")
    elif encoding not in (pb.IDENTITY, pb.ENCODING_UNSPECIFIED):
        raise _refuse(Code.BAD_REQUEST, f"unknown body encoding {encoding}")
    if not body:
        raise _refuse(Code.MESSAGE_BODY_EMPTY, "the message body is empty")
    if len(body) > max_body_bytes:
        raise _refuse(Code.MESSAGE_BODY_TOO_LARGE, f"the body of {len(body)} bytes exceeds {max_body_bytes}")
    return body


def _topic(message: pb.Message) -> str:
    name = message.topic.name
    try:
        return check_producer_topic(name)
    except InvalidMessageError as exc:
        raise _refuse(Code.ILLEGAL_TOPIC, str(exc)) from None


def _properties(message: pb.Message) -> dict[str, str]:
    properties = dict(message.user_properties)
    for name in properties:
        if name in SYSTEM_PROPERTIES or not name or "\x01" in name or "\x02" in name:
            raise _refuse(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property {name!r} is reserved or not allowed")
    return properties


def _tag(system: pb.SystemProperties) -> str | None:
    if not system.HasField("tag"):
        return None
    tag = system.tag
    if not tag.strip() or "|" in tag or len(tag) > MAX_TAG_CHARS:
        raise _refuse(Code.ILLEGAL_MESSAGE_TAG, f"invalid tag {tag[:MAX_TAG_CHARS]!r}: a non-blank word without '|'")
    return tag


def _keys(system: pb.SystemProperties) -> list[str]:
    keys = list(system.keys)
    bad = next((k for k in keys if not is_valid_key(k)), None)
    if bad is not None:
        raise _refuse(Code.ILLEGAL_MESSAGE_KEY, f"invalid key {bad!r}: keys are non-empty and have no spaces")
    return keys


def _message_id(system: pb.SystemProperties) -> str:
    message_id = system.message_id
    if not message_id or len(message_id) > MAX_MESSAGE_ID_CHARS or not message_id.isascii() \
            or not message_id.isalnum():
        raise _refuse(Code.ILLEGAL_MESSAGE_ID, f"invalid message id {message_id[:MAX_MESSAGE_ID_CHARS]!r}")
    return message_id


def outgoing(message: pb.Message, *, max_body_bytes: int, born_host: str | None, now_ms: int,
             client: str | None = None) -> Outgoing:
    """The store's message for a client's, checked as RocketMQ 5's proxy checks it (RpcRefusal with
    the protocol's code when a rule is broken)."""
    system = message.system_properties
    topic = _topic(message)
    body = _body(message, max_body_bytes)
    properties = _properties(message)
    message_type = system.message_type or pb.NORMAL
    group = system.message_group if system.HasField("message_group") else None
    has_delivery = system.HasField("delivery_timestamp")
    if group is not None and (not group or len(group) > MAX_MESSAGE_ID_CHARS or "\x01" in group or "\x02" in group):
        raise _refuse(Code.ILLEGAL_MESSAGE_GROUP, "invalid message group")
    wants = _TYPE_NEEDS.get(message_type)
    if wants is None:
        raise _refuse(Code.UNSUPPORTED, f"message type {pb.MessageType.Name(message_type)} is not supported")
    if (group is not None, has_delivery) != wants:
        raise _refuse(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                      f"a {pb.MessageType.Name(message_type)} message has "
                      + ("a message group" if wants[0] else "no message group") + " and "
                      + ("a delivery time" if wants[1] else "no delivery time"))
    if group is not None:
        properties[SHARDING_KEY] = group
    if has_delivery:
        deliver_at = timestamp_ms(system.delivery_timestamp)
        if deliver_at > now_ms + MAX_DELAY_MS:
            raise _refuse(Code.ILLEGAL_DELIVERY_TIME, f"the delivery time is more than {MAX_DELAY_MS // 3_600_000} h "
                                                      "ahead")
        properties[topics.TIMER_DELIVER_MS] = str(max(deliver_at, 0))
    born_ms = timestamp_ms(system.born_timestamp) if system.HasField("born_timestamp") else now_ms
    new = NewMessage(topic=topic, body=body, tags=_tag(system), keys=_keys(system), properties=properties,
                     born_timestamp=born_ms if born_ms > 0 else now_ms, born_host=born_host,
                     unique_key=_message_id(system), client=client)
    return Outgoing(new, message_type, group)


def message_type_of(msg: StoredMessage) -> int:
    props = msg.properties
    if props.get(topics.TRAN_MSG) == "true":
        return pb.TRANSACTION
    if topics.TIMER_DELIVER_MS in props or topics.DELAY in props:
        return pb.DELAY
    if SHARDING_KEY in props:
        return pb.FIFO
    return pb.NORMAL


def _host_text(host) -> str:
    text = str(host)
    return text.rpartition(":")[0] or text


def incoming(msg: StoredMessage, topic: str, *, receipt_handle: str | None = None, delivery_attempt: int = 1,
             invisible_ms: int | None = None) -> pb.Message:
    """A stored message as a consumer (or a transaction checker) receives it: the producer's
    properties, its body as sent (never compressed) with its CRC32 digest."""
    props = msg.properties
    body = msg.body
    system = pb.SystemProperties(
        keys=msg.keys, message_id=msg.unique_key or msg.offset_msg_id,
        body_digest=pb.Digest(type=pb.CRC32, checksum=f"{zlib.crc32(body):08X}"), body_encoding=pb.IDENTITY,
        message_type=message_type_of(msg), born_timestamp=timestamp(msg.born_timestamp),
        born_host=_host_text(msg.born_host), store_timestamp=timestamp(msg.store_timestamp),
        store_host=str(msg.store_host), queue_id=msg.queue_id, queue_offset=msg.queue_offset,
        delivery_attempt=delivery_attempt)
    if msg.tags is not None:
        system.tag = msg.tags
    if receipt_handle is not None:
        system.receipt_handle = receipt_handle
    if invisible_ms is not None:
        system.invisible_duration.CopyFrom(duration(invisible_ms))
    if SHARDING_KEY in props:
        system.message_group = props[SHARDING_KEY]
    deliver_at = props.get(topics.TIMER_DELIVER_MS)
    if deliver_at is not None and deliver_at.isdigit():
        system.delivery_timestamp.CopyFrom(timestamp(int(deliver_at)))
    user = {k: v for k, v in props.items() if k not in SYSTEM_PROPERTIES and not k.startswith("__")}
    return pb.Message(topic=pb.Resource(name=topic), user_properties=user, system_properties=system, body=body)
