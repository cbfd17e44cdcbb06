"""The commit log as a Spark data source: `spark.read.format("rocketmq_commitlog").load(store_dir)`.

One partition per segment file; each task opens its own segment and yields Arrow batches built
by the store's decoder. Read-only: works on an mqlens store and on a RocketMQ store directory.
Options: `body` ("true" to include message bodies; default false), `skip_corrupt` ("true" to end
a segment at a corrupt record instead of failing the task)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from pipeline.records import SCHEMA_DDL, batches, segment_files, walk_segment

FORMAT = "rocketmq_commitlog"


def _flag(options: dict, name: str) -> bool:
    value = str(options.get(name, "false")).strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"option {name} is true or false, not {value!r}")
    return value == "true"


class SegmentPartition(InputPartition):
    def __init__(self, path: str):
        super().__init__(path)
        self.path = path


class CommitLogReader(DataSourceReader):
    def __init__(self, options: dict):
        path = options.get("path")
        if not path:
            raise ValueError("give the store directory: spark.read.format('rocketmq_commitlog').load(DIR)")
        self.store_dir = Path(path)
        self.with_body = _flag(options, "body")
        self.skip_corrupt = _flag(options, "skip_corrupt")

    def partitions(self) -> list[InputPartition]:
        return [SegmentPartition(str(p)) for p in segment_files(self.store_dir)]

    def read(self, partition: SegmentPartition) -> Iterator[pa.RecordBatch]:
        yield from batches(walk_segment(Path(partition.path), self.skip_corrupt), self.with_body)


class CommitLogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema) -> DataSourceReader:
        return CommitLogReader(dict(self.options))
