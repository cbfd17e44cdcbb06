"""Content search as a Spark job: the records stored within a time window (and in given topics)
whose body or a property value holds a text or matches a regular expression, for windows too
large for the console's bounded search.

Each split of the commit log is searched by the console's own compiled scan
(store.search.scan) and matched by its Matcher, so the job finds exactly what the console's
search finds, with no limit on hits or bytes. Segments outside the time window are not read. A
record the compiled scan cannot parse is read by the data source's Python walk: an error naming
its place, or skipped and reported with `--skip-corrupt`.

Output: Parquet at `out`, one row per hit (HIT_DDL), in commit log order."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

from pipeline.jobs.projections import split_tasks
from pipeline.options import SourceOptions
from pipeline.projection_scan import SplitTask
from pipeline.segments import WalkReport, ends_here, first_boundary, mapped, step
from pipeline.staged_output import staged_output
from store.format import codec
from store.format.layouts import BLANK
from store.search import walk as search_walk
from store.search.matching import ContentQuery, Match, Matcher
from store.search.scan import SCAN_BLANK, SCAN_SLOW, scan_compiled

HIT_DDL = ("phys_offset BIGINT, store_timestamp BIGINT, topic STRING, queue_id INT, queue_offset BIGINT, "
           "offset_msg_id STRING, unique_key STRING, tags STRING, keys ARRAY<STRING>, matched_in STRING, "
           "property_name STRING, snippet STRING")
HITS_PER_CALL = 1024  # hits one compiled call reports before the task matches them


def _row(msg: codec.StoredMessage, match: Match) -> tuple:
    return (msg.phys_offset, msg.store_timestamp, msg.topic, msg.queue_id, msg.queue_offset, msg.offset_msg_id,
            msg.unique_key, msg.tags, list(msg.keys), match.where, match.property_name, match.snippet)


def search_split(task: SplitTask, query: ContentQuery, skip_corrupt: bool) -> list[tuple]:
    """Spark task body: the HIT_DDL rows of the split's records that match."""
    matcher = Matcher(query)
    topics = tuple(t.encode("utf-8") for t in query.topics)
    rows: list[tuple] = []
    report = WalkReport()
    if task.segment.size == 0:
        return rows
    with mapped(task.segment) as buf:
        size = len(buf)
        stop = min(task.end, size)
        pos = first_boundary(buf, task.segment, task.start, stop)
        while pos is not None and pos < stop and pos + BLANK.size <= size and not ends_here(buf, pos):
            status, pos, _, hits = scan_compiled(buf, pos, stop, size, query.begin_ms, query.end_ms, topics,
                                                 query.needle, query.where, HITS_PER_CALL)
            for hit in hits:
                record = buf[hit[0]: hit[0] + hit[5] + hit[6]]
                match = matcher.match(record, hit)
                if match is not None:
                    rows.append(_row(codec.decode(record, 0, check_crc=False), match))
            if status == SCAN_BLANK:
                break
            if status == SCAN_SLOW and pos < stop and not ends_here(buf, pos):
                msg, pos = step(buf, task.segment, pos, skip_corrupt=skip_corrupt, is_tail=task.is_tail,
                                report=report)
                if msg is not None and _wanted(msg, query):
                    match = matcher.match_message(msg.body, msg.properties)
                    if match is not None:
                        rows.append(_row(msg, match))
    return rows


def _wanted(msg: codec.StoredMessage, query: ContentQuery) -> bool:
    return query.begin_ms <= msg.store_timestamp <= query.end_ms and (not query.topics or msg.topic in query.topics)


def splits_in_window(source: SourceOptions, query: ContentQuery) -> list[SplitTask]:
    """The splits of the segments that can hold records stored within the query's window."""
    splits = split_tasks(source)
    segments = {s.segment.path: search_walk.Segment(s.segment.base, s.segment.path) for s in splits}
    kept = {s.path for s in search_walk.segments_for_window(sorted(segments.values(), key=lambda s: s.base),
                                                            query.begin_ms, query.end_ms)}
    return [s for s in splits if s.segment.path in kept]


def main(spark: SparkSession, source: SourceOptions, out: Path, query: ContentQuery) -> dict[str, int]:
    Matcher(query)  # a regular expression that does not compile fails here, in words
    splits = splits_in_window(source, query)
    with staged_output(out) as staging:
        found = spark.sparkContext.parallelize(splits, max(1, len(splits))).flatMap(
            lambda task: search_split(task, query, source.skip_corrupt))
        hits = spark.createDataFrame(found, HIT_DDL).cache()
        hits.coalesce(1).write.mode("overwrite").parquet(str(staging))
        count = hits.count()
        hits.unpersist()
    return {"hits": count, "splits": len(splits)}
