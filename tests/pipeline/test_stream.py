"""The commit log as a stream: records written while a query runs reach it within two trigger
intervals, across segment rolls; a query restarted from its checkpoint neither loses nor repeats
a record; a batch never ends inside a record being written; retention deleting what the stream
has not read yet is reported and stepped over; `dlq-report --follow` keeps its Parquet current
and stops cleanly on SIGTERM."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.cli import main as cli_main
from pipeline.follow import CHECKPOINT_MARKER, Follow
from pipeline.options import SourceOptions
from pipeline.records import SCHEMA_DDL
from pipeline.segments import WalkReport, segment_files, walk
from pipeline.stream_source import CommitLogStreamReader, StreamOffset, gap_in_batch, readable_end
from store.clock import FakeClock
from store.format.layouts import BLANK, MAGIC_BLANK
from store.log.retention import HOUR_MS
from store.message_store import MessageStore, NewMessage, StoreConfig
from tests.pipeline.stores import GEOMETRY, every_record
from tests.pipeline.test_source import expected_row

TRIGGER_SECONDS = 2
SEGMENT = GEOMETRY.commitlog_file_size
REPO = Path(__file__).resolve().parents[2]


def open_store(root: Path) -> MessageStore:
    clock = FakeClock(time.time_ns() // 1_000_000)  # retention compares file times with the store's clock
    return MessageStore.open(root, StoreConfig(geometry=GEOMETRY, flush="sync", trace=False), clock=clock)


def put(store: MessageStore, count: int, body_size: int = 600, topic: str = "Orders") -> list[int]:
    results = store.put_many([NewMessage(topic, bytes([65 + n % 26]) * body_size, keys=[f"k-{n}"])
                              for n in range(count)])
    return [r.phys_offset for r in results]


def wait_for(condition: Callable[[], bool], seconds: float, what: str) -> float:
    """Poll `condition` until it holds; the seconds it took. Fails after `seconds`."""
    began = time.monotonic()
    while not condition():
        if time.monotonic() - began > seconds:
            pytest.fail(f"{what}: not within {seconds} s")
        time.sleep(0.05)
    return time.monotonic() - began


class Collected:
    """What a foreachBatch sink saw: each batch's phys offsets (batches may arrive on Spark's thread)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.batches: list[tuple[int, list[int]]] = []
        self.hold = threading.Event()  # set: the next batch with rows waits for `release` once collected
        self.held = threading.Event()
        self.release = threading.Event()

    def __call__(self, batch, batch_id: int) -> None:
        offsets = [row.phys_offset for row in batch.select("phys_offset").collect()]
        with self.lock:
            self.batches.append((batch_id, offsets))
        if offsets and self.hold.is_set():
            self.hold.clear()
            self.held.set()
            assert self.release.wait(120), "the test never released the batch"

    def offsets(self) -> list[int]:
        with self.lock:
            return [phys for _, found in self.batches for phys in found]


def start(spark, store_dir: Path, sink: Collected, checkpoint: Path, **options):
    return (spark.readStream.format("rocketmq_commitlog").options(**options).load(str(store_dir)).writeStream
            .foreachBatch(sink).option("checkpointLocation", str(checkpoint))
            .trigger(processingTime=f"{TRIGGER_SECONDS} seconds").start())


@pytest.fixture
def store(tmp_path):
    with open_store(tmp_path / "store") as opened:
        yield opened


# -- planning, without Spark ---------------------------------------------------------------------

def test_an_offset_is_the_next_records_physical_offset_and_refuses_anything_else():
    assert StreamOffset.of({"phys": 5}) == StreamOffset(5, 0)
    assert StreamOffset.of(StreamOffset(7, 3).as_dict()) == StreamOffset(7, 3)
    for bad in ({}, {"phys": "x"}, {"phys": None}, None, ["phys", 1], {"phys": -1},
                {"phys": 5, "retention_lost_bytes": -2}, {"phys": 1.5e400}):
        with pytest.raises(ValueError, match="not a commit log stream offset"):
            StreamOffset.of(bad)
    with pytest.raises(ValueError, match="starting_offset"):
        CommitLogStreamReader({"path": "somewhere", "starting_offset": "yesterday"})


def test_a_batch_ends_at_the_last_complete_record_and_a_record_being_written_waits(store, tmp_path):
    offsets = put(store, 5)
    reader = CommitLogStreamReader({"path": str(tmp_path / "store")})
    first = reader.initialOffset()
    assert first == {"phys": 0, "retention_lost_bytes": 0}
    end = reader.latestOffset(first)
    last = store.read(offsets[-1])
    assert end["phys"] == last.phys_offset + last.size == store.commitlog.end
    assert reader.latestOffset(end) is end  # nothing new: the same offset, no batch

    segment = segment_files(tmp_path / "store")[0]
    half, rest = last.phys_offset + last.size // 2, last.size - last.size // 2
    with open(segment.path, "r+b") as file:  # the last record half written (in place: the store maps the file)
        file.seek(half)
        written = file.read(rest)
        file.seek(half)
        file.write(bytes(rest))
        file.flush()
        assert reader.latestOffset(first)["phys"] == last.phys_offset
        file.seek(half)
        file.write(written)
    assert reader.latestOffset(first)["phys"] == store.commitlog.end
    assert CommitLogStreamReader({"path": str(tmp_path / "store"), "starting_offset": "latest"}).initialOffset() \
        == {"phys": store.commitlog.end, "retention_lost_bytes": 0}


def test_a_byte_limit_ends_each_batch_at_the_end_of_the_record_crossing_it(store, tmp_path):
    """Batches end on record boundaries: the record holding the limit's last byte is the batch's
    whole, one exactly at the limit is the next batch's, and a limit below a record's size still
    takes one record (not a run of empty batches through its bytes). A filler ends a segment."""
    offsets = put(store, 300, body_size=700)
    ends = [store.read(o).phys_offset + store.read(o).size for o in offsets]
    assert len({o // SEGMENT for o in offsets}) >= 2  # the records roll over segments
    for limit in ("1", "100", str(ends[0]), str(ends[0] + 1), "5000", str(SEGMENT - 10)):
        reader = CommitLogStreamReader({"path": str(tmp_path / "store"), "max_bytes_per_trigger": limit})
        offset, seen = reader.initialOffset(), []
        while (following := reader.latestOffset(offset, reader.getDefaultReadLimit())) is not offset:
            begin, stop = offset["phys"], following["phys"]
            batch = [o for o in offsets if begin <= o < stop]
            assert batch, (limit, begin, stop)  # never an empty batch
            assert stop in {*offsets, *ends, *(o // SEGMENT * SEGMENT for o in offsets)}  # a boundary
            crossing = [o for o, e in zip(offsets, ends, strict=True) if o < begin + int(limit) < e]
            if crossing and crossing[0] >= begin:
                assert stop == ends[offsets.index(crossing[0])] or stop == crossing[0] // SEGMENT * SEGMENT + SEGMENT
            seen += batch
            offset = following
        assert seen == offsets, limit


def test_a_batchs_partitions_are_the_same_whenever_they_are_planned(store, tmp_path):
    """A batch planned before a stop is planned again from its checkpointed offsets on restart:
    the same splits, whatever was written since."""
    put(store, 150)
    reader = CommitLogStreamReader({"path": str(tmp_path / "store"), "split_bytes": "20000"})
    start = {"phys": store.read(0).size, "retention_lost_bytes": 0}  # the second record
    end = reader.latestOffset(start)
    planned = [(p.segment.base, p.start, p.end) for p in reader.partitions(start, end)]
    assert len({base for base, _, _ in planned}) >= 2 and len(planned) > 3  # over segments, split within them
    assert planned[0] == (0, start["phys"], start["phys"] + 20000)
    put(store, 150)
    again = CommitLogStreamReader({"path": str(tmp_path / "store"), "split_bytes": "20000"})
    assert [(p.segment.base, p.start, p.end) for p in again.partitions(start, end)] == planned
    rows = [row for p in again.partitions(start, end) for batch in again.read(p) for row in batch.to_pylist()]
    expected = [m for m in every_record(store) if start["phys"] <= m.phys_offset < end["phys"]]
    assert [r["phys_offset"] for r in rows] == [m.phys_offset for m in expected]


@pytest.fixture(scope="module")
def rolled_store(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("rolled") / "store"
    with open_store(root) as opened:
        put(opened, 260, body_size=500)
        put(opened, 40, body_size=50)
    return root


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.floats(0, 1), garbage=st.binary(max_size=300))
def test_the_planner_ends_where_the_python_walk_finds_a_torn_tail(rolled_store, tmp_path, cut, garbage):
    """The compiled planning walk against the reference: the data source's own Python walk of the
    newest segment, with the bytes after a cut point zeroed or garbled (a write under way)."""
    root = tmp_path / f"copy-{time.monotonic_ns()}"
    shutil.copytree(rolled_store, root)
    segments = segment_files(root)
    newest = segments[-1]
    data = newest.path.read_bytes()
    used = len(data.rstrip(b"\0"))
    at = int(cut * used)
    torn = data[:at] + (garbage + bytes(used))[:used - at] + data[used:]
    newest.path.write_bytes(torn)

    report = WalkReport()
    records = list(walk(newest, is_tail=True, report=report))
    expected = report.torn_tail_at
    if expected is None:  # the walk ended at zeros or at a filler, which ends the segment
        expected = records[-1].phys_offset + records[-1].size if records else newest.base
        pos = expected - newest.base
        if pos + BLANK.size <= len(torn) and BLANK.unpack_from(torn, pos)[1] == MAGIC_BLANK:
            expected = newest.base + newest.size
    assert readable_end(segments, 0) == expected
    assert readable_end(segments, newest.base) == expected
    shutil.rmtree(root)


def test_a_split_whose_segment_retention_deleted_reads_nothing_and_says_so(store, tmp_path, caplog):
    put(store, 150)
    reader = CommitLogStreamReader({"path": str(tmp_path / "store")})
    first = reader.initialOffset()
    splits = reader.partitions(first, reader.latestOffset(first))
    age_all_but_newest(store)
    assert store.delete_expired().deleted
    assert list(reader.read(splits[0])) == []
    assert "retention deleted 00000000000000000000 before the stream read offsets 0 to" in caplog.text


def test_a_gap_is_read_from_the_progress_of_the_batch_that_stepped_over_it():
    assert gap_in_batch(None, '{"phys": 9, "retention_lost_bytes": 0}') is None
    assert gap_in_batch("null", {"phys": 9, "retention_lost_bytes": 4}) is None
    assert gap_in_batch({"phys": 9, "retention_lost_bytes": 0}, '{"phys": 20, "retention_lost_bytes": 0}') is None
    gap = gap_in_batch('{"phys": 100, "retention_lost_bytes": 5}', '{"phys": 900, "retention_lost_bytes": 55}')
    assert (gap.start, gap.end) == (100, 150)
    assert "offsets 100 to 150 (50 bytes)" in str(gap)


def age_all_but_newest(store: MessageStore) -> None:
    """Make every segment but the live one older than the reserved time."""
    seconds = (store.clock.now_ms() - 100 * HOUR_MS) / 1000
    for _, path in store.commitlog.segments()[:-1]:
        os.utime(path, (seconds, seconds))


# -- streaming queries ---------------------------------------------------------------------------

def test_records_written_while_the_stream_runs_reach_it_within_two_trigger_intervals(spark, store, tmp_path):
    put(store, 10)
    sink = Collected()
    query = start(spark, tmp_path / "store", sink, tmp_path / "checkpoint")
    try:
        query.processAllAvailable()
        assert len(sink.offsets()) == 10
        for _ in range(2):
            written = put(store, 30)
            took = wait_for(lambda written=written: set(written) <= set(sink.offsets()), 2 * TRIGGER_SECONDS,
                            "records written while the stream runs")
            assert took <= 2 * TRIGGER_SECONDS
        assert sorted(sink.offsets()) == [m.phys_offset for m in every_record(store)]
    finally:
        query.stop()
    assert query.exception() is None


def test_the_stream_has_the_batch_sources_rows_and_reads_appends_that_roll_into_new_segments(spark, store, tmp_path):
    put(store, 20)
    frames: list = []
    query = (spark.readStream.format("rocketmq_commitlog").load(str(tmp_path / "store")).writeStream
             .foreachBatch(lambda batch, _id: frames.append([tuple(r) for r in batch.collect()]))
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(processingTime=f"{TRIGGER_SECONDS} seconds").start())
    try:
        query.processAllAvailable()
        assert len(segment_files(tmp_path / "store")) == 1
        put(store, 250, body_size=700)  # nearly three 64 KiB segments more
        query.processAllAvailable()
    finally:
        query.stop()
    assert len(segment_files(tmp_path / "store")) >= 3
    rows = sorted(row for frame in frames for row in frame)
    expected = spark.createDataFrame([expected_row(m) for m in every_record(store)], SCHEMA_DDL).collect()
    assert rows == sorted(tuple(r) for r in expected)
    assert len(frames) >= 2 and query.exception() is None


def test_a_stream_restarted_from_its_checkpoint_neither_loses_nor_repeats_records(spark, store, tmp_path):
    checkpoint = tmp_path / "checkpoint"
    sink = Collected()
    put(store, 40)
    for rounds in range(3):
        query = start(spark, tmp_path / "store", sink, checkpoint)
        try:
            query.processAllAvailable()
            put(store, 60, body_size=900)  # written while it runs; some of it may be read before the stop
            if rounds == 1:
                query.processAllAvailable()
        finally:
            query.stop()
    query = start(spark, tmp_path / "store", sink, checkpoint)
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    seen = sink.offsets()
    assert len(seen) == len(set(seen))
    assert sorted(seen) == [m.phys_offset for m in every_record(store)]
    assert len(segment_files(tmp_path / "store")) >= 3


def test_retention_deleting_segments_under_a_running_stream_is_reported_not_a_crash(spark, store, tmp_path):
    early = put(store, 20)
    sink = Collected()
    query = start(spark, tmp_path / "store", sink, tmp_path / "checkpoint")
    try:
        query.processAllAvailable()
        sink.hold.set()
        early += put(store, 5)
        wait_for(sink.held.is_set, 60, "the next batch")  # read up to here, and held
        read_to = early[-1] + store.read(early[-1]).size
        later = put(store, 350, body_size=700)  # rolls on over four segments more
        age_all_but_newest(store)
        deleted = store.delete_expired()
        assert len(deleted.deleted) >= 4 and read_to < deleted.min_phys_offset
        kept = [phys for phys in later if phys >= deleted.min_phys_offset]
        sink.release.set()
        wait_for(lambda: set(kept) <= set(sink.offsets()), 60, "the records retention left")
        assert query.isActive

        def gaps() -> list[tuple[int, int]]:
            found = [gap_in_batch(s.startOffset, s.endOffset) for p in query.recentProgress for s in p.sources]
            return [(gap.start, gap.end) for gap in found if gap]

        wait_for(gaps, 30, "the batch's progress")
        assert gaps() == [(read_to, deleted.min_phys_offset)]
        assert json.loads(query.lastProgress.sources[0].endOffset)["retention_lost_bytes"] == \
            deleted.min_phys_offset - read_to
    finally:
        sink.release.set()
        query.stop()
    assert query.exception() is None
    assert sorted(sink.offsets()) == early + kept


# -- dlq-report --follow -------------------------------------------------------------------------

def dead_letters_in(out: Path) -> int | None:
    try:
        return sum(pq.read_table(out / "summary").column("dead_letters").to_pylist())
    except (OSError, ValueError):  # not written yet, or being replaced
        return None


def kill_dead_letters(store: MessageStore, count: int) -> None:
    for phys in put(store, count, body_size=100, topic="Payments"):
        store.send_back(phys, "g-pay", delay_level=-1, reason="unparseable")


def test_follow_keeps_the_dlq_report_current_and_stops_on_sigterm(store, tmp_path):
    kill_dead_letters(store, 2)
    out, log = tmp_path / "report", tmp_path / "follow.log"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with open(log, "wb") as written:
        process = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "pipeline", "run", "dlq-report", "--store", str(tmp_path / "store"),
             "--out", str(out), "--follow", "--trigger-seconds", "1", "--master", "local[1]"],
            stdout=written, stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
    try:
        wait_for(lambda: dead_letters_in(out) == 2 or process.poll() is not None, 240, "the first report")
        assert process.poll() is None, log.read_text()
        kill_dead_letters(store, 3)
        wait_for(lambda: "dlq-report: 5 dead letters" in log.read_text() or process.poll() is not None, 120,
                 "the dead letters written since")
        assert dead_letters_in(out) == 5
        assert process.poll() is None, log.read_text()
        process.send_signal(signal.SIGTERM)
        assert process.wait(120) == 0, log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    text = log.read_text()
    assert "dlq-report: 5 dead letters, 1 groups" in text and "dlq-report --follow stopped" in text
    assert json.loads((tmp_path / ".report.checkpoint" / CHECKPOINT_MARKER).read_text())["job"] == "dlq-report"
    assert json.loads((out / ".mqlens-job").read_text())["job"] == "dlq-report"


def test_follow_restarted_from_its_checkpoint_writes_a_missing_report_at_once(spark, store, tmp_path):
    kill_dead_letters(store, 2)
    source = SourceOptions(tmp_path / "store", GEOMETRY)
    out, checkpoint = tmp_path / "report", tmp_path / "checkpoint"
    lines: list[str] = []

    def follow_until(line: str) -> None:
        stopping = threading.Event()
        follow = Follow("dlq-report", source, out, checkpoint, 1, say=lines.append, warn=lines.append)
        runner = threading.Thread(
            target=lambda: lines.append(f"ended: {follow.run(lambda: nullcontext(spark), stopping)}"))
        runner.start()
        try:
            wait_for(lambda: any(line in seen for seen in lines) or not runner.is_alive(), 180, line)
        finally:
            stopping.set()
            runner.join(120)
        assert lines[-1] == "ended: None", lines

    follow_until("dlq-report: 2 dead letters")
    shutil.rmtree(out)
    lines.clear()
    follow_until("dlq-report: 2 dead letters")  # nothing new in the log: written at start
    assert dead_letters_in(out) == 2
    assert spark.range(3).count() == 3  # the test's session was used, and left running


def test_follow_refuses_other_jobs_and_checkpoints_it_cannot_use(store, tmp_path, capsys):
    put(store, 3)
    base = ["pipeline", "run", "dlq-report", "--store", str(tmp_path / "store"), "--out", str(tmp_path / "out")]
    assert cli_main(["pipeline", "run", "projections", *base[3:], "--follow"]) == 2
    assert "--follow is for dlq-report, not projections" in capsys.readouterr().err
    assert cli_main([*base, "--follow", "--checkpoint", str(tmp_path / "out" / "ck")]) == 2
    assert "outside the output folder" in capsys.readouterr().err
    assert cli_main([*base, "--follow", "--checkpoint", str(tmp_path / "store" / "ck")]) == 2
    assert "outside the store" in capsys.readouterr().err
    assert cli_main([*base, "--follow", "--trigger-seconds", "0"]) == 2
    other = tmp_path / "other-ck"
    other.mkdir()
    (other / CHECKPOINT_MARKER).write_text(json.dumps({"job": "dlq-report", "store": "/elsewhere"}))
    assert cli_main([*base, "--follow", "--checkpoint", str(other)]) == 2
    assert "is not the checkpoint of dlq-report --follow over" in capsys.readouterr().err
    (tmp_path / "a-file").write_text("x")
    assert cli_main([*base, "--follow", "--checkpoint", str(tmp_path / "a-file")]) == 2
    assert "is a file" in capsys.readouterr().err


def run_available_now(spark, store_dir: Path, sink: Collected, checkpoint: Path, **options) -> None:
    query = (spark.readStream.format("rocketmq_commitlog").options(**options).load(str(store_dir)).writeStream
             .foreachBatch(sink).option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    assert query.awaitTermination(180), "an AvailableNow query did not stop by itself"


def test_available_now_reads_what_is_there_in_batches_of_at_most_the_bytes_asked_and_stops(spark, store, tmp_path):
    first = put(store, 60, body_size=700)
    sink = Collected()
    run_available_now(spark, tmp_path / "store", sink, tmp_path / "checkpoint", max_bytes_per_trigger="8000")
    assert sink.offsets() == first
    with_rows = [offsets for _, offsets in sink.batches if offsets]
    assert len(with_rows) == len(sink.batches) >= 5  # 60 records of about 800 bytes, 8000 bytes a batch
    for offsets in with_rows:
        assert offsets[-1] - offsets[0] < 8000  # each batch's records start within its bytes
    later = put(store, 25, body_size=700)
    run_available_now(spark, tmp_path / "store", sink, tmp_path / "checkpoint", max_bytes_per_trigger="8000")
    assert sink.offsets() == first + later  # from the checkpoint on: nothing lost, nothing repeated


def test_a_byte_limit_smaller_than_a_record_still_reads_a_record_a_batch(spark, store, tmp_path):
    written = put(store, 3, body_size=3000)
    sink = Collected()
    run_available_now(spark, tmp_path / "store", sink, tmp_path / "checkpoint", max_bytes_per_trigger="100")
    assert sink.offsets() == written
    assert [len(offsets) for _, offsets in sink.batches] == [1, 1, 1]  # and no empty batch between them


def test_a_byte_limit_that_is_not_a_number_is_refused_in_words(spark, store, tmp_path):
    put(store, 3)
    with pytest.raises(Exception, match="max_bytes_per_trigger is a positive number of bytes, not 'lots'"):
        run_available_now(spark, tmp_path / "store", Collected(), tmp_path / "checkpoint",
                          max_bytes_per_trigger="lots")
