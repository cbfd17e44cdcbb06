"""`mqlens pipeline run dlq-report --follow`: a job's output kept current while the store grows.

A streaming query over the commit log (pipeline.stream_source) with a checkpoint: each
micro-batch (every `trigger_seconds` when anything was written, or retention deleted records
the stream had not read) runs the whole job again over the store and replaces its output
atomically (pipeline.staged_output), so readers see the previous report or the new one. The
micro-batch's rows themselves are never read: the stream's offsets only say when the log moved.
SIGINT and SIGTERM stop the query between or during runs (a run cut short leaves the previous
output in place); a restart goes on from the checkpoint."""

from __future__ import annotations

import json
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from pipeline.options import FORMAT, SourceOptions
from pipeline.output_folder import job_of
from pipeline.run import error_in_words, run_job
from pipeline.status import ProgressBar
from pipeline.stream_source import gap_in_batch

POLL_SECONDS = 0.5
CHECKPOINT_MARKER = "mqlens-follow.json"


def default_checkpoint(out: Path) -> Path:
    """Beside the output, hidden: the output folder itself is replaced whole on every run."""
    out = Path(out)
    return out.parent / f".{out.name}.checkpoint"


def check_checkpoint(checkpoint: Path, job: str, source: SourceOptions, out: Path) -> None:
    """Raise ValueError, in words, for a checkpoint the query must not use: inside the output
    (replaced on every run) or the store, a file, or one written for another store or job (its
    offsets would point into a different log)."""
    checkpoint, out = Path(checkpoint).resolve(), Path(out).resolve()
    if checkpoint == out or out in checkpoint.parents:
        raise ValueError("the checkpoint must be outside the output folder, which each run replaces")
    source.check_output(checkpoint)
    if checkpoint.exists() and not checkpoint.is_dir():
        raise ValueError(f"{checkpoint} is a file, not a checkpoint folder")
    marker = checkpoint / CHECKPOINT_MARKER
    if checkpoint.is_dir() and any(checkpoint.iterdir()):
        try:
            found = json.loads(marker.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            found = None
        wanted = _marker(job, source)
        if found != wanted:
            raise ValueError(f"{checkpoint} is not the checkpoint of {job} --follow over {wanted['store']}: give "
                             f"another --checkpoint folder, or remove this one to start over")


def _marker(job: str, source: SourceOptions) -> dict:
    return {"job": job, "store": str(Path(source.store_dir).resolve())}


@contextmanager
def stop_on_signals(stopping: threading.Event) -> Iterator[None]:
    """SIGINT and SIGTERM set `stopping` instead of ending the process (main thread only)."""
    previous = {sig: signal.signal(sig, lambda *_: stopping.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@dataclass
class Follow:
    job: str
    source: SourceOptions
    out: Path
    checkpoint: Path
    trigger_seconds: int
    status_path: Path | None = None
    bar: ProgressBar | None = None
    say: Callable[[str], None] = lambda line: print(line, flush=True)
    warn: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)

    def run(self, spark_factory: Callable, stopping: threading.Event) -> str | None:
        """Follow the store in the session `spark_factory()` gives (a context manager, as for
        pipeline.run.run_job) until `stopping` is set; None when stopped so, else the error that
        ended the query."""
        with spark_factory() as spark:
            if stopping.is_set():
                return None
            restarted = self.checkpoint.is_dir() and any(self.checkpoint.iterdir())
            self.checkpoint.mkdir(parents=True, exist_ok=True)
            (self.checkpoint / CHECKPOINT_MARKER).write_text(json.dumps(_marker(self.job, self.source)) + "\n",
                                                            encoding="utf-8")
            if restarted and job_of(self.out) != self.job:  # the checkpoint is past what the output lost
                self._refresh(spark, stopping)
            query = (spark.readStream.format(FORMAT).options(**self.source.reader_options())
                     .load(str(self.source.store_dir)).writeStream
                     .foreachBatch(lambda _batch, _batch_id: self._refresh(spark, stopping))
                     .option("checkpointLocation", str(self.checkpoint))
                     .trigger(processingTime=f"{self.trigger_seconds} seconds")
                     .queryName(f"mqlens-{self.job}-follow").start())
            reported = -1
            try:
                while not stopping.wait(POLL_SECONDS) and query.isActive:
                    reported = self._report_gaps(query, reported)
            finally:
                if query.isActive:
                    spark.sparkContext.cancelAllJobs()  # a run under way ends now, its output unwritten
                    query.stop()
            self._report_gaps(query, reported)
            failure = query.exception()
            return None if failure is None else error_in_words(failure)

    def _refresh(self, spark, stopping: threading.Event) -> None:
        final = run_job(self.job, self.source, self.out, lambda: nullcontext(spark), status_path=self.status_path,
                        bar=self.bar)
        if final.state == "succeeded":
            self.say(final.summary)
        elif not stopping.is_set():  # a failure while stopping is the cancelled run
            raise RuntimeError(f"{self.job} failed: {final.error}")

    def _report_gaps(self, query, reported: int) -> int:
        for progress in query.recentProgress:
            if progress.batchId > reported:
                reported = progress.batchId
                for source in progress.sources:
                    gap = gap_in_batch(source.startOffset, source.endOffset)
                    if gap is not None:
                        self.warn(str(gap))
        return reported
