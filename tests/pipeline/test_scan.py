"""Reading the commit log in pieces: splits inside segments that resync to verified record
boundaries (even when bodies hold whole records), filters pushed into the scan that skip
segments, a live store's torn tail, corrupt ranges skipped and reported."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from pyspark.errors import PythonException
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from pipeline.progress import read_scan_progress
from pipeline.segments import Segment, WalkReport, mapped, records_end, resync, segment_files, walk
from store.clock import FakeClock
from store.log.geometry import StoreGeometry
from store.message_store import MessageStore, NewMessage, StoreConfig

GEOMETRY = StoreGeometry(commitlog_file_size=256 * 1024, cq_file_size=20 * 512, index_slots=256, index_entries=4096)


@pytest.fixture(scope="module")
def tricky_store(tmp_path_factory) -> Path:
    """Several segments whose bodies hold copies of whole, valid records (magic, sizes, CRC),
    across three topics and an hour of store times."""
    root = tmp_path_factory.mktemp("tricky") / "store"
    clock = FakeClock()
    with MessageStore.open(root, StoreConfig(geometry=GEOMETRY, flush="sync"), clock=clock) as store:
        results = store.put_many([NewMessage("Plain", f"plain {n}".encode(), keys=[f"p-{n}"]) for n in range(200)])
        segment = segment_files(root)[0]
        raw = segment.path.read_bytes()
        copies = [raw[r.phys_offset: r.phys_offset + store.read(r.phys_offset).size] for r in results[:40]]
        for minute in range(60):
            clock.advance(60_000)
            store.put_many([NewMessage("Nested", copy * 3, keys=[f"n-{minute}"]) for copy in copies[:20]])
            store.put_many([NewMessage("Other", b"x" * (minute * 40), tags="t") for _ in range(5)])
    return root


def full_walk(store_dir: Path) -> list[int]:
    return [m.phys_offset for seg in segment_files(store_dir) for m in walk(seg)]


@pytest.mark.parametrize("split", [97, 1000, 4096, 65_536])
def test_splits_of_any_size_read_every_record_once(tricky_store, split):
    expected = full_walk(tricky_store)
    assert len(segment_files(tricky_store)) > 3
    pieces = [m.phys_offset for seg in segment_files(tricky_store)
              for start in range(0, seg.size, split) for m in walk(seg, start, start + split)]
    assert pieces == expected


def test_the_data_source_splits_large_segments(spark, tricky_store):
    whole = spark.read.format("rocketmq_commitlog").load(str(tricky_store))
    split = spark.read.format("rocketmq_commitlog").option("split_bytes", "10000").load(str(tricky_store))
    assert split.rdd.getNumPartitions() > 4 * whole.rdd.getNumPartitions()
    assertDataFrameEqual(split, whole)
    assert whole.count() == len(full_walk(tricky_store))


def test_pushed_filters_give_the_rows_spark_would_and_skip_segments(spark, tricky_store, tmp_path):
    segments = segment_files(tricky_store)
    everything = spark.read.format("rocketmq_commitlog").load(str(tricky_store)).cache()
    times = sorted(r.store_timestamp for r in everything.select("store_timestamp").distinct().collect())
    begin, end = times[len(times) // 3], times[len(times) // 2]
    progress = tmp_path / "progress"
    progress.mkdir()
    pushed = (spark.read.format("rocketmq_commitlog").option("progress_dir", str(progress))
              .option("pushdown", "true").load(str(tricky_store))
              .filter((F.col("topic") == "Nested") & (F.col("store_timestamp") >= begin)
                      & (F.col("store_timestamp") <= end) & (F.col("phys_offset") > 1000)))
    expected = everything.filter(f"topic = 'Nested' and store_timestamp between {begin} and {end}"
                                 " and phys_offset > 1000")
    assert expected.count() > 0
    assertDataFrameEqual(pushed, expected)
    read = {p.name.split("-")[0] for p in progress.glob("*.json")}
    assert 0 < len(read) < len(segments)  # segments outside the time range were never opened
    pushing = spark.read.format("rocketmq_commitlog").option("pushdown", "true")
    assert pushing.load(str(tricky_store)).filter(
        F.col("topic").isin("Other", "Plain") & (F.col("topic") == "Nope")).count() == 0
    not_nested = pushing.load(str(tricky_store)).filter(F.col("topic") != "Nested")
    assert not_nested.count() == everything.count() - everything.filter("topic = 'Nested'").count()  # a Not filter
    everything.unpersist()


def test_a_torn_tail_in_the_newest_segment_ends_the_scan(spark, tricky_store, tmp_path):
    live = tmp_path / "live"
    shutil.copytree(tricky_store, live)
    newest = segment_files(live)[-1]
    records = list(walk(newest))
    end = records[-1].phys_offset - newest.base + records[-1].size
    data = bytearray(newest.path.read_bytes())
    data[end: end + 100] = data[records[0].phys_offset - newest.base:][:100]  # a record begun, not finished
    data[end + 28: end + 36] = (newest.base + end).to_bytes(8, "big")  # it even holds its own offset
    newest.path.write_bytes(bytes(data))
    report = WalkReport()
    assert [m.phys_offset for m in walk(newest, is_tail=True, report=report)] == [m.phys_offset for m in records]
    assert report.torn_tail_at == newest.base + end and not report.skipped
    progress = tmp_path / "progress"
    progress.mkdir()
    count = spark.read.format("rocketmq_commitlog").option("progress_dir", str(progress)).load(str(live)).count()
    assert count == len(full_walk(tricky_store))
    assert read_scan_progress(progress).torn_tails == [newest.base + end]


def test_damage_inside_a_segment_fails_or_is_skipped_and_reported(spark, tricky_store, tmp_path):
    damaged = tmp_path / "damaged"
    shutil.copytree(tricky_store, damaged)
    first = segment_files(damaged)[0]
    records = list(walk(first))
    victim = records[10]
    data = bytearray(first.path.read_bytes())
    data[data.index(victim.body, victim.phys_offset)] ^= 0x55  # its body no longer matches its CRC
    first.path.write_bytes(bytes(data))
    with pytest.raises(PythonException, match=rf"{first.path.name} at position {victim.phys_offset}"):
        spark.read.format("rocketmq_commitlog").load(str(damaged)).count()
    progress = tmp_path / "progress"
    progress.mkdir()
    kept = (spark.read.format("rocketmq_commitlog").option("skip_corrupt", "true")
            .option("progress_dir", str(progress)).load(str(damaged)).count())
    assert kept == len(full_walk(tricky_store)) - 1
    skipped = read_scan_progress(progress).skipped
    assert skipped == [{"file": first.path.name, "position": victim.phys_offset, "length": victim.size,
                        "reason": skipped[0]["reason"]}]
    with pytest.raises(Exception, match="positive number of bytes"):
        spark.read.format("rocketmq_commitlog").option("split_bytes", "-1").load(str(damaged)).count()


def test_the_command_line_shows_progress_and_keeps_a_status_file(spark, tricky_store, tmp_path, capsys):
    from app.cli import main

    damaged = tmp_path / "damaged"
    shutil.copytree(tricky_store, damaged)
    first = segment_files(damaged)[0]
    data = bytearray(first.path.read_bytes())
    second = int.from_bytes(data[0:4], "big")
    data[second + 4] ^= 0xFF
    first.path.write_bytes(bytes(data))
    out, status = tmp_path / "out", tmp_path / "status.json"
    assert main(["pipeline", "run", "trace", "--store", str(damaged), "--out", str(out), "--status", str(status),
                 "--progress"]) == 1
    captured = capsys.readouterr()
    assert f"trace failed: corrupt record in {first.path} at position {second}: unknown magic code" in captured.err
    failed = json.loads(status.read_text())
    assert failed["state"] == "failed" and "unknown magic code" in failed["error"]
    assert "Traceback" not in failed["error"]
    assert not out.exists()  # the failed job left nothing behind that would block the next run
    assert main(["pipeline", "run", "trace", "--store", str(damaged), "--out", str(out), "--status", str(status),
                 "--progress", "--skip-corrupt"]) == 0
    captured = capsys.readouterr()
    assert "tasks" in captured.err and "records" in captured.err  # the bar
    assert f"skipped {first.path.name} at position {second}:" in captured.err
    summary = captured.out.strip()
    assert summary.startswith(f"trace: {len(full_walk(tricky_store)) - 1:,} records from {damaged} written to {out}")
    assert "skipped 1 corrupt ranges" in summary
    done = json.loads(status.read_text())
    assert done["state"] == "succeeded" and done["summary"] == summary and done["skipped_ranges"] == 1
    assert done["records"] == len(full_walk(tricky_store)) - 1 and done["tasks_done"] >= 1
    assert not list(tmp_path.glob(".out.progress"))
    for bad, message in ((["--out", str(damaged / "inside")], "outside the store"),
                         (["--out", str(out), "--delay-levels", "1s 2x"], "delay")):
        assert main(["pipeline", "run", "trace", "--store", str(damaged), *bad]) == 2
        assert message in capsys.readouterr().err


def test_two_filtered_branches_of_one_load_keep_their_own_rows(spark, tricky_store):
    """Spark keeps one pushdown result per loaded relation, so by default nothing is pushed and a
    union of two differently filtered branches of one load has every row of both."""
    loaded = spark.read.format("rocketmq_commitlog").load(str(tricky_store))
    nested, other = loaded.where(F.col("topic") == "Nested"), loaded.where(F.col("topic") != "Nested")
    assert nested.count() > 0 and other.count() > 0
    assert nested.unionByName(other).count() == nested.count() + other.count() == loaded.count()
    assert other.unionByName(nested).count() == loaded.count()


@pytest.mark.parametrize("window", [7, 64, 1000, 1 << 20])
def test_resync_finds_the_same_boundary_whatever_window_it_searches_by(tricky_store, window):
    for segment in segment_files(tricky_store):
        with mapped(segment) as buf:
            for start in range(1, segment.size, 3001):
                expected = resync(buf, segment.base, start, str(segment.path), window=segment.size)
                assert resync(buf, segment.base, start, str(segment.path), window=window) == expected
                assert resync(buf, segment.base, start, str(segment.path), limit=start + 500,
                              window=window) == (expected if expected is not None and expected < start + 500
                                                 else None)


def test_the_newest_segments_unwritten_rest_gets_no_task(spark, tmp_path):
    root = tmp_path / "store"
    geometry = StoreGeometry(commitlog_file_size=4 * 1024 * 1024)
    with MessageStore.open(root, StoreConfig(geometry=geometry, flush="sync")) as store:
        store.put_many([NewMessage("T", b"b" * 500) for _ in range(300)])
    newest = segment_files(root)[-1]
    records = list(walk(newest))
    written = records[-1].phys_offset + records[-1].size - newest.base
    assert records_end(newest) == written < newest.size // 10
    scan = spark.read.format("rocketmq_commitlog").option("split_bytes", "65536").load(str(root))
    assert scan.rdd.getNumPartitions() == -(-written // 65536)
    assert scan.count() == len(full_walk(root)) >= 300


def test_records_end_leaves_damage_and_full_segments_to_the_readers(tricky_store, tmp_path):
    older, newest = segment_files(tricky_store)[0], segment_files(tricky_store)[-1]
    assert records_end(older) is None  # ends with a filler: the whole file is read
    damaged = tmp_path / newest.path.name
    data = bytearray(newest.path.read_bytes())
    victim = list(walk(newest))[3]
    at = data.index(victim.body, victim.phys_offset - newest.base)
    data[at] ^= 0x55
    damaged.write_bytes(bytes(data))
    assert records_end(Segment(damaged, newest.base, len(data))) is None
    assert records_end(newest, window=1000) == records_end(newest)
