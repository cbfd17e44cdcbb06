"""The commit log as a Spark data source: `spark.read.format("rocketmq_commitlog").load(store_dir)`.

One partition per segment file, and a segment larger than `split_bytes` is read by several
tasks, each starting at a verified record boundary. Each task opens its own file and yields
Arrow batches built by the store's decoder. Read-only: works on an mqlens store and on a
RocketMQ store directory, live or not (the newest segment is read up to its last complete
record). Each task decodes its range in the store's compiled code straight into Arrow buffers
(pipeline.columnar). With the `pushdown` option, filters on topic, store time, physical offset, queue id, copy kind
and tags are pushed into that scan: a record they reject is never built into a row. Spark's Python data
sources offer no column pruning (every batch carries the whole schema), so `body` is the one way
to leave bytes undecoded.

Options: `body` (true/false, default false), `body_topics` (topics whose bodies are read even
without `body`), `skip_corrupt` (true/false: skip and report corrupt ranges instead of failing),
`split_bytes` (default 128 MiB), `progress_dir` (a folder where each task reports records read,
skipped ranges and a torn tail; see pipeline.progress), `decoder` (compiled, the default, or
python: the reference decoder, one Python object per record), `pushdown` (true/false, default
false: take Spark's filters into the scan; only for a load that one query filters one way, as
Spark 4.3 applies the filters pushed last to every scan of the same load)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, Filter, InputPartition

from pipeline.columnar import DecodePlan, read_range
from pipeline.options import FORMAT
from pipeline.progress import write_task_progress
from pipeline.records import ARROW_SCHEMA, BATCH_ROWS, SCHEMA_DDL, RowBuilder, chosen_columns
from pipeline.scan_filter import ScanFilter
from pipeline.segments import Segment, WalkReport, first_store_timestamp, records_end, segment_files, walk

DEFAULT_SPLIT_BYTES = 128 * 1024 * 1024
DECODERS = ("compiled", "python")


def _flag(options: dict, name: str) -> bool:
    value = str(options.get(name, "false")).strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"option {name} is true or false, not {value!r}")
    return value == "true"


def _positive(options: dict, name: str, default: int) -> int:
    text = str(options.get(name, default)).strip()
    if not text.isdigit() or int(text) <= 0:
        raise ValueError(f"option {name} is a positive number of bytes, not {text!r}")
    return int(text)


class SegmentSplit(InputPartition):
    """Records whose first byte lies in [start, end) of one segment."""

    def __init__(self, segment: Segment, start: int, end: int, is_tail: bool):
        super().__init__((str(segment.path), start))
        self.segment = segment
        self.start = start
        self.end = end
        self.is_tail = is_tail

    @property
    def name(self) -> str:
        return f"{self.segment.path.name}-{self.start:020d}"


class CommitLogReader(DataSourceReader):
    def __init__(self, options: dict, columns: tuple[str, ...] | None = None):
        self.columns = columns  # None: every column (records.chosen_columns)
        path = options.get("path")
        if not path:
            raise ValueError("give the store directory: spark.read.format('rocketmq_commitlog').load(DIR)")
        self.store_dir = Path(path).resolve()  # executors may run in another directory
        self.with_body = _flag(options, "body")
        self.body_topics = frozenset(t for t in str(options.get("body_topics", "")).split(",") if t)
        self.skip_corrupt = _flag(options, "skip_corrupt")
        self.split_bytes = _positive(options, "split_bytes", DEFAULT_SPLIT_BYTES)
        self.progress_dir = options.get("progress_dir") or None
        self.decoder = str(options.get("decoder", "compiled")).strip().lower()
        if self.decoder not in DECODERS:
            raise ValueError(f"option decoder is one of {', '.join(DECODERS)}, not {self.decoder!r}")
        self.pushdown = _flag(options, "pushdown")
        self.filter = ScanFilter()

    def pushFilters(self, filters: list[Filter]) -> list[Filter]:  # noqa: N802 (Spark's name)
        # Spark 4.3 keeps one pushdown result per loaded relation: two differently filtered
        # scans of the same load in one query (a union, a self-join) would both read with the
        # filters pushed last. So filters are taken only when the caller asks for it.
        if not self.pushdown:
            return list(filters)
        return self.filter.take(list(filters))

    def partitions(self) -> list[InputPartition]:
        segments = segment_files(self.store_dir)
        if self.filter.empty:
            return []
        wanted = [s for s in segments if self.filter.phys_offset.overlaps(s.base, s.base + s.size - 1)]
        wanted = self._within_time(segments, wanted)
        newest = segments[-1] if segments else None
        return [SegmentSplit(s, start, min(start + self.split_bytes, length), s is newest)
                for s in wanted for length in [self._planned_length(s, s is newest)]
                for start in range(0, max(length, 1), self.split_bytes)]

    @staticmethod
    def _planned_length(segment: Segment, newest: bool) -> int:
        """How much of a segment its splits cover: all of it, but for the newest only up to where
        its records end at zeros (no task is spent resyncing through the unwritten rest)."""
        end = records_end(segment) if newest else None
        return segment.size if end is None else end

    def _within_time(self, segments: list[Segment], wanted: list[Segment]) -> list[Segment]:
        """Segments whose records may fall in the time range: a segment's records are no older
        than its first one and older than the next segment's first."""
        window = self.filter.store_timestamp
        if window.unbounded:
            return wanted
        firsts = {s.path: first_store_timestamp(s) for s in segments}
        following = {a.path: firsts[b.path] for a, b in zip(segments, segments[1:], strict=False)}
        kept = []
        for s in wanted:
            low, high = firsts[s.path], following.get(s.path)
            if low is None or window.overlaps(low, float("inf") if high is None else high):
                kept.append(s)
        return kept

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        batches = self._read_whole_rows(partition)
        if self.columns is None:
            yield from batches
        else:
            yield from (batch.select(self.columns) for batch in batches)

    def _read_whole_rows(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, SegmentSplit):  # Spark's stand-in when no segment is to be read
            return
        report = WalkReport()
        if self.decoder == "python":
            yield from self._read_in_python(partition, report)
        else:
            plan = DecodePlan(self.with_body, self.body_topics, self.filter)
            yield from read_range(partition.segment, partition.start, partition.end, plan,
                                  skip_corrupt=self.skip_corrupt, is_tail=partition.is_tail, report=report,
                                  progress=lambda: self._progress(partition, report, done=False))
        self._progress(partition, report, done=True)

    def _read_in_python(self, partition: SegmentSplit, report: WalkReport) -> Iterator[pa.RecordBatch]:
        """The reference reader: the Python codec, one row object per record."""
        pending: list[dict] = []
        rows = RowBuilder(self.with_body, self.body_topics)
        for msg in walk(partition.segment, partition.start, partition.end, skip_corrupt=self.skip_corrupt,
                        is_tail=partition.is_tail, report=report):
            if self.filter.matches(msg):
                pending.append(rows.row(msg))
            if report.records % BATCH_ROWS == 0:
                self._progress(partition, report, done=False)
                if pending:
                    yield pa.RecordBatch.from_pylist(pending, schema=ARROW_SCHEMA)
                    pending = []
        if pending:
            yield pa.RecordBatch.from_pylist(pending, schema=ARROW_SCHEMA)

    def _progress(self, partition: SegmentSplit, report: WalkReport, done: bool) -> None:
        if self.progress_dir:
            write_task_progress(self.progress_dir, partition.name, report, done)


class CommitLogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema) -> DataSourceReader:
        return CommitLogReader(dict(self.options), chosen_columns(schema))

    def streamReader(self, schema) -> DataSourceStreamReader:  # noqa: N802 (Spark's name)
        from pipeline.stream_source import CommitLogStreamReader  # it builds on this module's reader

        return CommitLogStreamReader(dict(self.options), chosen_columns(schema))
