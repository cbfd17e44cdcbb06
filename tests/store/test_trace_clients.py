"""The lifecycle trace names the RocketMQ 5 clients: the producer that sent a message, the
consumer that received, acknowledged, failed or postponed each attempt. The client is kept in
the trace only (never in the message record), packed as a name of the record's header; events
written before the field existed, packed or one-event JSON, still read (with no client)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from store.broker.trace import MAX_CLIENT_CHARS, TraceEvent, TraceKind
from store.broker.trace_pack import MAGIC, PACK_TAG, pack, record_events
from store.clock import FakeClock
from store.format import codec, topics
from store.format.hosts import HostAddress
from store.message_store import MessageStore, NewMessage
from tests.store.helpers import small_config
from tests.store.test_trace_packing import trace_records

PRODUCER = "app-host@4242@1@2k4xq9ab"
CONSUMER = "worker-1@77@1@2k4xqa01"
OTHER_CONSUMER = "worker-2@78@1@2k4xqa02"
STORE_HOST = HostAddress.parse("10.0.0.1:10911")
MESSAGE_ID = "01F4A3B2C1D0E9F8A7B6C5D4E3F2A1B0C9"  # a RocketMQ 5 client's message id


def open_store(path, clock) -> MessageStore:
    return MessageStore.open(path, small_config(trace=True), clock=clock)


def kinds_and_clients(store: MessageStore, key: str) -> list[tuple[TraceKind, str | None]]:
    return [(e.kind, e.client) for e in store.timeline(key)]


def test_each_event_names_the_client_that_caused_it(tmp_path):
    clock = FakeClock()
    with open_store(tmp_path, clock) as store:
        sent = store.put(NewMessage("Orders", b"order 1", keys=["o-1"], unique_key=MESSAGE_ID, client=PRODUCER))
        [batched, anonymous] = store.put_many([NewMessage("Orders", b"order 2", client=OTHER_CONSUMER),
                                               NewMessage("Orders", b"order 3")])
        delayed = store.put(NewMessage("Orders", b"later", delay_level=1, client=PRODUCER))
        again = store.put(NewMessage("Orders", b"order 1", unique_key=MESSAGE_ID, client=OTHER_CONSUMER))
        assert again == sent  # a duplicate send: not stored twice, its event names who sent it

        clock.advance(10)
        got = {r.message.unique_key: r for r in store.receive("G", "Orders", 10, 30_000, client=CONSUMER)}
        assert set(got) == {sent.unique_key, batched.unique_key, anonymous.unique_key}
        clock.advance(10)
        new_handle = store.change_invisible("G", got[sent.unique_key].receipt_handle, 60_000, client=CONSUMER)
        clock.advance(10)
        store.nack("G", new_handle, "no stock", client=CONSUMER)
        store.ack("G", got[batched.unique_key].receipt_handle, client=OTHER_CONSUMER)
        store.ack_many("G", [got[anonymous.unique_key].receipt_handle])  # a REST caller: not named

        assert kinds_and_clients(store, sent.unique_key) == [
            (TraceKind.STORED, PRODUCER), (TraceKind.DUPLICATE, OTHER_CONSUMER), (TraceKind.DELIVERED, CONSUMER),
            (TraceKind.INVISIBLE_CHANGED, CONSUMER), (TraceKind.FAILED, CONSUMER)]
        changed = store.timeline(sent.unique_key)[3]
        assert (changed.group, changed.attempt, changed.due_ms) == ("G", 1, changed.at_ms + 60_000)
        assert kinds_and_clients(store, batched.unique_key) == [
            (TraceKind.STORED, OTHER_CONSUMER), (TraceKind.DELIVERED, CONSUMER), (TraceKind.ACKED, OTHER_CONSUMER)]
        assert kinds_and_clients(store, anonymous.unique_key) == [
            (TraceKind.STORED, None), (TraceKind.DELIVERED, CONSUMER), (TraceKind.ACKED, None)]
        assert kinds_and_clients(store, delayed.unique_key) == [(TraceKind.SCHEDULED, PRODUCER)]

        # the client is in the trace only: the message records are as without it
        for put in (sent, batched, delayed):
            record = store.read(put.phys_offset)
            assert PRODUCER not in record.properties_text() and OTHER_CONSUMER not in record.properties_text()
        plain = store.put(NewMessage("Orders", b"order 1", keys=["o-1"], unique_key=MESSAGE_ID[::-1]))
        twin = store.read(plain.phys_offset)
        first = store.read(sent.phys_offset)
        assert set(twin.properties) == set(first.properties) and twin.size == first.size

        store.flush()
        before = {key: store.timeline(key) for key in (sent.unique_key, batched.unique_key)}
    with open_store(tmp_path, clock) as again_open:  # the same after a restart
        assert {key: again_open.timeline(key) for key in before} == before


def test_a_client_name_is_bounded_and_any_text_is_kept(tmp_path):
    clock = FakeClock()
    odd = "tab\there, line\nbreak, 100% + plus \u00e9\u4e2d"
    with open_store(tmp_path, clock) as store:
        long = store.put(NewMessage("Orders", b"x", client="c" * 10_000))
        strange = store.put(NewMessage("Orders", b"y", client=odd))
        empty = store.put(NewMessage("Orders", b"z", client=""))
        [stored] = store.timeline(long.unique_key)
        assert stored.client == "c" * MAX_CLIENT_CHARS
        assert store.timeline(strange.unique_key)[0].client == odd
        assert store.timeline(empty.unique_key)[0].client is None


def test_one_record_names_each_client_once(tmp_path):
    clock = FakeClock()
    with MessageStore.open(tmp_path, small_config(trace=True, flush="async"), clock=clock) as store:
        puts = store.put_many([NewMessage("Orders", b"m%d" % i, client=PRODUCER if i % 2 else CONSUMER)
                               for i in range(50)])
        store.flush()
        [record] = trace_records(store)
        body = record.body.decode()
        assert body.count(PRODUCER) == 1 and body.count(CONSUMER) == 1
        assert [e.client for _, e in record_events(record)] == [PRODUCER if i % 2 else CONSUMER for i in range(50)]
        assert len(puts) == 50


def trace_record(new: NewMessage, phys_offset: int = 4096) -> codec.StoredMessage:
    """The record a store would hold for a packed trace message, without a store."""
    properties = {topics.TAGS: new.tags}
    if new.keys:
        properties[topics.KEYS] = " ".join(new.keys)
    return codec.StoredMessage(topic=new.topic, queue_id=0, queue_offset=0, phys_offset=phys_offset,
                               born_timestamp=0, born_host=STORE_HOST, store_timestamp=0, store_host=STORE_HOST,
                               stored_body=new.body, properties=properties)


TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
NAME = st.one_of(st.none(), TEXT.filter(bool), st.sampled_from(["Orders", "%RETRY%G", "G", PRODUCER, CONSUMER]))
NUMBER = st.one_of(st.none(), st.integers(-(2**62), 2**62))
HOST_PREFIX = "0A00000100002A9F"
OFFSET_IDS = st.one_of(st.none(), TEXT, st.integers(0, 2**63 - 1).map(lambda o: f"{HOST_PREFIX}{o:016X}"))
KEYS = st.one_of(st.none(), st.sampled_from(["K1", "K2", "with space"]), st.text("0123456789ABCDEF", min_size=1))

events = st.builds(
    TraceEvent, st.sampled_from(list(TraceKind)), KEYS, st.one_of(st.none(), st.integers(0, 2**50)), NAME, NUMBER,
    NUMBER, OFFSET_IDS, NAME, NUMBER, NUMBER, NUMBER, st.one_of(st.none(), TEXT), NAME, NAME)


@settings(max_examples=300, deadline=None)
@given(st.lists(events, max_size=40))
def test_packed_events_read_back_as_they_were(written):
    records = pack(written, STORE_HOST)
    assert all(m.tags == PACK_TAG and m.topic == topics.TRACE_TOPIC for m in records)
    read = [event for i, m in enumerate(records) for _, event in record_events(trace_record(m, 4096 * (i + 1)))]
    assert read == written


def test_packed_records_written_before_the_client_field_still_read(tmp_path):
    clock = FakeClock()
    with open_store(tmp_path, clock) as store:
        put = store.put(NewMessage("Orders", b"x"))
        key, base = put.unique_key, clock.now_ms()
        # As the writer laid a record out before the field: nothing past real_topic.
        old_lines = [f"{MAGIC}\t{base}\tOrders\tG\t%25RETRY%25G",
                     f"d\t0\t5\t0\t{put.queue_id}\t{put.queue_offset}\t\t1\t1\t0\t30000",
                     "f\t0\t9\t0\t\t\t\t1\t1\t\t\t=no stock",
                     "y\t0\t10\t2\t0\t0\t\t1\t\t1\t10000\t\t2",
                     "a\t0\t20\t\t\t\t\t1\t2\t\t\t\t\t\t\t7\tfields from a later version"]
        store.put(NewMessage(topics.TRACE_TOPIC, "\n".join(old_lines).encode(), tags=PACK_TAG, keys=[key]))
        # and a one-event JSON record of an even older store, with and without a client
        for event in (TraceEvent(TraceKind.DELIVERED, key, base + 30, "Orders", group="G", attempt=2),
                      TraceEvent(TraceKind.ACKED, key, base + 31, "Orders", group="G", attempt=2, client=CONSUMER)):
            body = json.dumps(event.to_json(), separators=(",", ":")).encode()
            store.put(NewMessage(topics.TRACE_TOPIC, body, tags=event.kind.value, keys=[key]))
        timeline = store.timeline(key)
        assert [(e.kind, e.at_ms - base if e.kind is not TraceKind.STORED else 0, e.client) for e in timeline] == [
            (TraceKind.STORED, 0, None), (TraceKind.DELIVERED, 5, None), (TraceKind.FAILED, 9, None),
            (TraceKind.RETRY, 10, None), (TraceKind.ACKED, 20, None), (TraceKind.DELIVERED, 30, None),
            (TraceKind.ACKED, 31, CONSUMER)]
        delivered, failed, retry = timeline[1:4]
        assert (delivered.topic, delivered.group, delivered.attempt, delivered.due_ms) == (
            "Orders", "G", 1, base + 5 + 30_000)
        assert failed.reason == "no stock" and retry.real_topic == "%RETRY%G" and retry.due_ms == base + 10_010
