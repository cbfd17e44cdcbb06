"""mqlens's lifecycle events (store.broker.trace) read from the trace topic's records, and the
events of each message: those whose ids (its unique key, the offset id of the copy it concerns)
hold the message's id, as the store's timeline finds them.

A packed record (store.broker.trace_pack: tag PACK_TAG, body starting with MAGIC) holds many
events, one per body line; it is exploded in Spark SQL (split, posexplode) into one row per event
with that event's own ids. An older record holds one event as JSON and is found by its KEYS (the
unique key and the offset id of the copy). Records of the trace topic that are neither
(RocketMQ's own client message trace) are left out."""

from __future__ import annotations

from dataclasses import replace

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pipeline.options import SourceOptions
from store.broker import trace_pack as pack
from store.broker.trace import TraceKind
from store.format import topics

EVENT_FIELDS = (
    ("kind", "STRING"), ("unique_key", "STRING"), ("at_ms", "BIGINT"), ("topic", "STRING"), ("queue_id", "INT"),
    ("queue_offset", "BIGINT"), ("offset_msg_id", "STRING"), ("group", "STRING"), ("attempt", "INT"),
    ("reconsume_times", "INT"), ("due_ms", "BIGINT"), ("reason", "STRING"), ("real_topic", "STRING"),
    ("client", "STRING"),
)
EVENT_DDL = ", ".join(f"`{name}` {kind}" for name, kind in EVENT_FIELDS)
KINDS = tuple(kind.value for kind in TraceKind)


def trace_records(records: DataFrame) -> DataFrame:
    """The trace topic's records (read them with bodies, see with_trace_bodies)."""
    return records.where(F.col("topic") == topics.TRACE_TOPIC)


def with_trace_bodies(source: SourceOptions) -> SourceOptions:
    """One scan for the messages and their events: bodies of the trace topic's records only."""
    return replace(source, with_body=False, body_topics=(topics.TRACE_TOPIC,))


def _is_packed() -> Column:
    return (F.col("tags") == pack.PACK_TAG) & F.col("body").cast("string").startswith(
        pack.MAGIC + pack.FIELD_SEPARATOR)


def _one_event_records(trace: DataFrame) -> DataFrame:
    """Events of the records written one per event (JSON), found by the record's KEYS."""
    event = F.from_json(F.col("body").cast("string"), EVENT_DDL)
    return (trace.where(~F.coalesce(_is_packed(), F.lit(False)))
            .select(F.col("phys_offset").alias("trace_phys_offset"), F.lit(0).alias("trace_position"), "keys",
                    event.alias("event"))
            .where(F.col("event.kind").isin(*KINDS))
            .select("trace_phys_offset", "trace_position", "keys", "event.*"))


def _packed_records(trace: DataFrame) -> DataFrame:
    """Events of packed records, one row per body line, decoded as trace_pack lays them out."""
    lines = F.split(F.col("body").cast("string"), pack.LINE_SEPARATOR)
    rows = trace.where(_is_packed()).select(
        F.col("phys_offset").alias("trace_phys_offset"),
        F.col("keys").alias("record_keys"),
        F.expr(f"substring(offset_msg_id, 1, length(offset_msg_id) - {pack.OFFSET_HEX_DIGITS})").alias("host"),
        F.split(F.get(lines, 0), pack.FIELD_SEPARATOR).alias("header"),
        F.posexplode(F.slice(lines, 2, F.size(lines) - 1)).alias("trace_position", "line"))
    fields = F.split(F.col("line"), pack.FIELD_SEPARATOR)

    def part(i: int) -> Column:
        return F.nullif(F.get(fields, i), F.lit(""))

    def number(i: int, kind: str = "BIGINT") -> Column:
        return part(i).try_cast(kind)

    def text(value: Column) -> Column:  # "=" and the escaped text
        return F.try_url_decode(F.substring(value, 2, 1 << 30))

    def named(i: int) -> Column:
        return F.try_url_decode(F.get(F.col("header"), number(i, "INT") + pack.HEADER_FIELDS))

    def is_text(value: Column) -> Column:
        return value.startswith(pack.TEXT_MARK)

    key, offset = part(pack.KEY), part(pack.OFFSET)
    kinds = F.create_map(*[F.lit(v) for code, kind in pack.KINDS_BY_CODE.items() for v in (code, kind.value)])
    at_ms = F.get(F.col("header"), 1).try_cast("BIGINT") + number(pack.AT)
    event = {
        "kind": kinds[part(pack.KIND)],
        "unique_key": F.when(is_text(key), text(key)).otherwise(F.get(F.col("record_keys"), key.try_cast("INT"))),
        "at_ms": at_ms,
        "topic": named(pack.TOPIC),
        "queue_id": number(pack.QUEUE_ID, "INT"),
        "queue_offset": number(pack.QUEUE_OFFSET),
        "offset_msg_id": F.when(is_text(offset), text(offset)).otherwise(
            F.concat(F.col("host"), F.lpad(offset, pack.OFFSET_HEX_DIGITS, "0"))),
        "group": named(pack.GROUP),
        "attempt": number(pack.ATTEMPT, "INT"),
        "reconsume_times": number(pack.RECONSUME_TIMES, "INT"),
        "due_ms": F.when(at_ms.isNull(), number(pack.DUE)).otherwise(at_ms + number(pack.DUE)),
        "reason": text(part(pack.REASON)),
        "real_topic": named(pack.REAL_TOPIC),
        "client": named(pack.CLIENT),
    }
    decoded = rows.select("trace_phys_offset", "trace_position",
                          *[event[name].cast(kind).alias(name) for name, kind in EVENT_FIELDS])
    ids = F.array_distinct(F.filter(F.array("unique_key", "offset_msg_id"), lambda v: v.isNotNull()))
    return (decoded.where(F.col("kind").isNotNull())
            .select("trace_phys_offset", "trace_position", ids.alias("keys"), *[name for name, _ in EVENT_FIELDS]))


def trace_events(trace: DataFrame) -> DataFrame:
    """One row per readable event: trace_phys_offset and trace_position (its record's offset and
    its place in the record: events of one record are in the order they happened), keys (the ids
    that find it) and the event's fields (EVENT_DDL)."""
    return _one_event_records(trace).unionByName(_packed_records(trace))


def events_of(events: DataFrame, message_ids: DataFrame) -> DataFrame:
    """The events of each message (`message_ids` has a message_id column), with its message_id."""
    keyed = events.select(F.explode(F.array_distinct("keys")).alias("message_id"), "*").drop("keys")
    return keyed.join(message_ids.select("message_id").distinct(), "message_id")
