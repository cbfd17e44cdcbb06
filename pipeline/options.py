"""What a job is pointed at: the store directory and how to read it (geometry, delay table,
bodies, corrupt ranges). Built once by the command line or a test and handed to every job."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from pipeline.delay_table import ChosenDelayTable, choose_delay_table
from pipeline.records import schema_of
from store.log.geometry import StoreGeometry

FORMAT = "rocketmq_commitlog"


@dataclass(frozen=True)
class SourceOptions:
    store_dir: Path
    geometry: StoreGeometry = field(default_factory=StoreGeometry)
    delay_levels: str | None = None  # None: the store's own table, else inferred (pipeline.delay_table)
    with_body: bool = False
    skip_corrupt: bool = False
    split_bytes: int | None = None  # None: the data source's default
    progress_dir: Path | None = None  # where scan tasks report their progress (pipeline.progress)
    body_topics: tuple[str, ...] = ()  # bodies of these topics' records only (when not with_body)

    def reader_options(self) -> dict[str, str]:
        options = {"body": str(self.with_body).lower(), "skip_corrupt": str(self.skip_corrupt).lower(),
                   "body_topics": ",".join(self.body_topics)}
        if self.split_bytes is not None:
            options["split_bytes"] = str(self.split_bytes)
        if self.progress_dir is not None:
            options["progress_dir"] = str(self.progress_dir)
        return options

    def check_output(self, out: Path) -> None:
        """Refuse an output folder that is the store or inside it: the store is only read."""
        store, target = Path(self.store_dir).resolve(), Path(out).resolve()
        if target == store or store in target.parents:
            raise ValueError("the output must be outside the store, which is read-only")

    def read(self, spark: SparkSession, columns: tuple[str, ...] | None = None) -> DataFrame:
        """The commit log as a DataFrame: the data source's whole rows, or only `columns` (Spark
        then carries no others)."""
        reading = spark.read.format(FORMAT).options(**self.reader_options())
        if columns is not None:
            reading = reading.schema(schema_of(columns))
        return reading.load(str(self.store_dir))

    def delay_table(self) -> ChosenDelayTable:
        """The delay levels the store's dispatch would use, and where they came from."""
        return choose_delay_table(self.store_dir, self.geometry.cq_file_size, self.delay_levels)
