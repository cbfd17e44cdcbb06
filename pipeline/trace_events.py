"""mqlens's lifecycle events (store.trace) read from the trace topic's records, and the events
of each message: those whose record's KEYS hold the message's id, as the store's timeline
finds them through the index (a record is keyed by the event's unique key and by the offset
id of the copy it concerns). Records of the trace topic that are not mqlens events (RocketMQ's
own message trace) are left out."""

from __future__ import annotations

from dataclasses import replace

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipeline.options import SourceOptions
from store.broker.trace import TraceKind
from store.format import topics

EVENT_DDL = (
    "kind STRING, unique_key STRING, at_ms BIGINT, topic STRING, queue_id INT, queue_offset BIGINT, "
    "offset_msg_id STRING, `group` STRING, attempt INT, reconsume_times INT, due_ms BIGINT, reason STRING, "
    "real_topic STRING"
)
KINDS = tuple(kind.value for kind in TraceKind)


def trace_records(records: DataFrame) -> DataFrame:
    """The trace topic's records (read them with bodies, see with_trace_bodies)."""
    return records.where(F.col("topic") == topics.TRACE_TOPIC)


def with_trace_bodies(source: SourceOptions) -> SourceOptions:
    """One scan for the messages and their events: bodies of the trace topic's records only."""
    return replace(source, with_body=False, body_topics=(topics.TRACE_TOPIC,))


def trace_events(trace: DataFrame) -> DataFrame:
    """One row per readable event: trace_phys_offset (the record's), keys (the record's) and the
    event's fields."""
    event = F.from_json(F.col("body").cast("string"), EVENT_DDL)
    return (trace.select(F.col("phys_offset").alias("trace_phys_offset"), "keys", event.alias("event"))
            .where(F.col("event.kind").isin(*KINDS))
            .select("trace_phys_offset", "keys", "event.*"))


def events_of(events: DataFrame, message_ids: DataFrame) -> DataFrame:
    """The events of each message (`message_ids` has a message_id column), with its message_id."""
    keyed = events.select(F.explode(F.array_distinct("keys")).alias("message_id"), "*").drop("keys")
    return keyed.join(message_ids.select("message_id").distinct(), "message_id")
