"""The commit log data source: every record of the golden RocketMQ store and of a generated
mqlens store, as the store's own Python API reads it; bodies on request; corrupt records."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pyspark.errors import PythonException
from pyspark.testing import assertDataFrameEqual

from pipeline.jobs import trace
from pipeline.options import SourceOptions
from pipeline.records import SCHEMA_DDL
from store.clock import FakeClock
from store.format import topics
from store.format.codec import StoredMessage
from store.log.geometry import StoreGeometry
from store.message_store import MessageStore, NewMessage, StoreConfig
from tests.conftest import GOLDEN_GEOMETRY
from tests.pipeline.stores import every_record

SMALL = StoreGeometry(commitlog_file_size=64 * 1024, cq_file_size=20 * 256, index_slots=64, index_entries=1024)


def expected_row(msg: StoredMessage, with_body: bool = False) -> tuple:
    """The row for a message, from the store's API (not the pipeline's row builder)."""
    props = msg.properties
    origin = (props.get(topics.ORIGIN_MESSAGE_ID) or props.get(topics.DLQ_ORIGIN_MESSAGE_ID) or msg.unique_key
              or msg.offset_msg_id)
    return (msg.phys_offset, msg.size, msg.offset_msg_id, msg.unique_key, msg.topic, msg.queue_id, msg.queue_offset,
            msg.flag, msg.sys_flag, msg.born_timestamp, str(msg.born_host), msg.store_timestamp, str(msg.store_host),
            msg.reconsume_times, msg.tags, msg.keys, dict(props), msg.body if with_body else None,
            topics.message_copy_kind(msg.topic, props), origin)


def store_messages(store_dir: Path, geometry: StoreGeometry) -> list[StoredMessage]:
    """Every record, walked with the store's reader from the first offset to the end."""
    with MessageStore.open(store_dir, StoreConfig(geometry=geometry), read_only=True) as store:
        report = store.check()
        assert report.ok, report.problems
        return every_record(store)


def test_every_golden_record_as_the_store_reads_it(spark, golden_store_dir, golden_manifest):
    df = spark.read.format("rocketmq_commitlog").load(str(golden_store_dir))
    messages = store_messages(golden_store_dir, GOLDEN_GEOMETRY)
    assert len(messages) == sum(1 for r in golden_manifest["commitlogRecords"] if r["kind"] == "MESSAGE")
    expected = spark.createDataFrame([expected_row(m) for m in messages], SCHEMA_DDL)
    assertDataFrameEqual(df, expected)
    ids = {r.offset_msg_id for r in df.select("offset_msg_id").collect()}
    assert ids == {r["offsetMsgId"] for r in golden_manifest["commitlogRecords"] if r["kind"] == "MESSAGE"}


@pytest.fixture
def generated_store(tmp_path: Path) -> Path:
    """A store with originals, retries through the schedule topic, dead letters, a resend and trace records."""
    clock = FakeClock()
    config = StoreConfig(geometry=SMALL, flush="sync", schedule_interval_ms=0, trace=True)
    with MessageStore.open(tmp_path / "store", config, clock=clock) as store:
        store.metadata.update_group("g", max_reconsume_times=1)
        store.put_many([NewMessage("Orders", f"order {n}".encode(), tags="paid", keys=[f"o-{n}"],
                                   properties={"region": "eu"}) for n in range(300)])
        for _ in range(2):
            for got in store.receive("g", "Orders", 50, 60_000):
                store.nack("g", got.receipt_handle, "declined")
            clock.advance(3_600_000)
        dead = store.get_by_queue_offset(topics.dlq_topic("g"), 0, 0)
        store.resend_dead_letter(dead.phys_offset, "ops", marks={topics.RESENT_FROM: dead.offset_msg_id})
        original = store.get_by_queue_offset("Orders", 0, 10)
        store.send_back(original.phys_offset, "push-group")
        clock.advance(20_000)
        store.deliver_due()
    return tmp_path / "store"


def test_a_generated_store_with_retries_dead_letters_resends_and_trace(spark, generated_store):
    df = spark.read.format("rocketmq_commitlog").option("body", "true").load(str(generated_store))
    messages = store_messages(generated_store, SMALL)
    assert len(list(generated_store.joinpath("commitlog").iterdir())) > 1  # several segments, fillers between
    expected = spark.createDataFrame([expected_row(m, with_body=True) for m in messages], SCHEMA_DDL)
    assertDataFrameEqual(df, expected)
    kinds = {r.copy_kind for r in df.select("copy_kind").distinct().collect()}
    assert kinds == {"original", "dead_letter", "resent", "trace", "scheduled", "retry"}
    trace_bodies = spark.read.format("rocketmq_commitlog").option("body_topics", topics.TRACE_TOPIC).load(
        str(generated_store))
    assertDataFrameEqual(trace_bodies, spark.createDataFrame(
        [expected_row(m, with_body=m.topic == topics.TRACE_TOPIC) for m in messages], SCHEMA_DDL))


def test_the_trace_job_writes_partitioned_parquet(spark, generated_store, tmp_path):
    out = tmp_path / "trace"
    written = trace.main(spark, SourceOptions(generated_store, SMALL), out)["records"]
    back = spark.read.parquet(str(out))
    assert back.count() == written == len(store_messages(generated_store, SMALL))
    assert {p.name for p in out.iterdir() if p.is_dir()} >= {"copy_kind=original", "copy_kind=dead_letter"}
    assert "offset_msg_id" in back.columns and back.filter("body is not null").count() == 0


def test_a_corrupt_record_names_its_file_and_position_or_is_skipped(spark, generated_store, tmp_path):
    damaged = tmp_path / "damaged"
    shutil.copytree(generated_store, damaged)
    first = sorted((damaged / "commitlog").iterdir())[0]
    data = bytearray(first.read_bytes())
    second = int.from_bytes(data[0:4], "big")  # the second record starts where the first ends
    data[second + 4] ^= 0xFF  # its magic code
    first.write_bytes(bytes(data))
    with pytest.raises(PythonException, match=rf"{first.name} at position {second}: unknown magic code"):
        spark.read.format("rocketmq_commitlog").load(str(damaged)).count()
    kept = spark.read.format("rocketmq_commitlog").option("skip_corrupt", "true").load(str(damaged)).count()
    assert 0 < kept < len(store_messages(generated_store, SMALL))
    with pytest.raises(Exception, match="true or false"):
        spark.read.format("rocketmq_commitlog").option("body", "maybe").load(str(damaged)).count()
    with pytest.raises(Exception, match="no commitlog directory"):
        spark.read.format("rocketmq_commitlog").load(str(tmp_path / "nothing")).count()


def test_the_command_line_runs_the_trace_job(spark, golden_store_dir, tmp_path, capsys):
    from app.cli import main

    out = tmp_path / "trace"
    assert main(["pipeline", "run", "trace", "--store", str(golden_store_dir), "--out", str(out),
                 "--master", "local[1]"]) == 0
    assert f"trace: 61 records from {golden_store_dir} written to {out} in " in capsys.readouterr().out
    assert any(out.rglob("*.parquet"))
    assert main(["pipeline", "run", "nope", "--store", str(golden_store_dir), "--out", str(out)]) == 2
    assert "unknown job" in capsys.readouterr().err
    assert main(["pipeline", "run", "trace", "--store", str(tmp_path), "--out", str(out)]) == 2
    assert "no commitlog directory" in capsys.readouterr().err
    assert spark.range(3).count() == 3  # the shared session still runs


def test_a_narrower_schema_reads_only_its_columns(spark, generated_store):
    columns = ("properties", "topic", "phys_offset", "keys")  # any order: the schema's
    narrow = SourceOptions(generated_store, SMALL).read(spark, columns)
    assert tuple(narrow.columns) == columns
    whole = SourceOptions(generated_store, SMALL).read(spark)
    assert narrow.count() > 0
    assertDataFrameEqual(narrow, whole.select(*columns))


@pytest.mark.parametrize(("schema", "words"), [
    ("phys_offset BIGINT, nope STRING", "has no column 'nope'"),
    ("phys_offset INT", "column phys_offset is bigint, not int"),
    ("topic STRING, topic STRING", "named twice"),
])
def test_a_schema_the_commit_log_cannot_give_is_refused_in_words(spark, generated_store, schema, words):
    with pytest.raises(Exception, match=words):
        spark.read.format("rocketmq_commitlog").schema(schema).load(str(generated_store)).count()
