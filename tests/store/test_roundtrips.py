"""Acceptance 5: Hypothesis round-trips for the codec, the ids and the index."""

from __future__ import annotations

import ipaddress

from hypothesis import given, settings
from hypothesis import strategies as st

from store.clock import FakeClock
from store.format import codec, ids
from store.format.hosts import HostAddress
from store.format.javahash import index_key_hash, java_string_hash
from store.format.layouts import MAGIC_V1, MAGIC_V2
from store.projections.index import IndexService, index_key

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
PORTS = st.integers(0, 2**31 - 1)
hosts = st.one_of(
    st.builds(HostAddress, st.binary(min_size=4, max_size=4), PORTS),
    st.builds(HostAddress, st.binary(min_size=16, max_size=16), PORTS),
)
topic_chars = st.sampled_from("abcXYZ019_-%|")
prop_text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), min_size=1,
                    max_size=20)


@st.composite
def stored_messages(draw):
    magic = draw(st.sampled_from([MAGIC_V1, MAGIC_V2]))
    max_topic = 127 if magic == MAGIC_V1 else 300
    return codec.StoredMessage(
        topic=draw(st.text(topic_chars, min_size=1, max_size=max_topic)),
        queue_id=draw(INT32), queue_offset=draw(INT64), phys_offset=draw(INT64),
        born_timestamp=draw(INT64), born_host=draw(hosts), store_timestamp=draw(INT64),
        store_host=draw(hosts), stored_body=draw(st.binary(max_size=300)),
        properties=draw(st.dictionaries(prop_text, prop_text, max_size=6)),
        flag=draw(INT32), sys_flag=draw(st.integers(0, 0x7FF).map(lambda f: f & ~0x30)),
        reconsume_times=draw(INT32), prepared_transaction_offset=draw(INT64),
        properties_trailing_separator=draw(st.booleans()), magic=magic,
    )


@settings(max_examples=300, deadline=None)
@given(stored_messages())
def test_codec_round_trip(msg):
    data = codec.encode(msg)
    decoded = codec.decode(data, 0)
    assert decoded.size == len(data)
    for name in ("topic", "queue_id", "queue_offset", "phys_offset", "born_timestamp", "born_host",
                 "store_timestamp", "store_host", "stored_body", "properties", "flag",
                 "reconsume_times", "prepared_transaction_offset"):
        assert getattr(decoded, name) == getattr(msg, name), name
    assert decoded.properties_trailing_separator == (msg.properties_trailing_separator and bool(msg.properties))
    assert decoded.sys_flag & ~0x30 == msg.sys_flag
    assert codec.encode(decoded) == data


@settings(max_examples=200, deadline=None)
@given(stored_messages(), st.integers(0, 400))
def test_any_truncation_is_detected(msg, cut):
    data = codec.encode(msg)
    cut = min(cut, len(data) - 1)
    try:
        codec.decode(data[:cut], 0)
    except codec.CorruptRecordError:
        return
    raise AssertionError("a truncated record decoded")


@given(hosts, st.integers(0, 2**63 - 1))
def test_offset_msg_id_round_trip(host, phys):
    msg_id = ids.create_offset_msg_id(host, phys)
    assert len(msg_id) == (32 if not host.is_ipv6 else 56)
    assert ids.decode_offset_msg_id(msg_id) == (host, phys)
    assert ids.decode_offset_msg_id(msg_id.lower()) == (host, phys)


@given(st.ip_addresses(), st.integers(0, 0xFFFF), st.integers(0, 0xFFFFFFFF),
       st.integers(1_600_000_000_000, 1_900_000_000_000), st.integers(1, 70_000))
def test_unique_key_round_trip(ip, pid, loader_hash, now, count):
    clock = FakeClock(now)
    factory = ids.UniqueKeyFactory(HostAddress(ip.packed, 0), clock, pid=pid, class_loader_hash=loader_hash,
                                   utc=True)
    for _ in range(count % 3):
        factory.create()
    key = factory.create()
    parts = ids.decode_unique_key(key)
    assert ipaddress.ip_address(parts.ip) == ip
    assert (parts.pid, parts.class_loader_hash, parts.counter) == (pid, loader_hash, count % 3)
    assert parts.ms_since_month_start == now - ids.month_start_ms(now, utc=True)
    assert ids.nearly_time_ms(key, now + 1, utc=True) == now


@given(st.text(max_size=40))
def test_java_hash_matches_the_definition(text):
    units = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (h * 31 + int.from_bytes(units[i : i + 2], "big")) % 2**32
    assert java_string_hash(text) == (h - 2**32 if h >= 2**31 else h)


keys_strategy = st.lists(
    st.tuples(st.sampled_from(["TopicA", "TopicB"]), st.lists(st.text("abcdefgh", min_size=1, max_size=3),
                                                            min_size=1, max_size=3)),
    min_size=1, max_size=60,
)


@settings(max_examples=100, deadline=None)
@given(keys_strategy, st.integers(1, 7), st.integers(2, 9))
def test_index_against_a_dict_model(tmp_path_factory, records, slots, entries):
    directory = tmp_path_factory.mktemp("index")
    clock = FakeClock(1_700_000_000_000)
    index = IndexService(directory, slots, entries, clock, writable=True)
    model: dict[tuple[str, str], list[int]] = {}
    keys_at: dict[int, tuple[str, list[str]]] = {}
    phys = 0
    for topic, keys in records:
        store_time = clock.advance(700)
        index.put_keys(topic, keys, phys, store_time)
        keys_at[phys] = (topic, keys)
        for key in keys:
            if phys not in model.setdefault((topic, key), []):
                model[(topic, key)].append(phys)
        phys += 100
    try:
        for (topic, key), expected in model.items():
            candidates = list(index.query(topic, key))
            real = [p for p in candidates if keys_at[p][0] == topic and key in keys_at[p][1]]
            assert real == expected[::-1], (topic, key)
            wanted_hash = index_key_hash(index_key(topic, key))
            for p in candidates:  # any extra candidate is a true hash collision, never noise
                cand_topic, cand_keys = keys_at[p]
                assert wanted_hash in {index_key_hash(index_key(cand_topic, k)) for k in cand_keys}
    finally:
        index.close()
