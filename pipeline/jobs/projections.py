"""Projections: the consume queues and index files of a store, rebuilt from its commit log alone.

The output is laid out as in a store (`OUT/consumequeue/TOPIC/QUEUE/<20-digit offset>`,
`OUT/index/<yyyyMMddHHmmssSSS>`) and holds, byte for byte, what the store's own dispatch writes
when it replays the same commit log, so it can be put beside a commit log whose projections
were lost or never built.

How the work is split:

1. Every record is projected on the executors (pipeline.projection_rows, the store's dispatch
   rules): whether it gets a queue unit and its tagsCode, and the hashes of its index keys.
2. Consume queues are written with one task per queue. Whether the store keeps a unit depends on
   every earlier record of its queue (a unit whose queue offset is not above all earlier ones is
   skipped, as the store's idempotent put does; a gap is filled with pre-blank units), so a task
   takes a whole queue in commit log order and writes its files with the store's ConsumeQueue.
   Queues are spread over the tasks; a single queue is never split.
3. Index files are written with one task per file. The store puts keys into one file after
   another in commit log order (keys of a record in index_keys_of's order), so a key's entry
   number fixes its file: the job numbers the keys (counts per 64 MiB commit log range on the
   driver, running sums within a range on the executors), and from the keys that open and close
   each file the driver plans every file's name and the header values it starts from (the end
   timestamp and offset of the file before it). Each task then fills its files with the store's
   IndexFile. Files are named after the store timestamp of their first key, in the local time zone
   of the driver (RocketMQ and the store name a file by their clock when they create it, about
   when its first key is dispatched); a name that would not sort after the previous one moves on
   a millisecond at a time, as the store's does. So the names are deterministic: the same commit
   log always gives the same names.

The driver only ever holds per-range, per-queue and per-file rows. Executors write into `out`
directly, so on a cluster `out` must be on a file system every executor sees, like the store.
The output is staged beside `out` and renamed into place at the end.
"""

from __future__ import annotations

from functools import partial
from itertools import accumulate
from pathlib import Path

from pyspark import StorageLevel
from pyspark.sql import DataFrame, Row, SparkSession, Window
from pyspark.sql import functions as F

from pipeline.options import SourceOptions
from pipeline.projection_files import (
    INDEX_SUMMARY_DDL,
    QUEUE_SUMMARY_DDL,
    plan_index_files,
    write_index_files,
    write_queue_files,
)
from pipeline.projection_rows import PROJECTED_DDL, SOURCE_COLUMNS, project
from pipeline.segments import segment_files
from pipeline.staged_output import staged_output
from store.format import topics
from store.log.geometry import StoreGeometry
from store.log.paths import StorePaths

RANGE_BYTES = 64 * 1024 * 1024  # commit log bytes whose keys one task numbers


def main(spark: SparkSession, source: SourceOptions, out: Path) -> dict[str, int]:
    segment_files(source.store_dir)  # a directory without a commit log fails here, in words
    source.check_output(out)
    with staged_output(out) as staging:
        paths = StorePaths(staging)
        paths.consumequeue.mkdir()
        paths.index.mkdir()
        table = source.delay_table()
        projected = (source.read(spark, SOURCE_COLUMNS)
                     .mapInArrow(partial(project, delay_levels=table.levels), PROJECTED_DDL)
                     .withColumn("log_range", F.expr(f"phys_offset div {RANGE_BYTES}"))
                     .persist(StorageLevel.MEMORY_AND_DISK))
        try:
            ranges = (projected.groupBy("log_range")
                      .agg(F.count("*").alias("records"), F.sum(F.size("key_hashes")).alias("key_count"),
                           F.count_if(F.col("topic") == topics.SCHEDULE_TOPIC).alias("scheduled"))
                      .orderBy("log_range").collect())
            table.refuse_guess(sum(r.scheduled for r in ranges))
            queues = write_consume_queues(projected, paths, source.geometry)
            index_files = write_index(spark, projected, ranges, paths, source.geometry)
        finally:
            projected.unpersist()
    return {
        "records": sum(r.records for r in ranges),
        "queue_units": sum(q.units for q in queues),
        "queues": len(queues),
        "index_entries": sum(r.key_count for r in ranges),
        "index_files": index_files,
    }


def write_consume_queues(projected: DataFrame, paths: StorePaths, geometry: StoreGeometry) -> list[Row]:
    """One summary row per queue written (topic, queue_id, units)."""
    units = projected.where("in_queue").select("topic", "queue_id", "queue_offset", "phys_offset", "size",
                                               "tags_code")
    writer = partial(write_queue_files, root=str(paths.root), cq_file_size=geometry.cq_file_size)
    return (units.repartition("topic", "queue_id").sortWithinPartitions("topic", "queue_id", "phys_offset")
            .mapInArrow(writer, QUEUE_SUMMARY_DDL).collect())


def number_keys(spark: SparkSession, projected: DataFrame, ranges: list[Row]) -> DataFrame:
    """Records with keys, with the number of their first key in commit log order (from 0)."""
    starts = [0, *accumulate(r.key_count for r in ranges)]
    first_of_range = spark.createDataFrame([(r.log_range, start) for r, start in zip(ranges, starts, strict=False)],
                                           "log_range BIGINT, range_start BIGINT")
    earlier = Window.partitionBy("log_range").orderBy("phys_offset").rowsBetween(Window.unboundedPreceding, -1)
    keys_before = F.coalesce(F.sum(F.size("key_hashes")).over(earlier), F.lit(0))
    return (projected.where(F.size("key_hashes") > 0).join(F.broadcast(first_of_range), "log_range")
            .select("phys_offset", "store_timestamp", "key_hashes",
                    (F.col("range_start") + keys_before).alias("first_key")))


def write_index(spark: SparkSession, projected: DataFrame, ranges: list[Row], paths: StorePaths,
                geometry: StoreGeometry) -> int:
    """Write the index files; returns how many."""
    total = sum(r.key_count for r in ranges)
    if not total:
        return 0
    per_file = geometry.index_entries - 1  # entry 0 of a file is never used
    files = -(-total // per_file)
    numbered = number_keys(spark, projected, ranges).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        plans = plan_index_files(*file_bounds(numbered, per_file, files))
        entries = (numbered.select("phys_offset", "store_timestamp", "first_key",
                                   F.posexplode("key_hashes").alias("position", "key_hash"))
                   .select((F.col("first_key") + F.col("position")).alias("ordinal"), "key_hash", "phys_offset",
                           "store_timestamp")
                   .withColumn("file_no", F.expr(f"ordinal div {per_file}")))
        writer = partial(write_index_files, directory=str(paths.index), slots=geometry.index_slots,
                         entries=geometry.index_entries, plans=plans)
        written = (entries.repartitionByRange(files, "file_no").sortWithinPartitions("file_no", "ordinal")
                   .mapInArrow(writer, INDEX_SUMMARY_DDL).collect())
    finally:
        numbered.unpersist()
    expected = {n: min(per_file, total - n * per_file) for n in range(files)}
    if {r.file_no: r.entries for r in written} != expected:
        raise RuntimeError("the index files did not get the keys they were planned for")
    return files


def file_bounds(numbered: DataFrame, per_file: int, files: int) -> tuple[list[int], list[tuple[int, int]]]:
    """Each file's first key store timestamp, and the (phys_offset, store_timestamp) of the key
    before each file's first ((0, 0) for the first file), from the few records holding them."""
    last = "(first_key + size(key_hashes) - 1)"
    holds_bound = (f"first_key % {per_file} = 0 OR first_key div {per_file} != {last} div {per_file} "
                   f"OR ({last} + 1) % {per_file} = 0")
    first_timestamps = [0] * files
    previous_ends = [(0, 0)] * files
    for row in numbered.where(holds_bound).select("phys_offset", "store_timestamp", "first_key",
                                                  F.size("key_hashes").alias("key_count")).collect():
        for ordinal in range(row.first_key, row.first_key + row.key_count):
            if ordinal % per_file == 0:
                first_timestamps[ordinal // per_file] = row.store_timestamp
            if (ordinal + 1) % per_file == 0 and ordinal + 1 < files * per_file:
                previous_ends[(ordinal + 1) // per_file] = (row.phys_offset, row.store_timestamp)
    return first_timestamps, previous_ends
