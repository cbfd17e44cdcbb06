"""Projections: the consume queues and index files of a store, rebuilt from its commit log alone.

The output is laid out as in a store (`OUT/consumequeue/TOPIC/QUEUE/<20-digit offset>`,
`OUT/index/<yyyyMMddHHmmssSSS>`) and holds, byte for byte, what the store's own dispatch writes
when it replays the same commit log, so it can be put beside a commit log whose projections
were lost or never built.

Two stages, no shuffle:

1. One task per commit log split (the data source's splits) runs the store's compiled scanner
   over it and keeps what the dispatch makes of its records in two part files: the consume
   queue units grouped by queue, and the index keys in dispatch order
   (pipeline.projection_scan). The driver gets a small summary per split: records, units per
   queue, keys.
2. One task per index file and a few tasks for the consume queues write the files with the
   store's own writers (pipeline.projection_files). A queue's units are read from every part in
   commit log order and put by one task, because whether the store keeps a unit depends on
   every earlier unit of its queue (a unit whose queue offset is not above all earlier ones is
   skipped, a gap is filled with pre-blank units). Index files keep the dispatch's order without
   sorting: the parts are in commit log order and each lists its keys in dispatch order, so key
   number k of the whole log is found by counting keys per part, and file n takes keys
   [n * (entries - 1), (n + 1) * (entries - 1)). A file is named after the store timestamp of its
   first key, in the local time zone of the driver (RocketMQ and the store name a file by their
   clock when they create it, about when its first key is dispatched); a name that would not sort
   after the previous one moves on a millisecond at a time, as the store's does. So the same
   commit log always gives the same names. The cost of keeping that order is one pass over the
   part files per index file (the keys it takes).

The driver only ever holds per-split, per-queue and per-file rows. Tasks write into `out`
directly and pass part files through it, so on a cluster `out` must be on a file system every
executor sees, like the store. The output is staged beside `out` and renamed into place at the
end; the part files are removed before.
"""

from __future__ import annotations

import shutil
from functools import partial
from pathlib import Path

from pyspark.sql import SparkSession

from pipeline.options import SourceOptions
from pipeline.projection_files import PartKeys, plan_index_writes, plan_queue_writes, write_planned
from pipeline.projection_scan import SplitTask, project_split
from pipeline.segments import segment_files
from pipeline.source import CommitLogReader
from pipeline.staged_output import staged_output
from store.log.paths import StorePaths

PARTS = ".parts"  # inside the staged output while the job runs


def split_tasks(source: SourceOptions) -> list[SplitTask]:
    """The data source's splits of the commit log (the newest segment's unwritten rest left out)."""
    reader = CommitLogReader({"path": str(source.store_dir), **source.reader_options()})
    return [SplitTask(s.name, s.segment, s.start, s.end, s.is_tail) for s in reader.partitions()]


def _each(spark: SparkSession, items: list, task) -> list:
    """`task` applied to each item in a Spark task of its own, the results in the items' order."""
    if not items:
        return []
    return spark.sparkContext.parallelize(items, len(items)).map(task).collect()


def main(spark: SparkSession, source: SourceOptions, out: Path) -> dict[str, int]:
    segment_files(source.store_dir)  # a directory without a commit log fails here, in words
    source.check_output(out)
    with staged_output(out) as staging:
        paths = StorePaths(staging)
        paths.consumequeue.mkdir()
        paths.index.mkdir()
        parts_dir = staging / PARTS
        parts_dir.mkdir()
        table = source.delay_table()
        progress = None if source.progress_dir is None else str(source.progress_dir)
        parts = _each(spark, split_tasks(source), partial(
            project_split, parts_dir=str(parts_dir), delay_levels=table.levels, skip_corrupt=source.skip_corrupt,
            progress_dir=progress))
        table.refuse_guess(sum(p.scheduled for p in parts))
        keys = PartKeys(parts_dir, parts)
        index_writes = plan_index_writes(keys, source.geometry.index_entries - 1)
        queue_writes = plan_queue_writes(parts, spark.sparkContext.defaultParallelism)
        done = _each(spark, [*index_writes, *queue_writes], partial(
            write_planned, parts_dir=str(parts_dir), parts=parts, root=str(staging), geometry=source.geometry))
        indexed = dict(result for kind, result in done if kind == "index")
        queues = [row for kind, rows in done if kind == "queues" for row in rows]
        if indexed != {w.number: w.stop - w.first for w in index_writes}:
            raise RuntimeError("the index files did not get the keys they were planned for")
        shutil.rmtree(parts_dir)
    return {
        "records": sum(p.records for p in parts),
        "queue_units": sum(units for _, _, units in queues),
        "queues": len(queues),
        "index_entries": keys.total,
        "index_files": len(index_writes),
    }
