"""The compiled record loops against the pure-Python codec they must agree with byte for byte."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from store.broker.metadata import TopicConfig
from store.broker.record_builder import NewMessage, RecordBuilder
from store.clock import FakeClock
from store.errors import InvalidMessageError
from store.format import codec
from store.format.codec import StoredMessage
from store.format.delay_levels import DelayLevels
from store.format.hosts import HostAddress
from store.format.ids import UniqueKeyFactory, decode_unique_key
from store.format.layouts import MAGIC_V1, MAGIC_V2
from store.format.properties import format_properties, java_hashmap_order
from store.format.recordio import (
    SCAN_BLANK,
    SCAN_END,
    SCAN_FULL,
    SCAN_SLOW,
    crc32,
    encode_run,
    record_layout,
    scan_records,
)
from store.projections.dispatch import BatchScanner
from tests.store.test_roundtrips import INT32, INT64, hosts, stored_messages

STORE_HOST = HostAddress.parse("10.1.2.3:10911")


def item_of(msg: StoredMessage) -> tuple:
    """The encode_run item of a message, as RecordBuilder makes them (with a prepared transaction
    offset only when it has one, as a transaction's commit)."""
    topic = msg.topic.encode()
    props = msg.properties_text().encode()
    magic = msg.magic if len(topic) <= codec.MAX_TOPIC_BYTES_V1 else MAGIC_V2
    sys_flag = msg.sys_flag & ~0x30
    if msg.born_host.is_ipv6:
        sys_flag |= codec.BORNHOST_V6_FLAG
    if msg.store_host.is_ipv6:
        sys_flag |= codec.STOREHOST_V6_FLAG
    size = codec.encoded_size(len(msg.stored_body), len(topic), len(props), msg.born_host.is_ipv6,
                              msg.store_host.is_ipv6, magic)
    item = (size, topic, msg.queue_id, msg.flag, sys_flag, msg.born_timestamp, msg.born_host.address,
            msg.born_host.port, msg.reconsume_times, msg.stored_body, props, magic)
    return item + (msg.prepared_transaction_offset,) if msg.prepared_transaction_offset else item


def encode_compiled(messages: list[StoredMessage], seg_base: int = 0) -> bytes:
    items = [item_of(m) for m in messages]
    queue_offsets = np.array([m.queue_offset for m in messages], dtype=np.int64)
    phys = np.zeros(len(items), dtype=np.int64)
    out = bytearray(sum(i[0] for i in items))
    host = messages[0].store_host
    count, written = encode_run(out, 0, len(out) + 8, record_layout(), items, 0, queue_offsets, phys, seg_base,
                                messages[0].store_timestamp, host.address, host.port)
    assert count == len(items) and written == len(out)
    assert phys.tolist() == [seg_base + sum(i[0] for i in items[:k]) for k in range(len(items))]
    return bytes(out)


@settings(max_examples=300, deadline=None)
@given(stored_messages())
def test_encode_run_writes_what_the_python_codec_writes(msg):
    msg.properties_trailing_separator = False
    msg.phys_offset = 0
    compiled = encode_compiled([msg])
    assert compiled == codec.encode_fields(
        msg.queue_id, msg.flag, msg.queue_offset, 0, msg.sys_flag, msg.born_timestamp, msg.born_host,
        msg.store_timestamp, msg.store_host, msg.reconsume_times, msg.prepared_transaction_offset, msg.stored_body,
        msg.topic.encode(), msg.properties_text().encode(), msg.magic)


def test_encode_run_stops_where_a_blank_would_not_fit_and_rejects_bad_items():
    msg = StoredMessage(topic="T", queue_id=0, queue_offset=0, phys_offset=0, born_timestamp=1,
                        born_host=STORE_HOST, store_timestamp=2, store_host=STORE_HOST, stored_body=b"x" * 100)
    item = item_of(msg)
    size = item[0]
    offsets = np.zeros(3, dtype=np.int64)
    phys = np.zeros(3, dtype=np.int64)
    out = bytearray(4 * size)
    args = (record_layout(), [item] * 3, 0, offsets, phys, 1000, 5, STORE_HOST.address, STORE_HOST.port)
    # a segment with room for two records and a BLANK, but not a third
    assert encode_run(out, 0, 2 * size + 8 + size - 1, *args) == (2, 2 * size)
    # the first record of an empty segment may end exactly at its end
    assert encode_run(out, 0, size, *args) == (1, size)
    # the output buffer is full
    assert encode_run(bytearray(size + 1), 0, 10 * size, *args) == (1, size)
    with pytest.raises(ValueError, match="declared size"):
        encode_run(out, 0, 10 * size, record_layout(), [(size + 1, *item[1:])], 0, offsets, phys, 0, 5,
                   STORE_HOST.address, STORE_HOST.port)
    with pytest.raises(TypeError):
        encode_run(out, 0, 10 * size, record_layout(), [item[:5]], 0, offsets, phys, 0, 5, STORE_HOST.address,
                   STORE_HOST.port)
    with pytest.raises(ValueError):
        encode_run(out, 0, 10 * size, record_layout(), [item] * 3, 0, offsets[:1], phys, 0, 5,
                   STORE_HOST.address, STORE_HOST.port)


# -- scanning for dispatch -------------------------------------------------------------------
property_names = st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "CLUSTER", "X"])
property_values = st.one_of(
    st.text(st.sampled_from("ab Z9-+ é漢😀\u07ff\uffff"), max_size=12),
    st.sampled_from(["3", "-1", "+2", "0", "18", "99", "1234567890", "abc", " 4"]),
)


@st.composite
def dispatch_records(draw):
    topic = draw(st.one_of(st.text(st.sampled_from("abcXYZ019_-%|"), min_size=1, max_size=140),
                           st.sampled_from(["SCHEDULE_TOPIC_XXXX", "Tópico", "話題😀"])))
    pairs = draw(st.lists(st.tuples(property_names, property_values), max_size=6))
    text = "\x02".join(f"{n}\x01{v}" for n, v in pairs)
    text += draw(st.sampled_from(["", "\x02", "\x02\x02ab", "\x02\x01x", "\x02q\x01"]))
    magic = MAGIC_V2 if len(topic.encode()) > 127 else draw(st.sampled_from([MAGIC_V1, MAGIC_V2]))
    return StoredMessage(
        topic=topic, queue_id=draw(st.integers(0, 7)), queue_offset=draw(st.integers(0, 2**40)),
        phys_offset=draw(st.integers(0, 2**40)), born_timestamp=draw(INT64), born_host=draw(hosts),
        store_timestamp=draw(st.integers(0, 2**42)), store_host=draw(hosts),
        stored_body=draw(st.binary(max_size=50)), flag=draw(INT32),
        sys_flag=draw(st.sampled_from([0, 0x4, 0x8, 0xC, 0x1, 0x2])), magic=magic,
        properties={"__raw__": text},
    )


def raw_encode(msg: StoredMessage) -> bytes:
    """Encode with the properties text exactly as drawn (duplicates and odd chunks included)."""
    text = msg.properties.pop("__raw__")
    return codec.encode_fields(msg.queue_id, msg.flag, msg.queue_offset, msg.phys_offset, msg.sys_flag,
                               msg.born_timestamp, msg.born_host, msg.store_timestamp, msg.store_host,
                               msg.reconsume_times, 0, msg.stored_body, msg.topic.encode(), text.encode(),
                               msg.magic)


def scan_compiled(buf: bytes) -> BatchScanner:
    """Scan like Dispatcher.scan: compiled, with the Python decoder for records it declines."""
    scanner = BatchScanner()
    pos = 0
    while pos < len(buf):
        status, pos = scanner.scan(buf, pos, len(buf), 1 << 20)
        if status == SCAN_SLOW:
            view = codec.decode_for_dispatch(buf, pos)
            scanner.add_decoded(view)
            pos += view.size
    return scanner


def scan_reference(buf: bytes) -> BatchScanner:
    scanner = BatchScanner()
    pos = 0
    while pos < len(buf):
        view = codec.decode_for_dispatch(buf, pos)
        scanner.add_decoded(view)
        pos += view.size
    return scanner


def comparable(scanner: BatchScanner) -> tuple[list, list]:
    batch = scanner.batch()
    records = [(*row[:6], batch.topic(row[6]), *row[7:]) for row in batch.records.tolist()]
    return records, batch.keys.tolist()


@settings(max_examples=300, deadline=None)
@given(st.lists(dispatch_records(), min_size=1, max_size=6))
def test_scanner_reads_what_the_python_decoder_reads(records):
    buf = b"".join(raw_encode(r) for r in records)
    assert comparable(scan_compiled(buf)) == comparable(scan_reference(buf))


def test_the_scanner_leaves_text_that_is_not_utf8_to_the_python_decoder():
    good = codec.encode(StoredMessage(topic="T", queue_id=0, queue_offset=0, phys_offset=0, born_timestamp=1,
                                      born_host=STORE_HOST, store_timestamp=2, store_host=STORE_HOST,
                                      stored_body=b"b", properties={"KEYS": "k\u00e9y"}))
    for bad in (b"\xc3\x28", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf4\x90\x80\x80", b"\xc3"):
        at = good.index("k\u00e9y".encode())
        record = good[:at] + bad + good[at + len(bad):]  # same length: 'k' 0xC3 0xA9 'y' is 4 bytes
        record = record[:len(good)]
        assert scan_records(record, 0, len(record), record_layout(), 10, {}, [])[:2] == (SCAN_SLOW, 0)
    assert scan_records(good, 0, len(good), record_layout(), 10, {}, [])[:2] == (SCAN_END, len(good))


def test_scanner_statuses():
    msgs = [StoredMessage(topic="T", queue_id=0, queue_offset=i, phys_offset=0, born_timestamp=1,
                          born_host=STORE_HOST, store_timestamp=2, store_host=STORE_HOST, stored_body=b"b",
                          properties={"KEYS": "k1 k2", "UNIQ_KEY": f"U{i}"}) for i in range(3)]
    data = b"".join(codec.encode(m) for m in msgs)
    size = len(data) // 3
    ids, names = {}, []
    status, pos, records, keys = scan_records(data, 0, len(data), record_layout(), 10, ids, names)
    assert (status, pos, len(records) // 48, len(keys) // 8, names) == (SCAN_END, len(data), 3, 9, [b"T"])
    assert scan_records(data, 0, len(data), record_layout(), 2, ids, names)[:2] == (SCAN_FULL, 2 * size)
    blank = codec.encode_blank(64) + bytes(56)
    assert scan_records(data + blank, 0, len(data) + 64, record_layout(), 10, ids, names)[:2] == (SCAN_BLANK,
                                                                                               len(data))
    corrupt = bytearray(data)
    corrupt[size + 4] ^= 0xFF  # the second record's magic
    assert scan_records(bytes(corrupt), 0, len(data), record_layout(), 10, ids, names)[:2] == (SCAN_SLOW, size)
    torn = data[: 2 * size + 30]
    assert scan_records(torn, 0, len(torn), record_layout(), 10, ids, names)[:2] == (SCAN_SLOW, 2 * size)
    with pytest.raises(codec.CorruptRecordError):
        scan_compiled(torn)


# -- building records ------------------------------------------------------------------------
def builder(clock=None) -> RecordBuilder:
    clock = clock or FakeClock(1_700_000_000_000)
    b = RecordBuilder(STORE_HOST, "DefaultCluster", DelayLevels(), lambda name: TopicConfig(name, queues=4),
                      4096, 1 << 20, UniqueKeyFactory(STORE_HOST, clock, pid=7, class_loader_hash=9))
    for topic in KNOWN_TOPICS:  # the compiled builder only takes topics the Python one has seen
        b.build(NewMessage(topic=topic, body=b""), 0)
    return b


KNOWN_TOPICS = ("TopicA", "t" * 127)
key_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=8)
new_messages = st.builds(
    NewMessage,
    topic=st.sampled_from([*KNOWN_TOPICS, "TopicB", "bad topic", ""]),
    body=st.one_of(st.binary(max_size=64), st.just(bytearray(b"ba")), st.just(b"x" * 5000)),
    tags=st.one_of(st.none(), key_text),
    keys=st.one_of(st.lists(key_text, max_size=3), st.tuples(key_text)),
    properties=st.one_of(st.just({}), st.dictionaries(st.sampled_from(["a", "b"]), key_text, max_size=2)),
    queue_id=st.one_of(st.none(), st.integers(0, 4), st.integers(-2, 2**31 + 1)),
    born_timestamp=st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
    born_host=st.one_of(st.none(), st.just("[::1]:9")),
    flag=st.one_of(INT32, st.just(2**40)),
    delay_level=st.sampled_from([0, 0, 0, 3]),
    unique_key=st.one_of(key_text, st.just("U\x01")),
    reconsume_times=st.integers(0, 3),
    compress=st.sampled_from([False, False, True]),
)


def build_in_python(b: RecordBuilder, m: NewMessage):
    try:
        return b.build(m, 123)
    except InvalidMessageError as exc:
        return str(exc)


def build_many(b: RecordBuilder, messages: list[NewMessage]):
    try:
        return b.build_many(messages, 123)
    except InvalidMessageError as exc:
        return str(exc)


@settings(max_examples=400, deadline=None)
@given(new_messages)
def test_compiled_builder_builds_what_python_builds(m):
    assume(m.unique_key)  # a created key differs between two builders; see the next test
    python, compiled = builder(), builder()
    expected = build_in_python(python, m)
    assert build_many(compiled, [m]) == (expected if isinstance(expected, str) else [expected])


def test_compiled_builder_creates_unique_keys_in_rocketmq_layout():
    b = builder()
    b.build = None  # every message below takes the compiled path
    built = b.build_many([NewMessage(topic="TopicA", body=b"x", queue_id=0) for _ in range(3)], 1)
    keys = [unique for _, _, unique in built]
    counters = [decode_unique_key(k).counter for k in keys]
    assert counters == [counters[0], counters[0] + 1, counters[0] + 2]
    item = built[0][0]
    values = {"UNIQ_KEY": keys[0], "CLUSTER": "DefaultCluster"}
    assert item[10] == format_properties({n: values[n] for n in java_hashmap_order(values)}).encode()


def test_compiled_builder_takes_turns_over_the_queues_for_a_message_without_a_queue_id():
    """The REST API's messages name no queue: they stay on the compiled path, round robin as in Python."""
    compiled, python = builder(), builder()
    compiled.build = None  # every message below takes the compiled path
    messages = [NewMessage(topic="TopicA", body=b"x", tags="T", unique_key=f"K{i}") for i in range(6)]
    built = compiled.build_many(messages, 1)
    queues = [item[2] for item, _, _ in built]
    assert queues == [(queues[0] + i) % 4 for i in range(6)]
    assert built == [python.build(m, 1) for m in messages]


def test_assign_queue_offsets_numbers_each_queue_from_the_table_or_its_end():
    from store.format.recordio import assign_queue_offsets

    def planned(topic: bytes, queue_id: int):
        return ((0, topic, queue_id), topic.decode(), "u")

    table = {(b"A", 0): 7}
    asked = []

    def initial(topic, queue_id):
        asked.append((topic, queue_id))
        return 40

    batch = [planned(b"A", 0), planned(b"B", 1), planned(b"A", 0), planned(b"B", 1), planned(b"A", 1)]
    offsets = np.empty(len(batch), dtype=np.int64)
    advanced = assign_queue_offsets(batch, table, initial, offsets)
    assert offsets.tolist() == [7, 40, 8, 41, 40]
    assert advanced == {(b"A", 0): 9, (b"B", 1): 42, (b"A", 1): 41}
    assert table == {(b"A", 0): 7}  # the caller keeps the new entries once the records are written
    assert asked == [(b"B", 1), (b"A", 1)]
    with pytest.raises(TypeError):
        assign_queue_offsets([("not a plan",)], table, initial, offsets)
    with pytest.raises(ValueError):
        assign_queue_offsets(batch, table, initial, offsets[:2])
    with pytest.raises(ZeroDivisionError):
        assign_queue_offsets([planned(b"C", 0)], table, lambda t, q: 1 // 0, offsets)


def test_index_put_refuses_a_geometry_that_does_not_fit_the_buffer():
    from store.format.recordio import index_put

    keys = np.array([5], dtype=np.int64)
    layout = (40, 4, 40 + 4 * 4, 20, 0, 4, 12, 16)
    buf = bytearray(40 + 4 * 4 + 20 * 3)
    assert index_put(buf, layout, 4, 3, 1, 0, 0, keys, keys, keys)[:3] == (1, 2, 1)
    assert index_put(buf, layout, 4, 3, 2, 0, 0, keys, keys, keys)[:3] == (1, 3, 0)  # chains to entry 1
    assert index_put(buf, layout, 4, 3, 3, 0, 0, keys, keys, keys)[:2] == (0, 3)  # full
    with pytest.raises(ValueError):
        index_put(buf, layout, 4, 30, 1, 0, 0, keys, keys, keys)
    with pytest.raises(ValueError):
        index_put(buf, layout, 0, 3, 1, 0, 0, keys, keys, keys)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=3000), st.integers(0, 15), st.integers(0, 2**32 - 1))
def test_the_body_crc_is_zlibs(data, skip, value):
    """The encoders' CRC (carry-less multiplication where the processor has it) is zlib.crc32,
    for any length, alignment and running value."""
    view = memoryview(data)[skip:]
    assert crc32(view, value) == zlib.crc32(view, value)
    assert crc32(view) == zlib.crc32(view)


def test_the_body_crc_is_zlibs_on_every_length_around_the_folding_sizes():
    data = bytes(range(256)) * 20
    for n in [*range(0, 200), 1023, 1024, 1025, 4095, 4096]:
        assert crc32(data[:n]) == zlib.crc32(data[:n]), n


def test_index_put_keeps_a_negative_hash_inside_the_slot_table():
    """Hashes from index_key_hash are never negative; one that is still lands in a slot (its
    remainder taken as the reachability walk takes it), not before the table in the header."""
    from store.format.recordio import index_put

    layout = (40, 4, 40 + 4 * 4, 20, 0, 4, 12, 16)
    buf = bytearray(40 + 4 * 4 + 20 * 3)
    header = bytes(buf[:40])
    assert index_put(buf, layout, 4, 3, 1, 0, 0, np.array([-3], dtype=np.int64), np.array([9], dtype=np.int64),
                     np.array([0], dtype=np.int64))[:3] == (1, 2, 1)
    assert bytes(buf[:40]) == header
    assert int.from_bytes(buf[40 + 4 * (-3 % 4) : 40 + 4 * (-3 % 4) + 4], "big") == 1
