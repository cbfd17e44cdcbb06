"""Commit log records as rows of one fixed Arrow schema."""

from __future__ import annotations

import pyarrow as pa

from store.format import codec, topics
from store.format.hosts import HostAddress

# The DDL Spark is given and the Arrow schema every batch is built with: the two must match exactly.
SCHEMA_DDL = (
    "phys_offset BIGINT, size INT, offset_msg_id STRING, unique_key STRING, topic STRING, queue_id INT, "
    "queue_offset BIGINT, flag INT, sys_flag INT, born_timestamp BIGINT, born_host STRING, "
    "store_timestamp BIGINT, store_host STRING, reconsume_times INT, tags STRING, keys ARRAY<STRING>, "
    "properties MAP<STRING, STRING>, body BINARY, copy_kind STRING, original_id STRING"
)
ARROW_SCHEMA = pa.schema([
    ("phys_offset", pa.int64()), ("size", pa.int32()), ("offset_msg_id", pa.string()),
    ("unique_key", pa.string()), ("topic", pa.string()), ("queue_id", pa.int32()),
    ("queue_offset", pa.int64()), ("flag", pa.int32()), ("sys_flag", pa.int32()),
    ("born_timestamp", pa.int64()), ("born_host", pa.string()), ("store_timestamp", pa.int64()),
    ("store_host", pa.string()), ("reconsume_times", pa.int32()), ("tags", pa.string()),
    ("keys", pa.list_(pa.string())), ("properties", pa.map_(pa.string(), pa.string())), ("body", pa.binary()),
    ("copy_kind", pa.string()), ("original_id", pa.string()),
])
BATCH_ROWS = 8192


def schema_of(columns: tuple[str, ...]):
    """The Spark schema of these columns (their types as in the whole row), for `.schema(...)`."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(pa.schema([ARROW_SCHEMA.field(name) for name in columns]))


def chosen_columns(schema) -> tuple[str, ...] | None:
    """The columns a schema given to the reader (`.schema(...)` before `.load`) asks for, in its
    order, or None for the whole row. Each must be a column of this schema with the same type:
    a narrower schema is the way to spare Spark columns a job does not use (its Python data
    sources offer no column pruning)."""
    if schema is None:
        return None
    if isinstance(schema, str):
        raise ValueError("give the schema as a StructType")
    from pyspark.sql.pandas.types import from_arrow_schema

    ours = {f.name: f.dataType.simpleString() for f in from_arrow_schema(ARROW_SCHEMA).fields}
    names = tuple(f.name for f in schema.fields)
    for field in schema.fields:
        if field.name not in ours:
            raise ValueError(f"the commit log has no column {field.name!r}: its columns are {', '.join(ours)}")
        if field.dataType.simpleString() != ours[field.name]:
            raise ValueError(f"column {field.name} is {ours[field.name]}, not {field.dataType.simpleString()}")
    if len(set(names)) != len(names):
        raise ValueError("a column is named twice in the schema")
    return None if names == tuple(ours) else names


def original_id(msg: codec.StoredMessage) -> str:
    """The id of the message a copy was made from: its ORIGIN_MESSAGE_ID, DLQ_ORIGIN_MESSAGE_ID,
    else its own unique key or offset id (RocketMQ puts either id in those properties)."""
    props = msg.properties
    return (props.get(topics.ORIGIN_MESSAGE_ID) or props.get(topics.DLQ_ORIGIN_MESSAGE_ID) or msg.unique_key
            or msg.offset_msg_id)


class RowBuilder:
    """Rows of the schema above, one per record; a host's text is made once per builder (a store
    holds few distinct hosts, and formatting them was a quarter of the decode time)."""

    MAX_HOSTS = 4096

    def __init__(self, with_body: bool, body_topics: frozenset[str] = frozenset()):
        self.with_body = with_body
        self.body_topics = body_topics  # bodies of these topics' records even without with_body
        self._hosts: dict[HostAddress, str] = {}

    def host(self, address: HostAddress) -> str:
        text = self._hosts.get(address)
        if text is None:
            if len(self._hosts) >= self.MAX_HOSTS:
                self._hosts.clear()
            text = self._hosts[address] = str(address)
        return text

    def row(self, msg: codec.StoredMessage) -> dict:
        return {
            "phys_offset": msg.phys_offset, "size": msg.size, "offset_msg_id": msg.offset_msg_id,
            "unique_key": msg.unique_key, "topic": msg.topic, "queue_id": msg.queue_id,
            "queue_offset": msg.queue_offset, "flag": msg.flag, "sys_flag": msg.sys_flag,
            "born_timestamp": msg.born_timestamp, "born_host": self.host(msg.born_host),
            "store_timestamp": msg.store_timestamp, "store_host": self.host(msg.store_host),
            "reconsume_times": msg.reconsume_times, "tags": msg.tags, "keys": msg.keys,
            "properties": list(msg.properties.items()),
            "body": msg.body if self.with_body or msg.topic in self.body_topics else None,
            "copy_kind": topics.message_copy_kind(msg.topic, msg.properties), "original_id": original_id(msg),
        }
