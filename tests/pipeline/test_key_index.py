"""The key index export answers every key query of the golden manifests as RocketMQ did, and on
a generated store whose index files are gone it answers what the store's key lookups return
with its index; its rows are sorted by (topic, key) across the part files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql import DataFrame
from pyspark.testing import assertDataFrameEqual

from pipeline.jobs import key_index
from pipeline.options import SourceOptions
from store.message_store import MAX_QUERY_RESULTS, MessageStore, StoreConfig
from tests.conftest import BROKER_GEOMETRY, GOLDEN_GEOMETRY
from tests.pipeline.stores import GEOMETRY, build_retry_store


def run_job(spark, store: Path, geometry, out: Path) -> DataFrame:
    counts = key_index.main(spark, SourceOptions(store, geometry), out)
    table = pq.read_table(out)  # the part files in name order, as a reader meets them
    assert [f.name for f in table.schema] == ["topic", "key", "kind", "offset_msg_id", "unique_key", "phys_offset",
                                              "store_timestamp"]
    order = list(zip(table.column("topic").to_pylist(), table.column("key").to_pylist(), strict=True))
    assert order == sorted(order)
    assert counts == {"keys": len(set(order)), "entries": len(order)}
    return spark.read.parquet(str(out))


def by_key(export: DataFrame) -> dict[tuple[str, str, str], list]:
    """The export's rows by (topic, key, kind)."""
    found: dict[tuple[str, str, str], list] = {}
    for row in export.collect():
        found.setdefault((row.topic, row.key, row.kind), []).append(row)
    return found


def answers(export: dict, topic: str, key: str, kind: str, begin: int = 0, end: int = 2**63 - 1) -> list[int]:
    """The commit log offsets the export gives for a key, ascending."""
    return sorted(r.phys_offset for r in export.get((topic, key, kind), []) if begin <= r.store_timestamp <= end)


def test_the_golden_store_key_queries(spark, golden_store_dir, golden_manifest, tmp_path):
    export = by_key(run_job(spark, golden_store_dir, GOLDEN_GEOMETRY, tmp_path / "keys"))
    assert len(golden_manifest["keyQueries"]) == 16
    for query in golden_manifest["keyQueries"]:
        window = {"begin": query["begin"], "end": query["end"]} if "begin" in query else {}
        assert answers(export, query["topic"], query["key"], "key", **window) == sorted(
            query["queryMsgByKey_newest_first"]), query
        if not window:
            assert answers(export, query["topic"], query["key"], "unique_key") == sorted(
                query["queryMsgByUniqueKey"]), query


def test_the_broker_store_key_queries(spark, golden_broker_dir, golden_broker_manifest, tmp_path):
    export = by_key(run_job(spark, golden_broker_dir, BROKER_GEOMETRY, tmp_path / "keys"))
    queues = {r.phys_offset: (r.queue_id, r.queue_offset) for r in SourceOptions(golden_broker_dir, BROKER_GEOMETRY)
              .read(spark).select("phys_offset", "queue_id", "queue_offset").collect()}
    queries = golden_broker_manifest["queries"]
    for query in queries["keyQueries"]:  # mqadmin queryMsgByKey: message id, queue id, queue offset of each
        rows = export.get((query["topic"], query["key"], "key"), [])
        got = sorted((r.unique_key or r.offset_msg_id, *queues[r.phys_offset]) for r in rows)
        assert got == sorted((r["msgId"], r["queueId"], r["queueOffset"]) for r in query["rows"]), query["command"]
        assert (query["error"] is not None) == (not rows)
    for query in queries["uniqueKeyQueries"]:  # mqadmin answers the copy of lowest offset in the topic
        [message] = query["messages"]
        found = answers(export, query["topic"], query["id"], "unique_key")
        assert found[0] == message["CommitLog Offset"], query["command"]
    fail_9 = next(q for q in queries["uniqueKeyQueries"] if q["id"].endswith("3C0012"))
    assert len(answers(export, fail_9["topic"], fail_9["id"], "unique_key")) == 2  # its first and second retry


@pytest.fixture(scope="module")
def retry_store(tmp_path_factory) -> Path:
    return build_retry_store(tmp_path_factory.mktemp("keys") / "store")


def test_a_store_without_index_files_answers_what_the_index_did(spark, retry_store, tmp_path):
    bare = tmp_path / "bare"
    shutil.copytree(retry_store, bare)
    shutil.rmtree(bare / "index")
    export = run_job(spark, bare, GEOMETRY, tmp_path / "keys")
    expected = set()
    with MessageStore.open(retry_store, StoreConfig(geometry=GEOMETRY), read_only=True) as store:
        asked = {(r.topic, r.key) for r in export.select("topic", "key").distinct().collect()}
        asked |= {(topic, "no-such-key") for topic in store.topics()}
        for topic, key in asked:
            for kind, query in (("key", store.query_by_key), ("unique_key", store.query_by_unique_key)):
                for msg in query(topic, key, max_results=MAX_QUERY_RESULTS).messages:
                    expected.add((topic, key, kind, msg.offset_msg_id, msg.unique_key, msg.phys_offset,
                                  msg.store_timestamp))
    assert len({row[0] for row in expected}) >= 8  # every topic, trace and system topics included
    assertDataFrameEqual(export, spark.createDataFrame(sorted(expected), key_index.KEY_INDEX_DDL))
