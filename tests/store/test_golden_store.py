"""Acceptance 1 and 2: mqlens reads RocketMQ 4.9.8's own store exactly, and re-encodes it."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import subprocess
import sys
import zlib

import pytest

from store.errors import ReadOnlyStoreError
from store.format import codec, ids
from store.format.javahash import index_key_hash, java_string_hash
from store.message_store import MessageStore, NewMessage, StoreConfig
from tests.conftest import GOLDEN_GEOMETRY, file_digests

pytestmark = pytest.mark.slow  # runs first (tests/conftest.py)

GEOMETRY_FLAGS = ["--commitlog-file-size", "32768", "--cq-file-size", "80", "--index-slots", "64",
                  "--index-entries", "64"]


@pytest.fixture
def golden(golden_store_dir):
    before = file_digests(golden_store_dir)
    store = MessageStore.open(golden_store_dir, StoreConfig(geometry=GOLDEN_GEOMETRY), read_only=True)
    yield store
    store.close()
    assert file_digests(golden_store_dir) == before, "a read-only open changed the golden store"


def message_records(manifest):
    return [r for r in manifest["commitlogRecords"] if r["kind"] == "MESSAGE"]


def test_golden_files_match_manifest_digests(golden_store_dir, golden_manifest):
    for entry in golden_manifest["files"]:
        data = (golden_store_dir.parent / entry["path"].replace("store/", "golden-store/", 1)).read_bytes()
        assert len(data) == entry["size"]
        assert hashlib.sha256(data).hexdigest() == entry["sha256"], entry["path"]


def test_every_record_decodes_to_the_manifest(golden, golden_manifest):
    records = message_records(golden_manifest)
    assert len(records) == 61
    for r in records:
        msg = golden.read(r["physicalOffset"])
        assert msg.size == r["totalSize"]
        assert f"0x{msg.magic & 0xFFFFFFFF:08X}" == r["magicCode"]
        assert msg.body_crc == r["bodyCRC"]
        assert (msg.queue_id, msg.flag, msg.queue_offset, msg.phys_offset, msg.sys_flag) == (
            r["queueId"], r["flag"], r["queueOffset"], r["commitLogOffsetField"], r["sysFlag"])
        assert (msg.born_timestamp, msg.store_timestamp) == (r["bornTimestamp"], r["storeTimestamp"])
        assert (str(msg.born_host), str(msg.store_host)) == (r["bornHost"], r["storeHost"])
        assert (msg.reconsume_times, msg.prepared_transaction_offset) == (
            r["reconsumeTimes"], r["preparedTransactionOffset"])
        assert msg.stored_body == base64.b64decode(r["bodyBase64"])
        assert len(msg.stored_body) == r["bodyLength"]
        assert msg.topic == r["topic"]
        assert msg.properties_text() == r["propertiesString"]
        assert len(msg.properties_text().encode()) == r["propertiesLength"]
        assert msg.properties == r["properties"]
        assert msg.offset_msg_id == r["offsetMsgId"]
        assert msg.unique_key == r["uniqKey"]
        assert msg.properties.get("KEYS") == r.get("keys")
        if r.get("bodyUtf8") is not None:
            assert msg.body.decode() == r["bodyUtf8"]


def test_compressed_body_is_inflated_for_readers(golden):
    msg = golden.read(6307)
    assert msg.compressed
    assert len(msg.body) == 6290
    assert msg.body == zlib.decompress(msg.stored_body)


def test_blank_records_sit_where_rocketmq_put_them(golden_store_dir, golden_manifest):
    blanks = [r for r in golden_manifest["commitlogRecords"] if r["kind"] == "BLANK"]
    assert [b["totalSize"] for b in blanks] == [9532, 10896, 63]
    for b in blanks:
        data = (golden_store_dir / "commitlog" / b["file"]).read_bytes()
        size, magic = codec.read_size_and_magic(data, b["filePosition"])
        assert (size, magic & 0xFFFFFFFF) == (b["totalSize"], 0xCBD43194)
        assert b["filePosition"] + size == len(data)


def test_reencoding_gives_identical_bytes(golden, golden_store_dir, golden_manifest):
    """Acceptance 2: decode every record, rebuild it from its fields, compare bytes."""
    for r in message_records(golden_manifest):
        msg = golden.read(r["physicalOffset"])
        rebuilt = codec.StoredMessage(
            topic=msg.topic, queue_id=msg.queue_id, queue_offset=msg.queue_offset,
            phys_offset=msg.phys_offset, born_timestamp=msg.born_timestamp, born_host=msg.born_host,
            store_timestamp=msg.store_timestamp, store_host=msg.store_host, stored_body=msg.stored_body,
            properties=dict(msg.properties), flag=msg.flag, sys_flag=msg.sys_flag,
            reconsume_times=msg.reconsume_times, prepared_transaction_offset=msg.prepared_transaction_offset,
            properties_trailing_separator=msg.properties_trailing_separator, magic=msg.magic,
        )
        original = (golden_store_dir / "commitlog" / r["file"]).read_bytes()
        pos = r["filePosition"]
        assert codec.encode(rebuilt) == original[pos : pos + r["totalSize"]], r["physicalOffset"]


def test_every_consume_queue_unit_matches(golden, golden_manifest):
    topics = golden.topics()
    for q in golden_manifest["consumeQueues"]:
        cq = golden.queues.get(q["topic"], q["queueId"])
        assert cq is not None, q["topic"]
        assert (cq.min_offset, cq.max_offset) == (q["minOffset"], q["maxOffset"])
        assert [p.name for p in cq.files()] == q["files"]
        units = [(u.queue_offset, u.phys_offset, u.size, u.tags_code) for u in cq.units(0, 1000)]
        assert units == [(u["queueOffset"], u["commitLogOffset"], u["size"], u["tagsCode"]) for u in q["units"]]
        assert (q["queueId"], q["minOffset"], q["maxOffset"]) in topics[q["topic"]]


def test_tags_code_recomputed_from_records(golden, golden_manifest):
    from store.projections.dispatch import tags_code_of

    for r in message_records(golden_manifest):
        assert tags_code_of(golden.read(r["physicalOffset"]), golden.delay_levels) == r["dispatch_tagsCode"]


def test_key_queries_match_rocketmq(golden, golden_manifest):
    for q in golden_manifest["keyQueries"]:
        window = {"begin": q["begin"], "end": q["end"]} if "begin" in q else {}
        by_key = golden.query_by_key(q["topic"], q["key"], **window, max_results=64)
        assert [m.phys_offset for m in by_key.messages] == q["queryMsgByKey_newest_first"], q
        assert not by_key.truncated
        by_uniq = golden.query_by_unique_key(q["topic"], q["key"], **window, max_results=64)
        assert [m.phys_offset for m in by_uniq.messages] == q["queryMsgByUniqueKey"], q
        raw = list(golden.index.query(q["topic"], q["key"], q.get("begin", 0), q.get("end", 2**63 - 1)))
        assert raw == q["rawIndexPhyOffsets_in_walk_order"], q


def test_offset_msg_id_lookups(golden, golden_manifest):
    for entry in golden_manifest["offsetMsgIdLookups"]:
        host, phys = ids.decode_offset_msg_id(entry["offsetMsgId"])
        assert (str(host), phys) == (entry["decodedAddress"], entry["decodedOffset"])
        if "lookedUpTopic" in entry:
            msg = golden.get_by_offset_id(entry["offsetMsgId"])
            assert (msg.topic, msg.unique_key) == (entry["lookedUpTopic"], entry["lookedUpUniqKey"])


def test_unique_id_decoding(golden_manifest):
    for entry in golden_manifest["uniqIdDecoding"]:
        parts = ids.decode_unique_key(entry["uniqId"])
        assert parts.ip == entry["ip"]
        assert parts.pid == entry["pid"]
        assert parts.class_loader_hash == int(entry["classLoaderHashHex"], 16)
        assert parts.ms_since_month_start == entry["msSinceMonthStart"]
        assert parts.counter == entry["counter"]
        generated_at = entry["getNearlyTimeFromID_at_generation_time"]
        assert ids.nearly_time_ms(entry["uniqId"], generated_at + 1, utc=True) == generated_at


def test_hash_code_examples(golden_manifest):
    for entry in golden_manifest["stringHashCodeExamples"]:
        assert java_string_hash(entry["string"]) == entry["hashCode"]
        assert index_key_hash(entry["string"]) == entry["indexKeyHash"]
        assert index_key_hash(entry["string"]) % 5_000_000 == entry["slotFor5000000"]
        assert index_key_hash(entry["string"]) % 64 == entry["slotFor64"]


def test_read_only_store_refuses_writes(golden):
    with pytest.raises(ReadOnlyStoreError):
        golden.put(NewMessage(topic="TopicTest", body=b"x"))


def test_golden_store_passes_check(golden):
    report = golden.check()
    assert report.ok, report.problems
    assert (report.records, report.blanks, report.queue_units) == (61, 3, 61)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "import sys; from app.cli import main; sys.exit(main())", *args],
                          capture_output=True, text=True, timeout=60)


def cli_json(*args: str) -> dict:
    """A lookup through the command's own entry, in this process (run_cli shows the process's exit codes)."""
    from app.cli import main

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main([*args, "--json", *GEOMETRY_FLAGS]) == 0
    return json.loads(printed.getvalue())


def test_cli_lookups_match_manifest(golden_store_dir, golden_manifest):
    before = file_digests(golden_store_dir)
    store = str(golden_store_dir)
    records = {r["physicalOffset"]: r for r in message_records(golden_manifest)}
    for entry in golden_manifest["offsetMsgIdLookups"]:
        if "lookedUpTopic" not in entry:
            continue
        out = cli_json("query-msg-by-id", "--store", store, "-i", entry["offsetMsgId"])
        [m] = out["messages"]
        r = records[entry["decodedOffset"]]
        assert (m["topic"], m["unique_key"], m["phys_offset"]) == (r["topic"], r["uniqKey"], r["physicalOffset"])
        assert m["properties"] == r["properties"]
        assert (m["born_host"], m["store_host"], m["body_crc"]) == (r["bornHost"], r["storeHost"], r["bodyCRC"])
        assert base64.b64decode(m["body_base64"]) == golden_body(r)
        assert out["truncated"] is False
    for q in golden_manifest["keyQueries"]:
        window = ["--begin", str(q["begin"]), "--end", str(q["end"])] if "begin" in q else []
        out = cli_json("query-msg-by-key", "--store", store, "-t", q["topic"], "-k", q["key"], *window)
        assert [m["phys_offset"] for m in out["messages"]] == q["queryMsgByKey_newest_first"]
        if not window:
            out = cli_json("query-msg-by-unique-key", "--store", store, "-t", q["topic"], "-i", q["key"])
            assert [m["phys_offset"] for m in out["messages"]] == q["queryMsgByUniqueKey"]
    for q in golden_manifest["consumeQueues"]:
        u = q["units"][-1]
        out = cli_json("query-msg-by-offset", "--store", store, "-t", q["topic"], "-q", str(q["queueId"]),
                       "-o", str(u["queueOffset"]))
        assert out["messages"][0]["phys_offset"] == u["commitLogOffset"]
    done = run_cli("store", "check", "--store", store, *GEOMETRY_FLAGS)
    assert done.returncode == 0, done.stdout
    assert file_digests(golden_store_dir) == before


def golden_body(record: dict) -> bytes:
    stored = base64.b64decode(record["bodyBase64"])
    return zlib.decompress(stored) if record["sysFlag"] & 1 else stored


@pytest.mark.parametrize("args, message", [
    (["query-msg-by-id", "--store", "{store}", "-i", "XYZ"], "32 or 56 hex"),
    (["query-msg-by-id", "--store", "{store}", "-i", "0A6C73D900002A9F00000000000000GG"], "hex"),
    (["query-msg-by-id", "--store", "{missing}", "-i", "0A6C73D900002A9F0000000000000000"], "does not exist"),
    (["query-msg-by-offset", "--store", "{store}", "-t", "TopicTest", "-q", "one", "-o", "0"], "--queue"),
    (["query-msg-by-offset", "--store", "{store}", "-t", "TopicTest", "-q", "0", "-o", "99"], "outside"),
    (["query-msg-by-offset", "--store", "{store}", "-t", "NoTopic", "-q", "0", "-o", "0"], "no queue"),
    (["query-msg-by-key", "--store", "{store}", "-t", "TopicTest", "-k", "k", "--max", "0"], "--max"),
    (["query-msg-by-id", "--store", "{store}", "-i", "0A6C73D900002A9F0000000000000005"], "no message"),
])
def test_cli_bad_input_is_one_line_exit_2(golden_store_dir, tmp_path, args, message):
    filled = [a.format(store=golden_store_dir, missing=tmp_path / "missing") for a in args]
    done = run_cli(*filled, *GEOMETRY_FLAGS)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert message in done.stderr
