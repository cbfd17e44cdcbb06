"""A store written by mqlens with the golden geometry follows RocketMQ's on-disk rules.

The checks use ``independent_reader``, a reader written from the format spec that shares no code
with the writer. It is first proved on the golden store written by RocketMQ 4.9.8 itself (its view
must match the manifest RocketMQ reported), then pointed at a store that mqlens wrote.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import shutil
import stat
import struct
from datetime import datetime
from pathlib import Path

import pytest

from store.log.geometry import StoreGeometry
from store.message_store import MessageStore, NewMessage, StoreConfig
from tests.store import independent_reader as rd

GOLDEN_DIR = Path(__file__).resolve().parents[3] / "shared" / "golden" / "rocketmq-4.9.8-store"

COMMITLOG_FILE_SIZE = 32768
CQ_FILE_SIZE = 80
INDEX_SLOTS = 64
INDEX_ENTRIES = 64
GEOMETRY = StoreGeometry(commitlog_file_size=COMMITLOG_FILE_SIZE, cq_file_size=CQ_FILE_SIZE,
                         index_slots=INDEX_SLOTS, index_entries=INDEX_ENTRIES)


def read_whole_store(root: Path) -> dict:
    return rd.read_store(root, COMMITLOG_FILE_SIZE, CQ_FILE_SIZE, INDEX_SLOTS, INDEX_ENTRIES)


def make_writable(root: Path) -> None:
    for path in [root, *root.rglob("*")]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR)


# -- the reader, proved on the golden store ----------------------------------------------------------

@pytest.fixture(scope="module")
def manifest() -> dict:
    if not (GOLDEN_DIR / "manifest.json").is_file():
        pytest.skip(f"golden RocketMQ store not found beside the repository ({GOLDEN_DIR})")
    return json.loads((GOLDEN_DIR / "manifest.json").read_text(encoding="utf-8"))


@pytest.fixture
def golden_copy(manifest, tmp_path: Path) -> Path:
    target = tmp_path / "golden-store"
    shutil.copytree(GOLDEN_DIR / "store", target)
    make_writable(target)
    return target


def test_reader_matches_golden_commitlog(manifest, golden_copy):
    commitlog = rd.read_commitlog(golden_copy, COMMITLOG_FILE_SIZE)
    expected = [r for r in manifest["commitlogRecords"] if r["kind"] == "MESSAGE"]
    assert [r["phys_offset"] for r in commitlog["records"]] == [r["physicalOffset"] for r in expected]
    for got, want in zip(commitlog["records"], expected, strict=True):
        where = f"record at {want['physicalOffset']}"
        assert (got["file"], got["file_position"]) == (want["file"], want["filePosition"]), where
        assert got["magic"] == int(want["magicCode"], 16), where
        assert got["total_size"] == want["totalSize"] == want["dispatch_msgSize"], where
        assert got["properties_string"] == want["propertiesString"], where
        assert got["properties_length"] == want["propertiesLength"], where
        assert got["properties"] == want["properties"], where
        assert got["topic"] == want["topic"], where
        assert (got["queue_id"], got["queue_offset"], got["phys_offset_field"]) == (
            want["queueId"], want["queueOffset"], want["commitLogOffsetField"]), where
        assert (got["flag"], got["sys_flag"], got["reconsume_times"], got["prepared_transaction_offset"]) == (
            want["flag"], want["sysFlag"], want["reconsumeTimes"], want["preparedTransactionOffset"]), where
        assert (got["born_timestamp"], got["store_timestamp"]) == (want["bornTimestamp"],
                                                                   want["storeTimestamp"]), where
        assert (got["born_host"], got["store_host"]) == (want["bornHost"], want["storeHost"]), where
        assert got["body_crc"] == want["bodyCRC"], where
        assert got["stored_body"] == base64.b64decode(want["bodyBase64"]), where
        if "bodyUtf8" in want and not got["sys_flag"] & rd.FLAG_COMPRESSED:
            assert got["body"].decode("utf-8") == want["bodyUtf8"], where
        assert got["offset_msg_id"] == want["offsetMsgId"], where
        assert got["uniq_key"] == want["uniqKey"], where
        assert got["tags_code"] == want["dispatch_tagsCode"], where
        rd.check_hashmap_order(got["properties_string"])
    blanks = [r for r in manifest["commitlogRecords"] if r["kind"] == "BLANK"]
    assert [(b["file"], b["file_position"], b["total_size"]) for b in commitlog["blanks"]] == [
        (b["file"], b["filePosition"], b["totalSize"]) for b in blanks]
    assert [b["total_size"] for b in commitlog["blanks"]] == [9532, 10896, 63]
    assert commitlog["files"] == sorted(p["path"].rsplit("/", 1)[1] for p in manifest["files"]
                                        if p["path"].startswith("store/commitlog/"))


def test_reader_matches_golden_consume_queues(manifest, golden_copy):
    queues = rd.read_consume_queues(golden_copy, CQ_FILE_SIZE)
    assert sorted(queues) == sorted((q["topic"], q["queueId"]) for q in manifest["consumeQueues"])
    for want in manifest["consumeQueues"]:
        got = queues[(want["topic"], want["queueId"])]
        assert got["files"] == want["files"]
        assert (got["min_offset"], got["max_offset"]) == (want["minOffset"], want["maxOffset"])
        assert got["units"] == [{"queue_offset": u["queueOffset"], "phys_offset": u["commitLogOffset"],
                                 "size": u["size"], "tags_code": u["tagsCode"]} for u in want["units"]]
    rd.check_consume_queues_match(rd.read_commitlog(golden_copy, COMMITLOG_FILE_SIZE), queues)


def test_reader_matches_golden_index_and_key_queries(manifest, golden_copy):
    store = read_whole_store(golden_copy)  # includes the entry-by-entry comparison with the records
    index_files = store["index_files"]
    assert [f["name"] for f in index_files] == sorted(p["path"].rsplit("/", 1)[1] for p in manifest["files"]
                                                      if p["path"].startswith("store/index/"))
    assert [f["header"]["index_count"] for f in index_files] == [64, 64, 4]
    assert len(manifest["keyQueries"]) == 16
    for query in manifest["keyQueries"]:
        got = rd.query_index(index_files, INDEX_SLOTS, query["topic"], query["key"],
                             query.get("begin", 0), query.get("end", rd.JAVA_LONG_MAX))
        assert got == query["rawIndexPhyOffsets_in_walk_order"], query
        if "keyHash" in query:
            key = rd.index_key(query["topic"], query["key"])
            assert (rd.java_string_hash(key), rd.index_key_hash(key)) == (query["javaStringHashCode"],
                                                                          query["keyHash"])
            assert rd.index_key_hash(key) % INDEX_SLOTS == query["slot"]
    for example in manifest["stringHashCodeExamples"]:
        assert rd.java_string_hash(example["string"]) == example["hashCode"]
        assert rd.index_key_hash(example["string"]) == example["indexKeyHash"]
        assert rd.index_key_hash(example["string"]) % INDEX_SLOTS == example["slotFor64"]
    for lookup in manifest["offsetMsgIdLookups"]:
        decoded = rd.decode_offset_msg_id(lookup["offsetMsgId"])
        assert decoded["phys_offset"] == lookup["decodedOffset"]
        if "lookedUpTopic" in lookup:
            record = rd.read_record_at(golden_copy, COMMITLOG_FILE_SIZE, decoded["phys_offset"])
            assert record["topic"] == lookup["lookedUpTopic"]
    checkpoint = rd.read_checkpoint(golden_copy)
    last = max(r["store_timestamp"] for r in store["commitlog"]["records"])
    assert checkpoint["physic_msg_timestamp"] == checkpoint["logics_msg_timestamp"] == last


def _patch(path: Path, offset: int, data: bytes) -> None:
    raw = bytearray(path.read_bytes())
    raw[offset:offset + len(data)] = data
    path.write_bytes(bytes(raw))


def _index_path(root: Path, number: int) -> Path:
    return sorted((root / "index").iterdir())[number]


MUTATIONS = {
    "body byte (CRC)": (lambda r: _patch(r / "commitlog" / "00000000000000000000", 90, b"X"), "BODYCRC"),
    "physical offset field": (lambda r: _patch(r / "commitlog" / "00000000000000000000", 206 + 28,
                                               struct.pack(">q", 5)), "PHYSICALOFFSET"),
    "BLANK size": (lambda r: _patch(r / "commitlog" / "00000000000000000000", 23236,
                                    struct.pack(">i", 9000)), "BLANK declares"),
    "missing BLANK": (lambda r: _patch(r / "commitlog" / "00000000000000000000", 23236, bytes(8)),
                      "holds data after the end of the log"),
    "junk in zero tail": (lambda r: _patch(r / "commitlog" / "00000000000000098304", 32000, b"\x01"),
                          "tail is not all zeros"),
    "short segment": (lambda r: (r / "commitlog" / "00000000000000098304").write_bytes(
        (r / "commitlog" / "00000000000000098304").read_bytes()[:4096]), "expected exactly"),
    "bad file name": (lambda r: (r / "commitlog" / "00000000000000098304").rename(r / "commitlog" / "98304"),
                      "20-digit"),
    "hole in a consume queue": (lambda r: _patch(r / "consumequeue" / "TopicTest" / "0" / "00000000000000000000",
                                                 20, bytes(20)), "hidden data"),
    "consume queue tagsCode": (lambda r: _patch(r / "consumequeue" / "TopicTest" / "0" / "00000000000000000000",
                                                12, struct.pack(">q", 1)), "tagsCode"),
    "hashSlotCount": (lambda r: _patch(_index_path(r, 0), 32, struct.pack(">i", 7)), "hashSlotCount"),
    "index chain": (lambda r: _patch(_index_path(r, 0), 40 + 64 * 4 + 5 * 20 + 16, struct.pack(">i", 9)),
                    "strictly backwards"),
    "entry 0 used": (lambda r: _patch(_index_path(r, 1), 40 + 64 * 4 + 4, struct.pack(">q", 1)), "entry 0"),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_reader_rejects_broken_golden_copies(golden_copy, mutation):
    apply, message = MUTATIONS[mutation]
    read_whole_store(golden_copy)
    apply(golden_copy)
    with pytest.raises(AssertionError, match=message):
        read_whole_store(golden_copy)


# -- a store written by mqlens -------------------------------------------------------------------------

NON_ASCII_TAG = "标签-é-\U0001d11e"  # CJK, Latin-1 and a character outside the BMP (two UTF-16 units)
NON_ASCII_KEYS = ["键-1", "ключ-\U0001f600"]
IPV6_BORN_HOST = "[fd00::1:2]:40001"


def build_messages() -> list[list[NewMessage]]:
    """Batches of messages: small and ~10 KiB bodies, several topics and queues, tags and keys."""
    batches: list[list[NewMessage]] = []
    batch: list[NewMessage] = []
    for i in range(150):
        big = i % 9 == 4
        body = (f"big-{i}-".encode() * 1300)[:10 * 1024 + i] if big else f"small message {i}".encode()
        topic = "TopicBig" if big else ("TopicA" if i % 3 else "TopicB")
        keys = [f"order-{i}"] if i % 2 else [f"order-{i}", f"group-{i // 10}"]
        if topic == "TopicA" and i % 10 == 1:
            keys = [f"order-{i}", "shared-key"]
        batch.append(NewMessage(
            topic=topic, body=body, tags=None if i % 7 == 6 else f"Tag{i % 4}", keys=keys,
            queue_id=None if topic == "TopicBig" else i % (4 if topic == "TopicA" else 2),
            born_timestamp=1_700_000_000_000 + i, born_host=f"192.168.1.{i % 250}:{50000 + i}",
            properties={"color": "blue"} if i % 5 == 0 else {}, flag=i % 3,
        ))
        if i == 40:
            batch.append(NewMessage(topic="TopicDelay", body=b"delayed by level 3", tags="TagD",
                                    keys=["delay-3"], queue_id=1, delay_level=3,
                                    born_timestamp=1_700_000_000_500, born_host="10.0.0.9:41000"))
        if i == 60:
            batch.append(NewMessage(topic="TopicV6", body=b"born on an IPv6 host", tags="TagV6",
                                    keys=["v6-born"], queue_id=0, born_host=IPV6_BORN_HOST))
        if i == 80:
            batch.append(NewMessage(topic="TopicA", body="héllo 世界 \U0001d11e".encode(), tags=NON_ASCII_TAG,
                                    keys=NON_ASCII_KEYS, queue_id=2, properties={"名字": "值"}))
        if i == 100:
            batch.append(NewMessage(topic="TopicB", body=b"compress me " * 200, tags="TagZ", keys=["zipped"],
                                    queue_id=1, compress=True))
        if len(batch) >= 1 + i % 7:
            batches.append(batch)
            batch = []
    if batch:
        batches.append(batch)
    return batches


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("mqlens-written") / "store"
    batches = build_messages()
    store = MessageStore.open(root, StoreConfig(geometry=GEOMETRY, trace=False))
    messages, results = [], []
    try:
        for number, batch in enumerate(batches):
            if number % 2:
                results.extend(store.put_many(batch))
            else:
                results.extend(store.put(m) for m in batch)
            messages.extend(batch)
    finally:
        store.close()
    # read the parts separately so that one broken cross-check does not hide the other rules
    layout = {
        "commitlog": rd.read_commitlog(root, COMMITLOG_FILE_SIZE),
        "consume_queues": rd.read_consume_queues(root, CQ_FILE_SIZE),
        "index_files": rd.read_index_files(root, INDEX_SLOTS, INDEX_ENTRIES),
    }
    return {"root": root, "messages": messages, "results": results, "store": layout}


def test_written_store_is_big_enough_to_matter(written):
    store = written["store"]
    assert len(store["commitlog"]["files"]) >= 4
    assert len(store["commitlog"]["blanks"]) >= 3
    assert len(store["index_files"]) >= 3
    multi_file_queues = [key for key, q in store["consume_queues"].items() if len(q["files"]) >= 3]
    assert len(multi_file_queues) >= 4


def test_written_files_have_names_and_sizes_of_the_geometry(written):
    root = written["root"]
    commitlog = written["store"]["commitlog"]
    for number, name in enumerate(commitlog["files"]):
        assert name == rd.offset_to_file_name(number * COMMITLOG_FILE_SIZE)
        assert (root / "commitlog" / name).stat().st_size == COMMITLOG_FILE_SIZE
    assert not commitlog["empty_files"], "an unused pre-allocated segment was left behind"
    last_file_start = int(commitlog["files"][-1])
    assert last_file_start < commitlog["end_offset"] <= last_file_start + COMMITLOG_FILE_SIZE
    for (topic, queue_id), queue in written["store"]["consume_queues"].items():
        directory = root / "consumequeue" / topic / str(queue_id)
        assert queue["files"] == [rd.offset_to_file_name(n * CQ_FILE_SIZE) for n in range(len(queue["files"]))]
        for name in queue["files"]:
            assert (directory / name).stat().st_size == CQ_FILE_SIZE
        units = len(queue["units"])
        assert len(queue["files"]) == -(-units * rd.CQ_UNIT_SIZE // CQ_FILE_SIZE), (topic, queue_id)
    index_size = rd.index_file_size(INDEX_SLOTS, INDEX_ENTRIES)
    for index_file in written["store"]["index_files"]:
        assert Path(index_file["path"]).stat().st_size == index_size == 1576
    assert sorted(p.name for p in (root / "index").iterdir()) == [f["name"] for f in written["store"]["index_files"]]
    assert not (root / "abort").exists(), "a clean close must delete the abort marker"
    assert (root / "lock").read_bytes() == b"lock"
    assert (root / "checkpoint").stat().st_size == rd.CHECKPOINT_SIZE


def test_written_records_are_placed_as_rocketmq_places_them(written):
    """Replay the placement rule from the record sizes alone: a record goes where the previous one
    ended unless it and 8 more bytes do not fit, then a BLANK fills the file and it moves on."""
    commitlog = written["store"]["commitlog"]
    position, expected_blanks, expected_offsets = 0, [], []
    for record in commitlog["records"]:
        left = COMMITLOG_FILE_SIZE - position % COMMITLOG_FILE_SIZE
        if record["total_size"] + rd.END_FILE_MIN_BLANK_LENGTH > left:
            expected_blanks.append((position, left))
            position += left
        expected_offsets.append(position)
        position += record["total_size"]
    assert [r["phys_offset"] for r in commitlog["records"]] == expected_offsets
    assert [(b["phys_offset"], b["total_size"]) for b in commitlog["blanks"]] == expected_blanks
    assert commitlog["end_offset"] == position
    for record in commitlog["records"]:
        assert record["phys_offset_field"] == record["phys_offset"]
        assert record["magic"] == rd.MAGIC_V1, "RocketMQ 4.9.8 only knows the v1 magic"


def test_written_records_match_what_was_put(written):
    records = written["store"]["commitlog"]["records"]
    messages, results = written["messages"], written["results"]
    assert len(records) == len(results) == len(messages)
    for record, result, message in zip(records, results, messages, strict=True):
        where = f"record at {record['phys_offset']}"
        assert record["phys_offset"] == result.phys_offset, where
        assert record["total_size"] == result.size, where
        assert (record["topic"], record["queue_id"], record["queue_offset"]) == (
            result.topic, result.queue_id, result.queue_offset), where
        assert record["offset_msg_id"] == result.offset_msg_id, where
        assert record["store_timestamp"] == result.store_timestamp, where
        assert record["store_host"] == "127.0.0.1:10911", where
        assert record["uniq_key"] == result.unique_key, where
        assert record["uniq_key"] and len(record["uniq_key"]) in (32, 56), where
        assert record["body"] == message.body, where
        assert record["flag"] == message.flag, where
        props = record["properties"]
        assert props.get("TAGS") == message.tags, where
        assert props.get("KEYS") == " ".join(message.keys), where
        assert props["CLUSTER"] == "DefaultCluster", where
        for name, value in message.properties.items():
            assert props[name] == value, where
        if message.born_timestamp is not None:
            assert record["born_timestamp"] == message.born_timestamp, where
        if message.born_host is not None:
            host, port = message.born_host.rsplit(":", 1)
            got_host, got_port = record["born_host"].rsplit(":", 1)
            assert ipaddress.ip_address(got_host.strip("[]")) == ipaddress.ip_address(host.strip("[]")), where
            assert got_port == port, where
        if message.delay_level:
            assert (record["topic"], record["queue_id"]) == (rd.SCHEDULE_TOPIC, message.delay_level - 1), where
            assert props["REAL_TOPIC"] == message.topic, where
            assert props["REAL_QID"] == str(message.queue_id), where
            assert props["DELAY"] == str(message.delay_level), where
        else:
            assert record["topic"] == message.topic, where
            if message.queue_id is not None:
                assert record["queue_id"] == message.queue_id, where
        if message.compress:
            assert record["sys_flag"] & rd.FLAG_COMPRESSED and record["stored_body"] != message.body, where
        # the offsetMsgId decodes back to the store host and this record
        assert rd.decode_offset_msg_id(result.offset_msg_id) == {"address": "127.0.0.1:10911",
                                                                 "phys_offset": record["phys_offset"]}
        assert rd.read_record_at(written["root"], COMMITLOG_FILE_SIZE, result.phys_offset) == record


def test_written_special_records(written):
    records = written["store"]["commitlog"]["records"]
    delayed = [r for r in records if r["topic"] == rd.SCHEDULE_TOPIC]
    assert len(delayed) == 1
    assert delayed[0]["queue_id"] == 2
    assert delayed[0]["tags_code"] == delayed[0]["store_timestamp"] + 10_000  # level 3 = 10s
    v6 = [r for r in records if r["topic"] == "TopicV6"]
    assert len(v6) == 1
    assert v6[0]["sys_flag"] & rd.FLAG_BORNHOST_V6 and not v6[0]["sys_flag"] & rd.FLAG_STOREHOST_V6
    assert v6[0]["born_host"] == "[fd00:0:0:0:0:0:1:2]:40001"
    assert v6[0]["total_size"] == (rd.RECORD_FIXED_SIZE + 20 + 8 + len(v6[0]["stored_body"]) + 1 + len(b"TopicV6")
                                   + v6[0]["properties_length"])
    assert len(v6[0]["offset_msg_id"]) == 32  # the store host is IPv4
    non_ascii = [r for r in records if r["properties"].get("TAGS") == NON_ASCII_TAG]
    assert len(non_ascii) == 1
    assert non_ascii[0]["tags_code"] == rd.java_string_hash(NON_ASCII_TAG)
    assert rd.key_tokens(non_ascii[0]["keys"]) == NON_ASCII_KEYS
    assert non_ascii[0]["properties"]["名字"] == "值"
    assert non_ascii[0]["body"].decode("utf-8") == "héllo 世界 \U0001d11e"
    no_tags = [r for r in records if "TAGS" not in r["properties"]]
    assert no_tags and all(r["tags_code"] == 0 for r in no_tags)


def test_written_consume_queues_match_records(written):
    store = written["store"]
    queues = store["consume_queues"]
    rd.check_consume_queues_match(store["commitlog"], queues)  # phys, size, tagsCode; contiguous
    per_queue: dict[tuple[str, int], list[dict]] = {}
    for record in store["commitlog"]["records"]:
        per_queue.setdefault((record["topic"], record["queue_id"]), []).append(record)
    assert sorted(queues) == sorted(per_queue)
    for key, records in per_queue.items():
        queue = queues[key]
        assert queue["pre_blank"] == 0 and queue["min_offset"] == 0, key
        assert queue["max_offset"] == len(records), key
        assert [u["queue_offset"] for u in queue["units"]] == list(range(len(records))), key
        assert [(u["phys_offset"], u["size"], u["tags_code"]) for u in queue["units"]] == [
            (r["phys_offset"], r["total_size"], r["tags_code"]) for r in records], key
    delayed = queues[(rd.SCHEDULE_TOPIC, 2)]["units"]
    assert delayed[0]["tags_code"] > 1_000_000_000_000  # a deliver time, not a tag hash


def _index_name_ms(name: str) -> int:
    moment = datetime.strptime(name, "%Y%m%d%H%M%S%f")  # the broker's local time zone
    return int(moment.timestamp() * 1000)


def test_written_index_files_headers_and_chains(written):
    store = written["store"]
    index_files = store["index_files"]
    rd.check_index_matches(store["commitlog"], index_files)  # entry sequence, timeDiffs, begin/end times
    for number, index_file in enumerate(index_files):
        header, entries = index_file["header"], index_file["entries"]
        last_file = number == len(index_files) - 1
        if not last_file:
            assert header["index_count"] == INDEX_ENTRIES and len(entries) == INDEX_ENTRIES - 1
        assert len(entries) == header["index_count"] - 1 > 0
        assert header["hash_slot_count"] == sum(1 for v in index_file["slots"] if v) == len(index_file["chains"])
        assert header["begin_phys_offset"] == entries[0]["phys_offset"]
        assert header["end_phys_offset"] == entries[-1]["phys_offset"]
        for slot, chain in index_file["chains"].items():
            assert chain == sorted(chain, reverse=True) and len(set(chain)) == len(chain), slot
            assert all(index_file["entries"][n - 1]["key_hash"] % INDEX_SLOTS == slot for n in chain)
        # the file is named after its creation time, yyyyMMddHHmmssSSS in local time
        created = _index_name_ms(index_file["name"])
        assert abs(created - header["begin_timestamp"]) < 60_000, index_file["name"]
    names = [f["name"] for f in index_files]
    assert names == sorted(set(names))
    checkpoint = rd.read_checkpoint(written["root"])
    last = max(r["store_timestamp"] for r in store["commitlog"]["records"])
    assert checkpoint["physic_msg_timestamp"] == last
    assert checkpoint["logics_msg_timestamp"] == last
    assert 0 < checkpoint["index_msg_timestamp"] <= index_files[-1]["header"]["end_timestamp"]


def test_every_written_key_is_found_by_the_index_query(written):
    store = written["store"]
    index_files = store["index_files"]
    records = store["commitlog"]["records"]
    expected: dict[tuple[str, str], list[int]] = {}
    for record in records:
        keys = ([record["uniq_key"]] if record["uniq_key"] else []) + rd.key_tokens(record["keys"])
        for key in keys:
            expected.setdefault((record["topic"], key), []).append(record["phys_offset"])
    assert ("TopicA", "shared-key") in expected and len(expected[("TopicA", "shared-key")]) > 3
    assert (rd.SCHEDULE_TOPIC, "delay-3") in expected
    assert ("TopicA", NON_ASCII_KEYS[1]) in expected
    for (topic, key), offsets in expected.items():
        found = rd.query_index(index_files, INDEX_SLOTS, topic, key)
        for offset in offsets:
            assert offset in found, (topic, key, offset, found)
        # hash matches only: exact hits come newest first, interleaved with any colliding keys
        assert [o for o in found if o in offsets] == sorted(offsets, reverse=True), (topic, key)
    shared = sorted({f["name"] for f in index_files for e in f["entries"]
                     if e["key_hash"] == rd.index_key_hash("TopicA#shared-key")})
    assert len(shared) >= 2, "the shared key should be spread over several index files"
    assert rd.query_index(index_files, INDEX_SLOTS, "TopicA", "no-such-key") == []
    # the stored topic is the one indexed: the delayed message is not under its original topic
    assert rd.query_index(index_files, INDEX_SLOTS, "TopicDelay", "delay-3") == []


def test_put_many_gives_each_message_of_a_queue_its_own_queue_offset(tmp_path):
    """Spec 3.2/5: QUEUEOFFSET is the message's index in its consume queue, so a batch of messages for
    one queue must get consecutive offsets, and each must get its consume queue unit."""
    root = tmp_path / "store"
    store = MessageStore.open(root, StoreConfig(geometry=GEOMETRY, trace=False))
    try:
        results = store.put_many([NewMessage(topic="TopicA", body=f"m{i}".encode(), queue_id=1)
                                  for i in range(3)])
    finally:
        store.close()
    records = rd.read_commitlog(root, COMMITLOG_FILE_SIZE)["records"]
    assert [r["queue_offset"] for r in records] == [0, 1, 2], "QUEUEOFFSET fields of one put_many batch"
    assert [r.queue_offset for r in results] == [0, 1, 2], "queue offsets reported by put_many"
    queue = rd.read_consume_queues(root, CQ_FILE_SIZE)[("TopicA", 1)]
    assert [u["phys_offset"] for u in queue["units"]] == [r["phys_offset"] for r in records], (
        "every message of the batch needs its consume queue unit")
