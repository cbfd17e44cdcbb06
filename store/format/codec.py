"""Commit log record codec: one stored message <-> its exact bytes."""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from typing import NamedTuple

from store.errors import CorruptRecordError
from store.format import ids
from store.format.hosts import HostAddress
from store.format.layouts import (
    BLANK,
    BODY_LENGTH,
    DISPATCH_HEAD,
    HOST_V4,
    HOST_V6,
    MAGIC_BLANK,
    MAGIC_V1,
    MAGIC_V2,
    PROPERTIES_LEN,
    RECORD_FIXED,
    RECORD_HEAD,
    RECORD_TAIL,
    STORE_TIMESTAMP,
    TOPIC_LEN_V1,
    TOPIC_LEN_V2,
)
from store.format.properties import format_properties, has_trailing_separator, parse_properties

# SYSFLAG bits (MessageSysFlag).
COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x2
TRANSACTION_TYPE_MASK = 0xC
TRANSACTION_PREPARED = 0x4
TRANSACTION_COMMIT = 0x8
TRANSACTION_ROLLBACK = 0xC
BORNHOST_V6_FLAG = 0x10
STOREHOST_V6_FLAG = 0x20
COMPRESSION_TYPE_MASK = 0x700
COMPRESSION_ZLIB = 0x300

MAX_TOPIC_BYTES_V1 = 127

# Property names this module needs (the full list lives in store.topics / RocketMQ's MessageConst).
PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"


def body_crc(stored_body: bytes) -> int:
    return zlib.crc32(stored_body) & 0x7FFFFFFF


def split_keys(keys: str | None) -> list[str]:
    """KEYS split on single spaces, empty tokens dropped (Java String.split semantics for keys)."""
    if not keys:
        return []
    return [token for token in keys.split(" ") if token]


@dataclass(slots=True)
class StoredMessage:
    """One message record as it sits in the commit log."""

    topic: str
    queue_id: int
    queue_offset: int
    phys_offset: int
    born_timestamp: int
    born_host: HostAddress
    store_timestamp: int
    store_host: HostAddress
    stored_body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    sys_flag: int = 0
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    properties_trailing_separator: bool = False
    magic: int = MAGIC_V1
    size: int = 0
    body_crc: int = 0

    @property
    def compressed(self) -> bool:
        return bool(self.sys_flag & COMPRESSED_FLAG)

    @property
    def body(self) -> bytes:
        """The producer's body: decompressed when the record holds a zlib body."""
        if self.compressed:
            return zlib.decompress(self.stored_body)
        return self.stored_body

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> list[str]:
        return split_keys(self.properties.get(PROPERTY_KEYS))

    @property
    def unique_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQ_KEY)

    @property
    def offset_msg_id(self) -> str:
        return ids.create_offset_msg_id(self.store_host, self.phys_offset)

    @property
    def transaction_type(self) -> int:
        return self.sys_flag & TRANSACTION_TYPE_MASK

    def properties_text(self) -> str:
        return format_properties(self.properties, self.properties_trailing_separator)


def _host_struct(is_v6: bool):
    return HOST_V6 if is_v6 else HOST_V4


def encoded_size(stored_body_len: int, topic_bytes_len: int, properties_bytes_len: int,
                 born_v6: bool, store_v6: bool, magic: int = MAGIC_V1) -> int:
    topic_len_size = TOPIC_LEN_V2.size if magic == MAGIC_V2 else TOPIC_LEN_V1.size
    return (
        RECORD_HEAD.size
        + _host_struct(born_v6).size
        + STORE_TIMESTAMP.size
        + _host_struct(store_v6).size
        + RECORD_TAIL.size
        + stored_body_len
        + topic_len_size
        + topic_bytes_len
        + PROPERTIES_LEN.size
        + properties_bytes_len
    )


def encode_fields(queue_id: int, flag: int, queue_offset: int, phys_offset: int, sys_flag: int,
                  born_timestamp: int, born_host: HostAddress, store_timestamp: int, store_host: HostAddress,
                  reconsume_times: int, prepared_transaction_offset: int, stored_body: bytes,
                  topic_bytes: bytes, properties_bytes: bytes, magic: int = MAGIC_V1) -> bytes:
    """Bytes of a record from its fields. The host-v6 sysflag bits follow the host addresses."""
    born_v6 = len(born_host.address) == 16
    store_v6 = len(store_host.address) == 16
    sys_flag &= ~(BORNHOST_V6_FLAG | STOREHOST_V6_FLAG)
    if born_v6:
        sys_flag |= BORNHOST_V6_FLAG
    if store_v6:
        sys_flag |= STOREHOST_V6_FLAG
    if magic == MAGIC_V1 and len(topic_bytes) > MAX_TOPIC_BYTES_V1:
        magic = MAGIC_V2
    topic_len = (TOPIC_LEN_V2 if magic == MAGIC_V2 else TOPIC_LEN_V1).pack(len(topic_bytes))
    fixed = RECORD_FIXED[(born_v6, store_v6)]
    total = fixed.size + len(stored_body) + len(topic_len) + len(topic_bytes) + 2 + len(properties_bytes)
    head = fixed.pack(total, magic, body_crc(stored_body), queue_id, flag, queue_offset, phys_offset, sys_flag,
                      born_timestamp, born_host.address, born_host.port, store_timestamp, store_host.address,
                      store_host.port, reconsume_times, prepared_transaction_offset, len(stored_body))
    return b"".join((head, stored_body, topic_len, topic_bytes, PROPERTIES_LEN.pack(len(properties_bytes)),
                     properties_bytes))


def encode(msg: StoredMessage) -> bytes:
    return encode_fields(msg.queue_id, msg.flag, msg.queue_offset, msg.phys_offset, msg.sys_flag,
                         msg.born_timestamp, msg.born_host, msg.store_timestamp, msg.store_host,
                         msg.reconsume_times, msg.prepared_transaction_offset, msg.stored_body,
                         msg.topic.encode("utf-8"), msg.properties_text().encode("utf-8"), msg.magic)


def encode_blank(remaining: int) -> bytes:
    return BLANK.pack(remaining, MAGIC_BLANK)


def read_size_and_magic(buf, pos: int) -> tuple[int, int]:
    return BLANK.unpack_from(buf, pos)


class DispatchView(NamedTuple):
    """The fields of a record that dispatch needs, read without copying the body."""

    size: int
    queue_id: int
    queue_offset: int
    phys_offset: int
    sys_flag: int
    store_timestamp: int
    topic: str
    properties: dict[str, str]


def store_host_for_dispatch(buf, pos: int, sys_flag: int) -> HostAddress:
    """The store host of the record at `pos` (its head read by decode_for_dispatch)."""
    cursor = pos + RECORD_HEAD.size + (HOST_V6.size if sys_flag & BORNHOST_V6_FLAG else HOST_V4.size)
    cursor += STORE_TIMESTAMP.size
    address, port = (HOST_V6 if sys_flag & STOREHOST_V6_FLAG else HOST_V4).unpack_from(buf, cursor)
    return HostAddress(bytes(address), port)


def decode_for_dispatch(buf, pos: int, *, path: str = "<buffer>") -> DispatchView:
    """A lean decode for dispatch; validates the same lengths as `decode`, skips the CRC."""
    try:
        total, magic, queue_id, queue_offset, phys, sys_flag = DISPATCH_HEAD.unpack_from(buf, pos)
        if total <= 0 or pos + total > len(buf):
            raise CorruptRecordError(path, pos, f"total size {total} does not fit in the file")
        cursor = pos + RECORD_HEAD.size + (HOST_V6.size if sys_flag & BORNHOST_V6_FLAG else HOST_V4.size)
        (store_ts,) = STORE_TIMESTAMP.unpack_from(buf, cursor)
        cursor += STORE_TIMESTAMP.size + (HOST_V6.size if sys_flag & STOREHOST_V6_FLAG else HOST_V4.size)
        (body_len,) = BODY_LENGTH.unpack_from(buf, cursor + RECORD_TAIL.size - BODY_LENGTH.size)
        cursor += RECORD_TAIL.size + body_len
        if magic == MAGIC_V1:
            topic_len = buf[cursor]
            if topic_len > 127:
                raise CorruptRecordError(path, pos, "topic length is negative")
            cursor += 1
        elif magic == MAGIC_V2:
            (topic_len,) = TOPIC_LEN_V2.unpack_from(buf, cursor)
            cursor += TOPIC_LEN_V2.size
        else:
            raise CorruptRecordError(path, pos, f"unknown magic code 0x{magic & 0xFFFFFFFF:08X}")
        topic = buf[cursor : cursor + topic_len].decode("utf-8")
        cursor += topic_len
        (props_len,) = PROPERTIES_LEN.unpack_from(buf, cursor)
        cursor += PROPERTIES_LEN.size
        if body_len < 0 or topic_len <= 0 or props_len < 0 or cursor + props_len != pos + total:
            raise CorruptRecordError(path, pos, "field lengths do not add up to the total size")
        props = parse_properties(buf[cursor : cursor + props_len].decode("utf-8"))
    except CorruptRecordError:
        raise
    except (ValueError, IndexError, struct.error) as exc:
        raise CorruptRecordError(path, pos, f"undecodable field: {exc}") from None
    return DispatchView(total, queue_id, queue_offset, phys, sys_flag, store_ts, topic, props)


def decode(buf, pos: int, *, path: str = "<buffer>", check_crc: bool = True,
           limit: int | None = None) -> StoredMessage:
    """Decode the message record at `pos`. Raises CorruptRecordError naming file and position."""
    end_limit = len(buf) if limit is None else limit
    if pos + RECORD_HEAD.size > end_limit:
        raise CorruptRecordError(path, pos, "record header runs past the end of the file")
    (total, magic, crc, queue_id, flag, queue_offset, phys_offset, sys_flag,
     born_ts) = RECORD_HEAD.unpack_from(buf, pos)
    if magic not in (MAGIC_V1, MAGIC_V2):
        raise CorruptRecordError(path, pos, f"unknown magic code 0x{magic & 0xFFFFFFFF:08X}")
    if total <= 0 or pos + total > end_limit:
        raise CorruptRecordError(path, pos, f"total size {total} does not fit in the file")
    try:
        cursor = pos + RECORD_HEAD.size
        born_struct = _host_struct(bool(sys_flag & BORNHOST_V6_FLAG))
        born_addr, born_port = born_struct.unpack_from(buf, cursor)
        cursor += born_struct.size
        (store_ts,) = STORE_TIMESTAMP.unpack_from(buf, cursor)
        cursor += STORE_TIMESTAMP.size
        store_struct = _host_struct(bool(sys_flag & STOREHOST_V6_FLAG))
        store_addr, store_port = store_struct.unpack_from(buf, cursor)
        cursor += store_struct.size
        reconsume, prepared, body_len = RECORD_TAIL.unpack_from(buf, cursor)
        cursor += RECORD_TAIL.size
        end = pos + total
        if body_len < 0 or cursor + body_len > end:
            raise CorruptRecordError(path, pos, f"body length {body_len} overruns the record")
        stored_body = bytes(buf[cursor : cursor + body_len])
        cursor += body_len
        topic_struct = TOPIC_LEN_V2 if magic == MAGIC_V2 else TOPIC_LEN_V1
        (topic_len,) = topic_struct.unpack_from(buf, cursor)
        cursor += topic_struct.size
        if topic_len <= 0 or cursor + topic_len > end:
            raise CorruptRecordError(path, pos, f"topic length {topic_len} is invalid")
        topic = bytes(buf[cursor : cursor + topic_len]).decode("utf-8")
        cursor += topic_len
        (props_len,) = PROPERTIES_LEN.unpack_from(buf, cursor)
        cursor += PROPERTIES_LEN.size
        if props_len < 0 or cursor + props_len != end:
            raise CorruptRecordError(path, pos, "field lengths do not add up to the total size")
        props_text = bytes(buf[cursor:end]).decode("utf-8")
    except CorruptRecordError:
        raise
    except (ValueError, IndexError, struct.error) as exc:  # bad UTF-8 is a ValueError
        raise CorruptRecordError(path, pos, f"undecodable field: {exc}") from None
    if check_crc and body_crc(stored_body) != crc:
        raise CorruptRecordError(path, pos, "body CRC mismatch")
    return StoredMessage(
        topic=topic,
        queue_id=queue_id,
        queue_offset=queue_offset,
        phys_offset=phys_offset,
        born_timestamp=born_ts,
        born_host=HostAddress(bytes(born_addr), born_port),
        store_timestamp=store_ts,
        store_host=HostAddress(bytes(store_addr), store_port),
        stored_body=stored_body,
        properties=parse_properties(props_text),
        flag=flag,
        sys_flag=sys_flag,
        reconsume_times=reconsume,
        prepared_transaction_offset=prepared,
        properties_trailing_separator=has_trailing_separator(props_text),
        magic=magic,
        size=total,
        body_crc=crc,
    )
