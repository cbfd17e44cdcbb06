"""`store check` walks each structure once with compiled code; the plain per-record check
(store.projections.check_reference) is its reference: both must report the same problems, in
the same order, on clean stores and on stores damaged in each way the check looks for."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from store.errors import StoreError
from store.format import codec, topics
from store.format.codec import BORNHOST_V6_FLAG, STOREHOST_V6_FLAG
from store.format.hosts import HostAddress
from store.format.layouts import (
    BLANK,
    CQ_UNIT,
    HOST_V4,
    HOST_V6,
    INDEX_ENTRY,
    INDEX_ENTRY_FIELDS,
    INDEX_HEADER,
    INDEX_SLOT,
    MAGIC_V1,
    MAGIC_V2,
    RECORD_HEAD,
    RECORD_TAIL,
    STORE_TIMESTAMP,
    field_offset,
)
from store.format.recordio import crc_walk, index_reachable, record_layout
from store.log.geometry import StoreGeometry
from store.message_store import MessageStore, NewMessage, StoreConfig
from store.projections import check
from store.projections.check import MAX_PROBLEMS, check_store
from store.projections.check_reference import check_store_reference
from store.projections.index import IndexFile
from tests.conftest import GOLDEN_GEOMETRY
from tests.store.helpers import sample_message, small_config
from tests.store.test_delay_tables import BROKER_GEOMETRY, DEFAULT_DELAY_LEVELS
from tests.store.test_roundtrips import stored_messages

SEGMENT = GOLDEN_GEOMETRY.commitlog_file_size
SLOTS = GOLDEN_GEOMETRY.index_slots
ANY_TIME = 2**63 - 1
HOST = HostAddress.parse("10.0.0.1:10911")


def both(store):
    fast = check_store(store)
    assert fast == check_store_reference(store)
    return fast


# -- stores damaged on disk ------------------------------------------------------------------------
def _message(i: int) -> NewMessage:
    msg = sample_message(i, topic=("TopicA", "TopicB", "TopicC")[i % 3], body_size=200 + (i * 97) % 900)
    if i % 7 == 0:
        msg.keys = [f"clé-{i}", f"group-{i // 10}"]  # not ASCII: the scanner hands it to the Python decoder
    if i % 11 == 0:
        msg.delay_level = 1 + i % 3
    if i % 13 == 0:
        msg.keys = []
    return msg


@pytest.fixture
def written(tmp_path) -> tuple[Path, list]:
    """Several segments, queue files and index files; scheduled, timer, committed and rolled
    back transactional messages, and records the compiled scanner declines. Opening a store
    reads its last three segments and refuses one corrupt there: damage goes in the first two."""
    store_dir = tmp_path / "store"
    with MessageStore.open(store_dir, small_config()) as store:
        results = [store.put(_message(i)) for i in range(120)]
        due = store.clock.now_ms() + 3_600_000
        results.append(store.put(NewMessage(topic="TopicT", body=b"later", properties={topics.TIMER_DELIVER_MS:
                                                                                          str(due)})))
        for commit in (True, False):
            half = store.put_half(NewMessage(topic="TopicTx", body=b"half", keys=[f"tx-{commit}"]))
            store.end_transaction(half.offset_msg_id, commit)
        results += [store.put(_message(i)) for i in range(120, 200)]
    return store_dir, results


@pytest.fixture(params=[None, 4], ids=["index read whole", "index read 4 entries at a time"])
def index_window(request, monkeypatch):
    """The index compared a window at a time: problems found across windows are those found at once."""
    if request.param is not None:
        monkeypatch.setattr(check, "INDEX_WINDOW", request.param)


def _open(store_dir: Path, **config) -> MessageStore:
    return MessageStore.open(store_dir, small_config(**config), read_only=True)


def _patch(path: Path, pos: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


def _segment_and_pos(store_dir: Path, phys: int) -> tuple[Path, int]:
    return store_dir / "commitlog" / f"{phys // SEGMENT * SEGMENT:020d}", phys % SEGMENT


def _body_at(path: Path, pos: int) -> int:
    """Where the body of the record at `pos` of a segment starts."""
    raw = path.read_bytes()
    sys_flag = RECORD_HEAD.unpack_from(raw, pos)[7]
    return (pos + RECORD_HEAD.size + (HOST_V6 if sys_flag & BORNHOST_V6_FLAG else HOST_V4).size +
            STORE_TIMESTAMP.size + (HOST_V6 if sys_flag & STOREHOST_V6_FLAG else HOST_V4).size + RECORD_TAIL.size)


def _queue_file(store_dir: Path, topic: str, queue_id: int, number: int = 0) -> Path:
    return sorted((store_dir / "consumequeue" / topic / str(queue_id)).iterdir())[number]


def _entry_at(number: int) -> int:
    return INDEX_HEADER.size + SLOTS * INDEX_SLOT.size + number * INDEX_ENTRY.size


def _index_file(store_dir: Path, number: int) -> Path:
    return sorted((store_dir / "index").iterdir())[number]


def test_a_clean_store_is_consistent_in_both_checks(written, index_window):
    store_dir, results = written
    with _open(store_dir) as store:
        report = both(store)
    assert report.ok and report.records > len(results) and report.blanks >= 3
    assert report.queue_units > 200 and report.index_entries > 400


def test_a_flipped_body_byte_ends_the_walk_at_its_record(written):
    store_dir, results = written
    victim = next(r for r in results if r.phys_offset > SEGMENT // 2)
    path, pos = _segment_and_pos(store_dir, victim.phys_offset)
    body = _body_at(path, pos)
    _patch(path, body + 5, bytes([path.read_bytes()[body + 5] ^ 0x55]))
    with _open(store_dir) as store:
        assert store.commitlog.segment_count >= 5
        report = both(store)
    assert report.problems[0] == f"corrupt record in {path} at position {pos}: body CRC mismatch"
    assert report.records == sum(1 for r in results if r.phys_offset < victim.phys_offset)
    assert all("which is not a record" in p or "has no unit" in p for p in report.problems[1:MAX_PROBLEMS])


def test_a_record_that_states_another_offset_and_a_torn_one(written):
    store_dir, results = written
    victim = next(r for r in results if r.phys_offset > 1000)
    path, pos = _segment_and_pos(store_dir, victim.phys_offset)
    _patch(path, pos + 28, (victim.phys_offset + 1).to_bytes(8, "big"))  # its own offset field
    torn = [r for r in results if r.phys_offset < SEGMENT][-2]
    torn_path, torn_pos = _segment_and_pos(store_dir, torn.phys_offset)
    _patch(torn_path, torn_pos, (SEGMENT * 2).to_bytes(4, "big"))  # a size running past the file
    with _open(store_dir) as store:
        report = both(store)
    assert report.problems[0] == f"record at {victim.phys_offset} says its offset is {victim.phys_offset + 1}"
    assert report.problems[1] == (f"corrupt record in {torn_path} at position {torn_pos}: total size {SEGMENT * 2} "
                                  "does not fit in the file")


def test_wrong_queue_units(written):
    store_dir, results = written
    path = _queue_file(store_dir, "TopicA", 0, 1)
    other = results[5]
    _patch(path, 0, CQ_UNIT.pack(other.phys_offset, 7, 123))  # another record's offset, a wrong size and tags
    _patch(path, CQ_UNIT.size, CQ_UNIT.pack(other.phys_offset + 3, 100, 0))  # not a record
    with _open(store_dir) as store:
        report = both(store)
    assert len(report.problems) == 5
    assert "points at a record of TopicC:" in report.problems[0] and "size 7 != record size" in report.problems[1]
    assert "has tagsCode 123" in report.problems[2] and "which is not a record" in report.problems[3]
    assert "has no unit in TopicA:0 offset 5" in report.problems[4]  # a unit astray does not stand for its record


def test_a_zeroed_queue_file_tail_and_a_missing_queue(written):
    store_dir, _ = written
    path = _queue_file(store_dir, "TopicB", 1, 2)
    _patch(path, CQ_UNIT.size, bytes(path.stat().st_size - CQ_UNIT.size))
    for unit in (store_dir / "consumequeue" / "TopicC" / "2").iterdir():
        unit.unlink()
    (store_dir / "consumequeue" / "TopicC" / "2").rmdir()
    with _open(store_dir) as store:
        report = both(store)
    assert sum("has no unit in TopicB:1" in p for p in report.problems) == 3
    assert report.problems[-1] == "records of TopicC:2 have no consume queue"


def test_scheduled_units_checked_against_another_delay_table(written):
    store_dir, _ = written
    with _open(store_dir, delay_levels="3s 7s 12s") as store:
        report = both(store)
    assert report.problems and all("--delay-levels" in p for p in report.problems)


def test_index_entries_damaged(written, index_window):
    store_dir, results = written
    path = _index_file(store_dir, 2)
    _patch(path, _entry_at(3), (12345).to_bytes(4, "big"))  # a hash no key of its record has
    _patch(path, _entry_at(5) + 4, results[0].phys_offset.to_bytes(8, "big"))  # another record
    _patch(path, _entry_at(7) + 4, (results[0].phys_offset + 1).to_bytes(8, "big"))  # no record
    _patch(path, _entry_at(9) + 16, (30).to_bytes(4, "big"))  # chains forward
    with _open(store_dir) as store:
        report = both(store)
    name = path.name
    assert report.problems[:4] == [
        f"index {name} entry 3 hash matches none of the record's keys",
        f"index {name} entry 5 hash matches none of the record's keys",
        f"index {name} entry 7 points at {results[0].phys_offset + 1}, which is not a record",
        f"index {name} entry 9 chains forward to 30"]
    assert any("is not found in the index under" in p for p in report.problems[4:])


def test_an_emptied_slot_table_hides_keys_and_long_lists_are_cut(written):
    store_dir, _ = written
    for path in sorted((store_dir / "index").iterdir()):
        _patch(path, INDEX_HEADER.size, bytes(SLOTS * INDEX_SLOT.size))
    with _open(store_dir) as store:
        report = both(store)
    assert len(report.problems) == MAX_PROBLEMS + 1 and report.problems[-1] == "... more problems not listed"
    assert "is not found in the index under" in report.problems[0]


def test_an_index_header_counting_past_its_file_is_reported_not_a_crash(written, index_window):
    """The reference fails reading past the file; the check says so and checks what is there."""
    store_dir, _ = written
    path = _index_file(store_dir, 1)
    _patch(path, INDEX_HEADER.size - 4, (10**6).to_bytes(4, "big"))  # the header's entry count
    with _open(store_dir) as store:
        report = check_store(store)
    room = GOLDEN_GEOMETRY.index_entries - 1
    assert report.problems[0] == f"index {path.name} counts {10**6 - 1} entries, more than the {room} it has room for"
    assert report.index_entries > 10**6


def test_opening_read_write_refuses_an_index_header_counting_past_its_file_in_words(written):
    store_dir, _ = written
    path = _index_file(store_dir, 1)
    _patch(path, INDEX_HEADER.size - 4, (10**6).to_bytes(4, "big"))
    with pytest.raises(StoreError, match=rf"index file {path.name} is damaged: its header counts 1000000 entries"):
        MessageStore.open(store_dir, small_config())


def test_golden_stores_agree(golden_store_dir, golden_broker_dir):
    with MessageStore.open(golden_store_dir, StoreConfig(geometry=GOLDEN_GEOMETRY), read_only=True) as store:
        assert both(store).ok
    with MessageStore.open(golden_broker_dir, StoreConfig(geometry=BROKER_GEOMETRY), read_only=True) as store:
        assert both(store).ok
    with MessageStore.open(golden_broker_dir, StoreConfig(geometry=BROKER_GEOMETRY,
                                                          delay_levels=DEFAULT_DELAY_LEVELS), read_only=True) as store:
        assert len(both(store).problems) == 19


def test_an_empty_store(tmp_path):
    with MessageStore.open(tmp_path / "store", small_config()):
        pass
    with _open(tmp_path / "store") as store:
        report = both(store)
    assert (report.ok, report.records, report.queue_units, report.index_entries) == (True, 0, 0, 0)


# -- memory ------------------------------------------------------------------------------------------
BIG_FILES = StoreGeometry(commitlog_file_size=256 << 20, cq_file_size=40 << 20, index_slots=5_000_000,
                          index_entries=400_000)
CHECK_PEAK_BOUND_MIB = 200  # expected about 100 (the interpreter and numpy included); each file read kept: near 300
CHECK_IN_A_PROCESS = """
import json, sys
from pathlib import Path
from store.log.geometry import StoreGeometry
from store.message_store import MessageStore, StoreConfig
from store.projections.check import check_store

geometry = StoreGeometry(**json.loads(sys.argv[2]))
with MessageStore.open(Path(sys.argv[1]), StoreConfig(geometry=geometry), read_only=True) as store:
    report = check_store(store)
peak = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"records": report.records, "problems": report.problems, "peak_kib": int(peak.split()[1])}))
"""


def test_the_check_gives_back_the_pages_it_reads(tmp_path):
    """A store whose files hold more than the bound (a 256 MiB segment about half written,
    four 40 MiB queue files read whole at the open, an index of 20 MB of slots): the check's
    process stays under it, every file's pages given back once read."""
    store_dir = tmp_path / "store"
    body = bytes(range(256)) * 40
    try:
        with MessageStore.open(store_dir, small_config(geometry=BIG_FILES, flush="async")) as store:
            for start in range(0, 12_000, 500):
                store.put_many([NewMessage("Big", body, keys=[f"k{n}", f"g{n}"], queue_id=n % 4)
                                for n in range(start, start + 500)])
        geometry = {name: getattr(BIG_FILES, name) for name in ("commitlog_file_size", "cq_file_size", "index_slots",
                                                                "index_entries")}
        done = subprocess.run([sys.executable, "-c", CHECK_IN_A_PROCESS, str(store_dir), json.dumps(geometry)],
                              capture_output=True, text=True, timeout=300, check=True)
    finally:
        shutil.rmtree(store_dir, ignore_errors=True)  # half a gigabyte on disk
    result = json.loads(done.stdout)
    assert (result["records"], result["problems"]) == (12_000, [])
    assert result["peak_kib"] < CHECK_PEAK_BOUND_MIB * 1024, result


@st.composite
def damaged_stores(draw) -> tuple[list[NewMessage], list[tuple[str, float, int]]]:
    """Messages of a few topics (keys not ASCII among them, scheduled ones), and bytes to
    change afterwards: (which files, where in the file as a fraction, the xor mask)."""
    texts = st.text(st.sampled_from("abcé漢"), min_size=1, max_size=6)
    messages = [NewMessage(topic=draw(st.sampled_from(["TopicA", "TopicB"])), body=draw(st.binary(max_size=300)),
                           tags=draw(st.none() | texts), keys=draw(st.lists(texts, max_size=3)),
                           delay_level=draw(st.sampled_from([0, 0, 0, 1, 3])), queue_id=draw(st.integers(0, 2)))
                for _ in range(draw(st.integers(1, 60)))]
    damage = draw(st.lists(st.tuples(st.sampled_from(["commitlog", "consumequeue", "index"]),
                                     st.floats(0, 1, exclude_max=True), st.integers(1, 255)), min_size=1, max_size=3))
    return messages, damage


@settings(max_examples=40, deadline=None)
@given(damaged_stores())
def test_generated_stores_with_changed_bytes_agree(tmp_path_factory, drawn):
    messages, damage = drawn
    store_dir = tmp_path_factory.mktemp("store")
    with MessageStore.open(store_dir, small_config()) as store:
        for message in messages:
            store.put(message)
    for folder, where, mask in damage:
        files = sorted(p for p in (store_dir / folder).rglob("*") if p.is_file())
        path = files[int(where * len(files))]
        data = bytearray(path.read_bytes())
        data[int(where * len(files) % 1 * len(data.rstrip(b"\0")))] ^= mask  # within what was written
        path.write_bytes(bytes(data))
    try:
        store = _open(store_dir)
    except StoreError:
        event("refused by the open")
        return
    except (struct.error, ValueError):
        event("the open fails (an index header counting past its file)")
        return
    with store:
        try:
            reference = check_store_reference(store)
        except (struct.error, ValueError, IndexError):
            event("the reference cannot read past it")
            return
        event("compared, " + ("problems found" if reference.problems else "consistent"))
        assert check_store(store) == reference


# -- the compiled parts against Python rules -------------------------------------------------------
def crc_walk_reference(buf: bytes, pos: int, limit: int) -> int:
    """Where the CRC walk must stop: the first record it cannot vouch for, by its documented rule."""
    limit = min(limit, len(buf))
    smallest = RECORD_HEAD.size + 2 * HOST_V4.size + STORE_TIMESTAMP.size + RECORD_TAIL.size
    while pos + BLANK.size <= limit:
        total, magic = BLANK.unpack_from(buf, pos)
        if magic not in (MAGIC_V1, MAGIC_V2) or not smallest <= total <= limit - pos:
            return pos
        head = RECORD_HEAD.unpack_from(buf, pos)
        crc, sys_flag = head[2], head[7]
        body = RECORD_HEAD.size + (HOST_V6 if sys_flag & BORNHOST_V6_FLAG else HOST_V4).size + STORE_TIMESTAMP.size + (
            HOST_V6 if sys_flag & STOREHOST_V6_FLAG else HOST_V4).size
        if body + RECORD_TAIL.size > total:
            return pos
        body_len = RECORD_TAIL.unpack_from(buf, pos + body)[2]
        body += RECORD_TAIL.size
        if body_len < 0 or body_len > total - body or codec.body_crc(buf[pos + body:pos + body + body_len]) != crc:
            return pos
        pos += total
    return pos


@settings(max_examples=300, deadline=None)
@given(st.lists(stored_messages(), min_size=1, max_size=5), st.data())
def test_crc_walk_stops_where_its_rule_says(messages, data):
    buf = bytearray(b"".join(codec.encode(m) for m in messages))
    for _ in range(data.draw(st.integers(0, 3))):
        at = data.draw(st.integers(0, len(buf) - 1))
        buf[at] ^= data.draw(st.integers(1, 255))
    cut = data.draw(st.integers(0, len(buf)))
    start = data.draw(st.sampled_from([0, len(codec.encode(messages[0]))]))
    torn = bytes(buf[:cut])
    assert crc_walk(torn, start, len(torn), record_layout()) == crc_walk_reference(torn, start, len(torn))
    limit = data.draw(st.integers(0, len(torn)))
    assert crc_walk(torn, start, limit, record_layout()) == crc_walk_reference(torn, start, limit)


def test_crc_walk_passes_every_good_record_and_stops_at_a_changed_body():
    messages = [sample_message(i) for i in range(3)]
    encoded = [codec.encode(codec.StoredMessage(topic=m.topic, queue_id=0, queue_offset=i, phys_offset=0,
                                                born_timestamp=1, born_host=HOST, store_timestamp=2,
                                                store_host=HOST, stored_body=m.body, properties={}))
               for i, m in enumerate(messages)]
    buf = bytearray(b"".join(encoded))
    assert crc_walk(bytes(buf), 0, len(buf), record_layout()) == len(buf)
    buf[len(encoded[0]) + len(encoded[1]) - 40] ^= 1  # the second body's last bytes
    assert crc_walk(bytes(buf), 0, len(buf), record_layout()) == len(encoded[0])
    with pytest.raises(ValueError):
        crc_walk(bytes(buf), -1, len(buf), record_layout())


@st.composite
def index_files(draw) -> tuple[bytes, int, int]:
    """A small index file with any header, slot table and entries: chains that loop, run
    forward, leave the file or carry negative times."""
    slots = draw(st.integers(1, 6))
    entries = draw(st.integers(2, 12))
    count = draw(st.integers(0, entries))
    begin = draw(st.sampled_from([0, 1_700_000_000_000, -5000]))
    header = INDEX_HEADER.pack(begin, begin, 0, 0, slots, count)
    table = b"".join(INDEX_SLOT.pack(draw(st.integers(-1, entries + 1))) for _ in range(slots))
    rows = b"".join(INDEX_ENTRY.pack(draw(st.integers(-3, 9)), number, draw(st.integers(-2, 4)),
                                     draw(st.integers(-1, entries + 1))) for number in range(entries))
    return header + table + rows, slots, entries


@settings(max_examples=300, deadline=None)
@given(index_files())
def test_reachable_entries_are_those_select_yields(tmp_path_factory, drawn):
    data, slots, entries = drawn
    path = tmp_path_factory.mktemp("index") / "00000000000000000000"
    path.write_bytes(data)
    f = IndexFile(path, slots, entries, writable=False)
    try:
        readable = entries - 1  # select reads entry numbers up to index_count: past the file it fails
        hashes = {f.entry(n)[0] for n in range(1, min(f.index_count, readable) + 1)}
        if f.index_count <= readable:
            expected = {phys for h in hashes for phys in f.select(h, 0, ANY_TIME)}
            numbers = f.reachable()
            assert set(numbers.tolist()) == expected
            assert f.entries_numbered(numbers)["phys_offset"].tolist() == numbers.tolist()
    finally:
        f.close()


@st.composite
def put_index_files(draw) -> tuple[IndexFile, list[tuple[str, int, int]]]:
    """An index file written by put_many, its chains as put, then maybe a few of its numbers
    changed: (slot or entry field, which one, the new value)."""
    slots, entries = draw(st.integers(1, 6)), draw(st.integers(2, 14))
    hashes = draw(st.lists(st.integers(0, 2**31 - 1), max_size=entries - 1))  # as index_key_hash gives
    begin = draw(st.sampled_from([0, 1_700_000_000_000]))
    fields = st.sampled_from(["slot", "key_hash", "time_diff", "prev_index"])
    changes = draw(st.lists(st.tuples(fields, st.integers(0, 20), st.integers(-3, entries + 1)), max_size=2))
    return slots, entries, hashes, begin, changes


@settings(max_examples=300, deadline=None)
@given(put_index_files(), st.integers(1, 4))
def test_chains_as_put_are_reached_whole(tmp_path_factory, drawn, window):
    """The check counts every entry reachable without the walk only when the chains are as put
    built them: then the walk reaches every counted entry."""
    slots, entries, hashes, begin, changes = drawn
    path = tmp_path_factory.mktemp("index") / "00000000000000000000"
    f = IndexFile(path, slots, entries, writable=True, create=True)
    count = len(hashes)
    f.put_many(np.array(hashes, dtype=np.int64), np.arange(count, dtype=np.int64) * 100,
               begin + np.arange(count, dtype=np.int64) * 1500)
    f.close()
    for name, which, value in changes:
        if name == "slot":
            _patch(path, INDEX_HEADER.size + which % slots * INDEX_SLOT.size, value.to_bytes(4, "big", signed=True))
        elif count:
            at = _entry_at_of(slots, 1 + which % count) + field_offset(INDEX_ENTRY_FIELDS, name)
            _patch(path, at, value.to_bytes(4, "big", signed=True))
    f = IndexFile(path, slots, entries, writable=False)
    try:
        as_put = f.chains_as_put(window)
        event("as put" if as_put else "changed chains")
        assert as_put or changes
        if as_put:
            assert np.count_nonzero(f.reachable_flags()[: count + 1]) == count
    finally:
        f.close()


def _entry_at_of(slots: int, number: int) -> int:
    return INDEX_HEADER.size + slots * INDEX_SLOT.size + number * INDEX_ENTRY.size


def test_index_reachable_refuses_a_geometry_that_does_not_fit():
    layout = (40, 4, 40 + 4 * 4, 20, 0, 4, 12, 16)
    with pytest.raises(ValueError):
        index_reachable(bytes(40 + 4 * 4), layout, 8, 1, 0)
    with pytest.raises(ValueError):
        index_reachable(bytes(100), layout, 0, 1, 0)
    assert index_reachable(bytes(40 + 4 * 4 + 20 * 3), layout, 4, 1000, 0) == bytes(3)
