"""What a store's config/ says of its consumer groups, as small DataFrames: committed consumer
offsets (consumerOffset.json) and pop-style receive state (popState.json), read on the driver
with the store's own readers. Pop state is fitted to the queues as the store fits it when it
opens (store.pop_state.load_state), with the queues' bounds taken from the commit log."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from store.broker.offsets import KEY_SEPARATOR, ConsumerOffsets
from store.broker.pop_state import STATE_FILE, PopState, load_state
from store.format.codec import TRANSACTION_PREPARED, TRANSACTION_ROLLBACK, TRANSACTION_TYPE_MASK
from store.log.config_file import read_config
from store.log.paths import StorePaths

OFFSETS_DDL = "topic STRING, `group` STRING, queue_id INT, committed BIGINT"
IN_FLIGHT_DDL = ("`group` STRING, topic STRING, queue_id INT, queue_offset BIGINT, attempt INT, due_ms BIGINT, "
                 "handed_out BOOLEAN")
CURSORS_DDL = "`group` STRING, topic STRING, queue_id INT, next_offset BIGINT"


@dataclass(frozen=True)
class ConsumerProgress:
    offsets: DataFrame  # OFFSETS_DDL: the next offset each group consumes from each queue
    followers: dict[str, list[str]]  # topic -> groups with offsets or receive state on it, by name
    in_flight: DataFrame  # IN_FLIGHT_DDL: received messages handed out or waiting for their next attempt
    cursors: DataFrame  # CURSORS_DDL: the next queue offset receive hands out to each group


def read_progress(spark: SparkSession, store_dir: Path, records: DataFrame) -> ConsumerProgress:
    """The progress recorded in the store directory; `records` is its commit log (for the queues
    pop state refers to)."""
    config = StorePaths(Path(store_dir)).config
    table = ConsumerOffsets(config).table_json()
    pairs = [(key.rsplit(KEY_SEPARATOR, 1), queues) for key, queues in table.items()]
    offsets = [(topic, group, int(q), int(o)) for (topic, group), queues in pairs for q, o in queues.items()]
    followers = {(topic, group) for (topic, group), _ in pairs}
    state = _pop_state(config, records)
    in_flight, cursors = [], []
    for sub in state:
        followers.add((sub.topic, sub.group))
        cursors += [(sub.group, sub.topic, q, o) for q, o in sub.cursors.items()]
        in_flight += [(sub.group, sub.topic, e.queue_id, e.queue_offset, e.attempt, e.due_ms, e.handed_out)
                      for e in sub.entries.values()]
    by_topic: dict[str, list[str]] = {}
    for topic, group in sorted(followers):
        by_topic.setdefault(topic, []).append(group)
    return ConsumerProgress(spark.createDataFrame(offsets, OFFSETS_DDL), by_topic,
                            spark.createDataFrame(in_flight, IN_FLIGHT_DDL),
                            spark.createDataFrame(cursors, CURSORS_DDL))


def _pop_state(config: Path, records: DataFrame) -> PopState:
    saved = read_config(config / STATE_FILE)
    subscriptions = saved.get("subscriptions") if isinstance(saved, dict) else None
    if not subscriptions:
        return PopState()
    pop_topics = sorted({str(sub.get("topic")) for sub in subscriptions if isinstance(sub, dict)})
    kind = F.col("sys_flag").bitwiseAND(TRANSACTION_TYPE_MASK)
    units = records.where(F.col("topic").isin(*pop_topics) & ~kind.isin(TRANSACTION_PREPARED, TRANSACTION_ROLLBACK))
    bounds = {(r.topic, r.queue_id): (r.low, r.high) for r in units.groupBy("topic", "queue_id").agg(
        F.min("queue_offset").alias("low"), (F.max("queue_offset") + 1).alias("high")).collect()}
    wanted = [(str(sub["topic"]), int(e["queueId"]), int(e["queueOffset"]))
              for sub in subscriptions for e in sub.get("inFlight", []) if isinstance(e, dict)]
    unit_phys = {}
    if wanted:
        spark = records.sparkSession
        keys = spark.createDataFrame(wanted, "topic STRING, queue_id INT, queue_offset BIGINT").distinct()
        unit_phys = {(r.topic, r.queue_id, r.queue_offset): r.phys_offset
                     for r in units.join(F.broadcast(keys), ["topic", "queue_id", "queue_offset"]).collect()}
    return load_state(config, lambda topic, q: bounds.get((topic, q)),
                      lambda topic, q, offset: unit_phys.get((topic, q, offset)))

