"""Which message each commit log record is a copy of, and each message's original.

A message is named by its unique key. A copy without one (RocketMQ clients may send without
UNIQ_KEY) is named through its ORIGIN_MESSAGE_ID / DLQ_ORIGIN_MESSAGE_ID, which RocketMQ fills
with either id of the original: its offset message id (then the message is named as the record
with that id is) or its unique key. A record that is nobody's copy is named by its own offset id.

Records of the broker's own bookkeeping topics (transaction op records, the trace topic) are no
message's copies here; a transaction's half message is a copy of the message it may become."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from store.format import topics

# Properties only a copy made from another message carries (a retry, a dead letter or a resend).
COPY_MARKERS = (topics.ORIGIN_MESSAGE_ID, topics.DLQ_ORIGIN_TOPIC, topics.DLQ_ORIGIN_MESSAGE_ID, topics.RESENT_FROM)
ORIGIN_TOPIC_PROPERTIES = (topics.DLQ_ORIGIN_TOPIC, topics.RETRY_TOPIC, topics.REAL_TOPIC)


def prop(name: str) -> Column:
    return F.col("properties").getItem(name)


def bookkeeping_topic(topic: Column) -> Column:
    """Topics only the broker writes that hold no copy of a message: transaction op records, the
    broker's own topics and the trace topic (schedule, timer, retry and dead-letter topics, and a
    transaction's half message, held or discarded, do hold copies)."""
    system = topic.isin(*topics.BROKER_TOPICS, topics.TRACE_TOPIC) | F.upper(topic).startswith(topics.SYSTEM_PREFIX)
    return system & ~topic.isin(topics.TIMER_TOPIC, *topics.TRANSACTION_HALF_TOPICS)


def origin_topic() -> Column:
    """The topic a copy says its message was consumed from: the first of DLQ_ORIGIN_TOPIC,
    RETRY_TOPIC and REAL_TOPIC that is set and not a retry topic (store.retry.origin_topic)."""
    named = [prop(name) for name in ORIGIN_TOPIC_PROPERTIES]
    return F.coalesce(*[F.when((value != "") & ~value.startswith(topics.RETRY_PREFIX), value) for value in named])


def is_original_copy() -> Column:
    """A record in a plain topic that was not made from another message: the produced message,
    or a delayed one put to its topic when due."""
    marked = F.lit(False)
    for name in COPY_MARKERS:
        marked = marked | prop(name).isNotNull()
    return (F.col("copy_kind") == "original") & ~marked


def message_copies(records: DataFrame) -> DataFrame:
    """The records that are copies of messages, with the message_id they belong to."""
    copies = records.where(~bookkeeping_topic(F.col("topic")))
    by_offset_id = copies.select(F.col("offset_msg_id").alias("named_id"),
                                 F.coalesce("unique_key", "offset_msg_id").alias("named_message"))
    keyless = copies.where(F.col("unique_key").isNull())
    resolved = (keyless.join(by_offset_id, keyless.original_id == by_offset_id.named_id, "left")
                .withColumn("message_id", F.coalesce("named_message", "original_id"))
                .drop("named_id", "named_message"))
    keyed = copies.where(F.col("unique_key").isNotNull()).withColumn("message_id", F.col("unique_key"))
    return keyed.unionByName(resolved)


def originals(copies: DataFrame) -> DataFrame:
    """Per message: its original (the first copy, by store time, that `is_original_copy`), null
    when that is not in the store, and the topic it was produced to (the original's, else the
    one its oldest copy names, else the oldest copy's own)."""
    oldest = F.min(F.struct("store_timestamp", "phys_offset", F.coalesce(origin_topic(), F.col("topic")).alias("topic"),
                            "unique_key"))
    first_original = F.min(F.when(is_original_copy(), F.struct("store_timestamp", "phys_offset", "offset_msg_id",
                                                                 "topic")))
    firsts = copies.groupBy("message_id").agg(oldest.alias("oldest"), first_original.alias("original"))
    return firsts.select("message_id", F.col("oldest.unique_key").alias("unique_key"),
                         F.coalesce("original.topic", "oldest.topic").alias("topic"),
                         F.col("original.offset_msg_id").alias("offset_msg_id"),
                         F.col("original.phys_offset").alias("phys_offset"),
                         F.col("original.store_timestamp").alias("store_timestamp"))
