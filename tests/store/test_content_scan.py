"""The compiled content scan against its pure-Python reference: the same status, position,
record count and hits on any records, needles, windows and damage."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store.format import codec
from store.format.codec import COMPRESSED_FLAG
from store.format.layouts import MAGIC_V1, MAGIC_V2
from store.search.matching import ContentQuery, Matcher
from store.search.scan import (
    KIND_BODY,
    KIND_CANDIDATE,
    KIND_PROPERTY,
    SCAN_BLANK,
    SCAN_END,
    SCAN_FULL,
    SCAN_SLOW,
    WHERE_BODY,
    WHERE_PROPERTIES,
    property_value_find,
    scan_compiled,
    scan_reference,
)
from tests.store.test_roundtrips import stored_messages

EVERYTHING = WHERE_BODY | WHERE_PROPERTIES
ALL_TIME = (-(2**63), 2**63 - 1)
words = st.sampled_from([b"a", b"ab", b"needle", b"\x01", b"\x02", b"KEYS", b"zz", "é".encode()])


def log_of(messages) -> bytes:
    return b"".join(codec.encode(m) for m in messages)


def both(buf, pos=0, limit=None, end=None, window=ALL_TIME, topics=(), needle=b"needle", where=EVERYTHING,
         max_hits=1000):
    limit = len(buf) if limit is None else limit
    end = len(buf) if end is None else end
    args = (buf, pos, limit, end, *window, topics, needle, where, max_hits)
    compiled, reference = scan_compiled(*args), scan_reference(*args)
    assert compiled == reference
    return compiled


def message(body=b"", props=None, topic="TopicA", store_ts=1000, sys_flag=0, magic=MAGIC_V1):
    return codec.StoredMessage(topic=topic, queue_id=0, queue_offset=0, phys_offset=0, born_timestamp=0,
                               born_host=codec.HostAddress(b"\x7f\0\0\x01", 1), store_timestamp=store_ts,
                               store_host=codec.HostAddress(b"\x7f\0\0\x01", 2), stored_body=body,
                               properties=props or {}, sys_flag=sys_flag, magic=magic)


@settings(max_examples=300, deadline=None)
@given(st.lists(stored_messages(), min_size=1, max_size=6), words, st.integers(0, 3), st.integers(1, 5),
       st.booleans())
def test_compiled_agrees_with_the_reference(messages, needle, where, max_hits, regex_mode):
    for m in messages:
        if len(m.stored_body) > 4 and m.store_timestamp % 3 == 0:
            at = m.store_timestamp % len(m.stored_body)
            m.stored_body = m.stored_body[:at] + needle + m.stored_body[at:]
    buf = log_of(messages)
    times = sorted(m.store_timestamp for m in messages)
    topics = (messages[0].topic.encode(),) if messages[-1].queue_id % 2 else ()
    both(buf, window=(times[0], times[len(times) // 2]), topics=topics, needle=None if regex_mode else needle,
         where=where, max_hits=max_hits)
    both(buf, needle=needle, where=where, max_hits=max_hits)


@settings(max_examples=300, deadline=None)
@given(st.lists(stored_messages(), min_size=1, max_size=4), st.data())
def test_damage_and_cut_chunks_agree(messages, data):
    buf = bytearray(log_of(messages))
    for _ in range(data.draw(st.integers(0, 3))):
        buf[data.draw(st.integers(0, len(buf) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(buf)))
    limit = data.draw(st.integers(0, len(buf)))
    pos = data.draw(st.integers(0, 40))
    both(bytes(buf), pos=pos, limit=limit, end=cut, needle=data.draw(words))
    both(bytes(buf), pos=pos, limit=limit, end=cut, needle=None)


def test_finds_a_word_of_the_body_and_says_where():
    buf = log_of([message(b"nothing here"), message(b"the needle is here"), message(b"no")])
    status, pos, records, hits = both(buf)
    assert (status, pos, records) == (SCAN_END, len(buf), 3)
    assert [(h[1], h[2]) for h in hits] == [(KIND_BODY, 4)]
    record_at, _, at, body_at = hits[0][:4]
    assert buf[record_at + body_at + at:][:6] == b"needle"


def test_property_values_match_but_names_and_separators_do_not():
    buf = log_of([message(props={"needle": "x"}), message(props={"a": "b", "c": "has needle"}),
                  message(props={"KEYS": "k1"})])
    hits = both(buf)[3]
    assert [h[1] for h in hits] == [KIND_PROPERTY]
    assert both(buf, needle=b"\x01")[3] == [] and both(buf, needle=b"b\x02c")[3] == []
    assert property_value_find(b"a\x01b\x02c\x01has needle", b"needle") == 10


def test_only_where_asked():
    buf = log_of([message(b"needle", props={"k": "needle"})])
    assert [h[1] for h in both(buf, where=WHERE_BODY)[3]] == [KIND_BODY]
    assert [h[1] for h in both(buf, where=WHERE_PROPERTIES)[3]] == [KIND_PROPERTY]
    assert both(buf, where=0)[3] == []


def test_window_and_topics_filter():
    buf = log_of([message(b"needle", store_ts=t, topic=topic) for t, topic in
                  [(100, "A"), (200, "B"), (300, "A"), (400, "C")]])
    assert len(both(buf, window=(150, 350))[3]) == 2
    assert len(both(buf, topics=(b"A", b"C"))[3]) == 3
    assert len(both(buf, window=(150, 350), topics=(b"A",))[3]) == 1
    assert both(buf, window=(150, 350))[2] == 4  # every record is walked, kept or not


def test_max_hits_stops_after_the_last_hit():
    buf = log_of([message(b"needle")] * 5)
    status, pos, records, hits = both(buf, max_hits=2)
    assert (status, records, len(hits)) == (SCAN_FULL, 2, 2) and pos == hits[1][0] + len(buf) // 5


def test_compressed_bodies_and_regex_mode_are_left_to_the_matcher():
    packed = zlib.compress(b"a needle inside")
    buf = log_of([message(packed, sys_flag=COMPRESSED_FLAG), message(b"plain")])
    hits = both(buf)[3]
    assert [h[1] for h in hits] == [KIND_CANDIDATE]
    match = Matcher(ContentQuery("needle")).match(buf[hits[0][0]:], hits[0])
    assert match.where == "body" and match.snippet == "a needle inside" and match.snippet_at == 2
    assert [h[1] for h in both(buf, needle=None)[3]] == [KIND_CANDIDATE, KIND_CANDIDATE]
    regex = Matcher(ContentQuery(r"pl\w+n", regex=True))
    assert [regex.match(buf[h[0]:], h) is not None for h in both(buf, needle=None)[3]] == [False, True]


def test_a_blank_a_torn_record_and_a_chunk_limit():
    records = log_of([message(b"one"), message(b"needle", magic=MAGIC_V2)])
    blank = codec.encode_blank(64) + bytes(56)
    assert both(records + blank)[:2] == (SCAN_BLANK, len(records))
    first_len = len(codec.encode(message(b"one")))
    assert both(records[:-3])[:3] == (SCAN_SLOW, first_len, 1)
    first = len(codec.encode(message(b"one")))
    status, pos, records_walked, hits = both(records, limit=1)
    assert (status, pos, records_walked, hits) == (SCAN_END, first, 1, [])
    assert both(records, pos=first, limit=first + 1)[3][0][0] == first


def test_bad_arguments_are_refused():
    buf = log_of([message(b"needle")])
    with pytest.raises(ValueError):
        scan_compiled(buf, 0, len(buf), len(buf), *ALL_TIME, (), b"", EVERYTHING, 5)
    with pytest.raises(ValueError):
        scan_compiled(buf, 0, len(buf), len(buf), *ALL_TIME, tuple(b"t" for _ in range(65)), b"x", EVERYTHING, 5)
    with pytest.raises(TypeError):
        scan_compiled(buf, 0, len(buf), len(buf), *ALL_TIME, ("str",), b"x", EVERYTHING, 5)
    with pytest.raises(ValueError):
        scan_compiled(buf, 0, len(buf), len(buf), *ALL_TIME, (), b"x", EVERYTHING, 0)
