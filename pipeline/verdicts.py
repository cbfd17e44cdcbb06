"""Where a message stands for each consumer group, as the console decides it
(app.services.timeline_verdicts): each group's standing after the message's hops in order,
then, for a group left waiting for a copy, what the store's consumer progress says of it."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pipeline.consumer_progress import ConsumerProgress
from store.format import topics

COPY_HOPS = ("produced", "released", "resent")  # a copy: in a plain topic for every group, in a retry topic for its own
GROUP_MOVES = ("delivered", "consumed", "failed", "retry_scheduled", "redelivered", "dead_lettered")
EVERY_GROUP_MOVES = (*COPY_HOPS, "scheduled")
WAITS_FOR_COPY = ("delivered", "redelivered", *COPY_HOPS)
VERDICT_DDL = "`group` STRING, state STRING, next_attempt_ms BIGINT, attempts INT, dead_lettered_ms BIGINT"
STANDING = ("state", "copy_topic", "copy_queue_id", "copy_queue_offset", "next_attempt_ms", "attempts")


def message_topics() -> Column:
    """The plain topics a copy of the message was put to (not a group's retry topic)."""
    return F.transform(F.filter("hops", lambda h: h["kind"].isin(*COPY_HOPS) & h["topic"].isNotNull()
                                & ~h["topic"].startswith(topics.RETRY_PREFIX)), lambda h: h["topic"])


def moves_every_group(hop: Column, group: Column) -> Column:
    """A hop of no group that moves `group`: a delay, or a copy, except one in another group's
    retry topic (%RETRY%G, or %RETRY%G_T with T a topic of the message)."""
    topic = hop["topic"]
    retry_of = F.concat(F.lit(topics.RETRY_PREFIX), group)
    owned = (topic == retry_of) | F.exists(message_topics(), lambda t: topic == F.concat(retry_of, F.lit("_"), t))
    in_retry_topic = F.coalesce(topic.startswith(topics.RETRY_PREFIX), F.lit(False))
    return hop["group"].isNull() & hop["kind"].isin(*EVERY_GROUP_MOVES) & (~in_retry_topic | owned)


def groups(followers: dict[str, list[str]]) -> Column:
    """The groups of a message, by name: those its hops name, and those with recorded progress
    on a plain topic a copy of it was put to."""
    named = F.filter(F.transform("hops", lambda h: h["group"]), lambda g: g.isNotNull())
    put_to = message_topics()
    if not followers:
        return F.array_sort(F.array_distinct(named))
    by_topic = F.create_map(*[value for topic, names in sorted(followers.items())
                              for value in (F.lit(topic), F.array(*[F.lit(g) for g in names]))])
    following = F.flatten(F.transform(put_to, lambda t: F.coalesce(by_topic[t], F.array().cast("array<string>"))))
    return F.array_sort(F.array_distinct(F.concat(named, following)))


def standing(group: Column) -> dict[str, Column]:
    """A group's standing after the hops: set by the last hop that moves it (a hop of the group,
    or a copy put where every group may take it, or a delay every group waits for), with the
    copy it has yet to consume; and the delivery attempts known (each hop of the group counts
    its attempt, a redelivery the attempt before it)."""
    moves = F.filter("hops", lambda h: (h["group"] == group) & h["kind"].isin(*GROUP_MOVES)
                     | moves_every_group(h, group))
    last = F.get(moves, F.size(moves) - 1)
    kind, due = last["kind"], last["due_ms"]
    state = (F.when(last.isNull(), F.lit("pending"))
             .when(kind == "consumed", F.lit("consumed"))
             .when(kind == "dead_lettered", F.lit("dead_lettered"))
             .when(kind == "retry_scheduled", F.lit("retry_pending"))
             .when((kind == "failed") & due.isNotNull(), F.lit("retry_pending"))
             .otherwise(F.lit("pending")))
    waits = kind.isin(*WAITS_FOR_COPY)
    counted = F.transform(F.filter("hops", lambda h: h["group"] == group),
                          lambda h: F.when(h["kind"] == "redelivered", F.coalesce(h["attempt"], F.lit(1)) - 1)
                          .otherwise(F.coalesce(h["attempt"], F.lit(0))))
    return {
        "state": state,
        "copy_topic": F.when(waits, last["topic"]),
        "copy_queue_id": F.coalesce(F.when(waits, last["queue_id"]), F.lit(0)),
        "copy_queue_offset": F.coalesce(F.when(waits, last["queue_offset"]), F.lit(0)),
        "next_attempt_ms": F.when(kind.isin("failed", "retry_scheduled", "scheduled"), due),
        "attempts": F.nullif(F.coalesce(F.array_max(counted), F.lit(0)), F.lit(0)),
    }


def with_verdicts(timelines: DataFrame, progress: ConsumerProgress) -> DataFrame:
    """`timelines` (message_id, hops, traced, ...) with `verdicts`: an array of VERDICT_DDL
    structs by group name, empty when no group has to do with the message."""
    columns = timelines.columns
    per_group = timelines.select("*", F.explode_outer(groups(progress.followers)).alias("group"))
    group = F.col("group")
    dead = F.filter("hops", lambda h: (h["kind"] == "dead_lettered") & (h["group"] == group))
    stood = per_group.select("*", F.get(dead, 0)["time_ms"].alias("dead_lettered_ms"),
                             *[value.alias(name) for name, value in standing(group).items()])
    settled = settle(stood, progress)
    verdict = F.when(group.isNotNull(), F.struct("group", "state", "next_attempt_ms", "attempts", "dead_lettered_ms"))
    return (settled.groupBy("message_id")
            .agg(F.first(F.struct(*[c for c in columns if c != "message_id"])).alias("timeline"),
                 F.array_sort(F.collect_list(verdict)).alias("verdicts"))
            .select("message_id", "timeline.*", "verdicts"))


def settle(stood: DataFrame, progress: ConsumerProgress) -> DataFrame:
    """A group left waiting for a copy: in flight with a receive, past the copy by its consumer
    offset or receive cursor (consumed), before it (pending), or unknown when nothing recorded
    tells (pending when the message was traced)."""
    where = ["group", "copy_topic", "copy_queue_id"]
    flight = progress.in_flight.select("group", F.col("topic").alias("copy_topic"),
                                       F.col("queue_id").alias("copy_queue_id"),
                                       F.col("queue_offset").alias("copy_queue_offset"),
                                       F.col("attempt").alias("flight_attempt"),
                                       F.col("due_ms").alias("flight_due_ms"), "handed_out")
    offsets = progress.offsets.select("group", F.col("topic").alias("copy_topic"),
                                      F.col("queue_id").alias("copy_queue_id"), "committed")
    cursors = progress.cursors.select("group", F.col("topic").alias("copy_topic"),
                                      F.col("queue_id").alias("copy_queue_id"), "next_offset")
    joined = (stood.join(F.broadcast(flight), [*where, "copy_queue_offset"], "left")
              .join(F.broadcast(offsets), where, "left")
              .join(F.broadcast(cursors), where, "left"))
    waiting = (F.col("state") == "pending") & F.col("copy_topic").isNotNull()
    in_flight = F.col("handed_out").isNotNull()
    past = F.col("copy_queue_offset")
    state = (F.when(~waiting, F.col("state"))
             .when(in_flight & F.col("handed_out"), F.lit("pending"))
             .when(in_flight, F.lit("retry_pending"))
             .when((F.col("committed") > past) | (F.col("next_offset") > past), F.lit("consumed"))
             .when(F.col("committed").isNotNull() | F.col("traced"), F.lit("pending"))
             .otherwise(F.lit("unknown")))
    next_attempt = (F.when(~waiting, F.col("next_attempt_ms")).when(in_flight, F.col("flight_due_ms"))
                    .otherwise(F.lit(None).cast("bigint")))
    attempts = F.when(waiting & in_flight, F.col("flight_attempt")).otherwise(F.col("attempts"))
    return joined.withColumns({"state": state, "next_attempt_ms": next_attempt, "attempts": attempts})
