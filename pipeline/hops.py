"""The hops of a message's life, as the console's timeline makes them (app.services.timeline_hops):
from its recorded trace events when there are any, else from the copies the broker wrote.

Each hop row carries the message_id, an `order` struct (time, then the record it came from,
then its place among the hops of that record), whether it was `recorded` (made from an event)
and the `hop` struct of HOP_DDL. A hop made from a copy (`derived`) has no reason: the copy does
not keep why it failed."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pipeline.message_ids import prop
from store.broker.trace import TraceKind
from store.format import topics
from store.format.codec import TRANSACTION_COMMIT, TRANSACTION_TYPE_MASK
from store.format.delay_levels import UNKNOWN_LEVEL_DELAY_MS, DelayLevels

HOP_FIELDS = (
    ("kind", "STRING"), ("time_ms", "BIGINT"), ("derived", "BOOLEAN"), ("group", "STRING"), ("attempt", "INT"),
    ("topic", "STRING"), ("queue_id", "INT"), ("queue_offset", "BIGINT"), ("offset_msg_id", "STRING"),
    ("phys_offset", "BIGINT"), ("reconsume_times", "INT"), ("delay_level", "INT"), ("due_ms", "BIGINT"),
    ("reason", "STRING"),
)
HOP_DDL = ", ".join(f"`{name}` {kind}" for name, kind in HOP_FIELDS)
RESEND_MARKERS = (topics.ORIGIN_MESSAGE_ID, topics.DLQ_ORIGIN_TOPIC, topics.DLQ_ORIGIN_MESSAGE_ID)
TIMEOUT_WORDS = "not acknowledged within its invisible time"
FAILURE_WORDS = "the consumer reported a failure"


def hop(kind: str | Column, time_ms: Column, derived: bool, **fields: Column) -> Column:
    """A hop struct: the fields given, null for the others."""
    values = {"kind": F.lit(kind) if isinstance(kind, str) else kind, "time_ms": time_ms, "derived": F.lit(derived),
              **fields}
    return F.struct(*[(values[name] if name in values else F.lit(None)).cast(kind).alias(name)
                      for name, kind in HOP_FIELDS])


def phys_offset_of(offset_msg_id: Column) -> Column:
    """The commit log offset an offset message id holds (its last 8 bytes)."""
    return F.conv(F.substring(offset_msg_id, -16, 16), 16, 10).cast("bigint")


def group_of(topic: Column, prefix: str) -> Column:
    return F.substring(topic, len(prefix) + 1, 1 << 16)


def schedule_level(topic: Column, queue_id: Column) -> Column:
    """SCHEDULE_TOPIC_XXXX keeps delay level L in queue L - 1."""
    return F.when(topic == topics.SCHEDULE_TOPIC, queue_id + 1)


# -- from trace events -------------------------------------------------------------------------
EVENT_HOP_KINDS = {
    TraceKind.STORED: "produced", TraceKind.SCHEDULED: "scheduled", TraceKind.RELEASED: "released",
    TraceKind.DELIVERED: "delivered", TraceKind.ACKED: "consumed", TraceKind.FAILED: "failed",
    TraceKind.INVISIBLE_TIMEOUT: "failed", TraceKind.RETRY: "retry_scheduled", TraceKind.DEAD_LETTER: "dead_lettered",
    TraceKind.RESENT: "resent", TraceKind.DUPLICATE: "duplicate", TraceKind.COMMITTED: "produced",
    TraceKind.ROLLED_BACK: "transaction", TraceKind.CHECKED: "transaction", TraceKind.DISCARDED: "transaction",
    TraceKind.INVISIBLE_CHANGED: "invisible_changed",
}


def event_hops(events: DataFrame) -> DataFrame:
    """One hop per event (events_of's rows), ordered by the event's time, then its record and its
    place there. A release to a retry topic is the redelivery of the group's next attempt; a half
    message stored is a transaction hop, and a commit waiting for its delivery time a scheduled one."""
    event_kind, topic = F.col("kind"), F.coalesce(F.col("topic"), F.lit(""))
    to_retry = (event_kind == TraceKind.RELEASED.value) & topic.startswith(topics.RETRY_PREFIX)
    half = (event_kind == TraceKind.STORED.value) & (topic == topics.TRANS_HALF_TOPIC)
    timed_commit = (event_kind == TraceKind.COMMITTED.value) & topic.isin(topics.SCHEDULE_TOPIC, topics.TIMER_TOPIC)
    kind = (F.when(to_retry, F.lit("redelivered")).when(half, F.lit("transaction"))
            .when(timed_commit, F.lit("scheduled"))
            .otherwise(F.create_map(*[F.lit(v) for pair in EVENT_HOP_KINDS.items() for v in pair])[event_kind]))
    next_attempt = F.coalesce(F.col("reconsume_times"), F.lit(0)) + 1
    why = F.coalesce(F.col("reason"), F.when(event_kind == TraceKind.INVISIBLE_TIMEOUT.value, F.lit(TIMEOUT_WORDS))
                     .otherwise(F.lit(FAILURE_WORDS)))
    made = hop(
        kind, F.col("at_ms"), False,
        group=F.when(to_retry, group_of(topic, topics.RETRY_PREFIX)).otherwise(F.col("group")),
        attempt=F.when(to_retry | (event_kind == TraceKind.RETRY.value), next_attempt).otherwise(F.col("attempt")),
        topic=F.col("topic"), queue_id=F.col("queue_id"), queue_offset=F.col("queue_offset"),
        offset_msg_id=F.col("offset_msg_id"), phys_offset=phys_offset_of(F.col("offset_msg_id")),
        reconsume_times=F.col("reconsume_times"),
        delay_level=F.when(event_kind.isin(TraceKind.SCHEDULED.value, TraceKind.RETRY.value),
                           schedule_level(F.col("topic"), F.col("queue_id"))),
        due_ms=F.when(~event_kind.isin(TraceKind.RELEASED.value, TraceKind.DELIVERED.value), F.col("due_ms")),
        reason=F.when(event_kind.isin(TraceKind.FAILED.value, TraceKind.INVISIBLE_TIMEOUT.value), why)
        .otherwise(F.col("reason")),
    )
    order = F.struct(F.col("at_ms").alias("time_ms"), F.col("trace_phys_offset").alias("record"),
                     F.col("trace_position").alias("step"))
    return events.select("message_id", order.alias("order"), F.lit(True).alias("recorded"), made.alias("hop"))


# -- from the copies ---------------------------------------------------------------------------
def deliver_time(levels: DelayLevels, level: Column, store_timestamp: Column, phys_offset: Column) -> Column:
    """DelayLevels.deliver_time: the table in force at the record's offset, the level capped to
    its length; an unknown level waits a second."""

    def delay(delays: tuple[int, ...]) -> Column:
        return F.element_at(F.array(*[F.lit(d) for d in delays]), F.least(level, F.lit(len(delays))))

    tables = levels.tables
    chosen = delay(tables[-1].delays_ms)
    if len(tables) > 1:
        chosen = delay(tables[0].delays_ms)
        for table in tables[1:]:
            chosen = F.when(phys_offset >= table.from_phys_offset, delay(table.delays_ms)).otherwise(chosen)
    return store_timestamp + F.when(level >= 1, chosen).otherwise(F.lit(UNKNOWN_LEVEL_DELAY_MS))


def timer_deliver_ms() -> Column:
    """store.format.delivery_time.timer_deliver_ms: TIMER_DELIVER_MS when it is a plain number, else the store time."""
    text = prop(topics.TIMER_DELIVER_MS)
    return F.when(text.rlike("^[0-9]{1,18}$"), text.cast("bigint")).otherwise(F.col("store_timestamp"))


def copy_hop_kinds() -> Column:
    """The kinds of the hops a copy shows: a SCHEDULE_TOPIC_XXXX copy bound for %RETRY%G is a
    failed attempt of G and its retry waiting at a delay level; a %RETRY%G copy a redelivery; a
    %DLQ%G copy a last failure and the dead letter; a transaction's half message a transaction
    hop; a copy in a plain topic the produced message (a committed transactional one too), a
    delayed one released, or a dead letter resent."""
    copy_kind, real_topic = F.col("copy_kind"), F.coalesce(prop(topics.REAL_TOPIC), F.lit(""))
    resend_marked = F.lit(False)
    for name in RESEND_MARKERS:
        resend_marked = resend_marked | prop(name).isNotNull()

    def kinds(*names: str) -> Column:
        return F.array(*[F.lit(name) for name in names])

    committed = (F.col("sys_flag").bitwiseAND(TRANSACTION_TYPE_MASK) == TRANSACTION_COMMIT)
    return (F.when(copy_kind == "resent", kinds("resent"))
            .when(copy_kind == "transaction_half", kinds("transaction"))
            .when((copy_kind == "scheduled") & real_topic.startswith(topics.RETRY_PREFIX),
                  kinds("failed", "retry_scheduled"))
            .when(copy_kind == "scheduled", kinds("scheduled"))
            .when(copy_kind == "retry", kinds("redelivered"))
            .when(copy_kind == "dead_letter", kinds("failed", "dead_lettered"))
            .when((copy_kind == "original") & committed, kinds("produced"))
            .when((copy_kind == "original") & resend_marked, kinds("resent"))
            .when((copy_kind == "original") & prop(topics.REAL_TOPIC).isNotNull(), kinds("released"))
            .when(copy_kind == "original", kinds("produced"))
            .otherwise(F.array().cast("array<string>")))


def copy_hops(copies: DataFrame, levels: DelayLevels) -> DataFrame:
    """The hops each copy (message_copies' rows) shows (copy_hop_kinds), ordered by the copy's
    store time, then its offset."""
    steps = copies.select("*", F.posexplode(copy_hop_kinds()).alias("step", "hop_kind"))
    kind, topic, at, rt = F.col("hop_kind"), F.col("topic"), F.col("store_timestamp"), F.col("reconsume_times")
    real_topic = F.coalesce(prop(topics.REAL_TOPIC), F.lit("?"))
    level = schedule_level(topic, F.col("queue_id"))
    waits = kind.isin("scheduled", "retry_scheduled")
    due = F.when(level.isNotNull(), deliver_time(levels, level, at, F.col("phys_offset"))).otherwise(timer_deliver_ms())
    group = (F.when(F.col("copy_kind") == "scheduled", group_of(real_topic, topics.RETRY_PREFIX))
             .when(F.col("copy_kind") == "retry", group_of(topic, topics.RETRY_PREFIX))
             .when(F.col("copy_kind") == "dead_letter", group_of(topic, topics.DLQ_PREFIX)))
    made = hop(
        kind, at, True,
        group=F.when(kind.isin("failed", "retry_scheduled", "redelivered", "dead_lettered"), group),
        attempt=(F.when(kind.isin("retry_scheduled", "redelivered"), rt + 1)
                 .when(kind.isin("failed", "dead_lettered"), rt)),
        topic=topic, queue_id=F.col("queue_id"), queue_offset=F.col("queue_offset"),
        offset_msg_id=F.col("offset_msg_id"), phys_offset=F.col("phys_offset"), reconsume_times=rt,
        delay_level=F.when(waits, level), due_ms=F.when(waits, due),
    )
    order = F.struct(at.alias("time_ms"), F.col("phys_offset").alias("record"), "step")
    return steps.select("message_id", order.alias("order"), F.lit(False).alias("recorded"), made.alias("hop"))


def ordered_hops(hop_rows: DataFrame) -> DataFrame:
    """message_id, traced, hops: the message's hops in order, those of its events when it has
    any (traced), else those of its copies."""
    steps = F.array_sort(F.collect_list(F.struct("order", "recorded", "hop")))
    traced = F.exists("steps", lambda step: step["recorded"])
    chosen = F.filter("steps", lambda step: step["recorded"] == F.col("traced"))
    return (hop_rows.groupBy("message_id").agg(steps.alias("steps")).withColumn("traced", traced)
            .select("message_id", "traced", F.transform(chosen, lambda step: step["hop"]).alias("hops")))
