"""RocketMQ 4.9.8 client message trace (RMQ_SYS_TRACE_TOPIC) decoded from the store a real broker
wrote, checked against what RocketMQ itself decoded and what its clients reported."""

from __future__ import annotations

import contextlib
import zlib
from collections import Counter, defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store.broker.client_trace import client_trace_of
from store.broker.trace_pack import PACK_TAG
from store.format import topics
from store.format.client_trace import (
    CONTEXT_END,
    FIELD_SEPARATOR,
    ClientTraceContext,
    ClientTraceError,
    TraceType,
    TransactionState,
    decode_trace_body,
    is_client_trace_record,
    parse_context,
    record_contexts,
)
from store.format.codec import StoredMessage
from store.format.hosts import HostAddress
from store.message_store import MessageStore, NewMessage, StoreConfig
from tests.conftest import BROKER_DELAY_LEVELS, BROKER_GEOMETRY

SUB_TYPES = (TraceType.SUB_BEFORE, TraceType.SUB_AFTER)
SUCCESS_OUTCOMES = {"CONSUME_SUCCESS", "SUCCESS"}  # concurrent and orderly listeners


@pytest.fixture
def broker_store(golden_broker_dir):
    config = StoreConfig(geometry=BROKER_GEOMETRY, delay_levels=BROKER_DELAY_LEVELS)
    with MessageStore.open(golden_broker_dir, config, read_only=True) as store:
        yield store


def all_trace_records(store) -> list[StoredMessage]:
    return [store.get_by_queue_offset(topics.TRACE_TOPIC, queue_id, offset)
            for queue_id, low, high in store.topics()[topics.TRACE_TOPIC] for offset in range(low, high)]


def all_contexts(store) -> list[ClientTraceContext]:
    return [context for msg in all_trace_records(store) for context in record_contexts(msg)]


def as_trace_view(c: ClientTraceContext) -> dict:
    """What RocketMQ's TraceView shows for a context: a field the type does not carry keeps the
    view's default (empty text, cost 0, success), a Java null is shown as "null". The view's
    storeHost of a consume context is the decoding machine's own address, so it is left out."""
    def shown(value, carried=True):
        return ("null" if value is None else value) if carried else ""
    producer_side = c.type in (TraceType.PUB, TraceType.END_TRANSACTION)
    view = {
        "traceMessageOffsetMsgId": c.record.msg_id, "msgType": c.type.value, "groupName": c.group,
        "msgId": c.msg_id, "offSetMsgId": shown(c.offset_msg_id, c.type is TraceType.PUB),
        "topic": shown(c.topic, producer_side), "tags": shown(c.tags, producer_side), "keys": shown(c.keys),
        "clientHost": c.record.client_host, "timeStamp": c.timestamp, "costTime": c.cost_time or 0,
        "status": "failed" if c.success is False else "success",
    }
    if producer_side:
        view["storeHost"] = c.store_host
    return view


def sorted_views(views: list[dict]) -> list[tuple]:
    return sorted(tuple(sorted(view.items())) for view in views)


def test_every_trace_record_of_the_broker_store_is_client_trace(broker_store):
    records = all_trace_records(broker_store)
    assert len(records) == 27 and all(is_client_trace_record(msg) for msg in records)
    assert any(msg.compressed for msg in records)  # the client zips bodies over 4 KiB
    contexts = all_contexts(broker_store)
    assert Counter(c.type for c in contexts) == {TraceType.SUB_BEFORE: 224, TraceType.SUB_AFTER: 224,
                                                 TraceType.PUB: 69, TraceType.END_TRANSACTION: 4}
    # Each record is keyed by every msgId its contexts name and every keys text they carry.
    for msg in records:
        names = {k for c in record_contexts(msg) for k in [c.msg_id, *c.key_list]}
        assert set(msg.keys) == names


def test_rocketmqs_own_decoded_trace_views_are_reproduced(broker_store, golden_broker_manifest):
    traces = golden_broker_manifest["traces"]
    assert len(traces) == 11
    for entry in traces:
        contexts = client_trace_of(broker_store, entry["msgId"])
        expected = [{k: v for k, v in view.items() if k != "bornTime"} for view in entry["traceViews_decoded"]]
        for view in expected:
            if view["msgType"] in SUB_TYPES:
                del view["storeHost"]
        assert sorted_views([as_trace_view(c) for c in contexts]) == sorted_views(expected), entry["msgId"]
        assert all(c.store_host is None for c in contexts if c.type in SUB_TYPES)
        times = [c.timestamp for c in contexts]
        assert times == sorted(times)


def test_pub_contexts_match_the_sends(broker_store, golden_broker_manifest):
    pubs = {c.msg_id: c for c in all_contexts(broker_store) if c.type is TraceType.PUB}
    sends = golden_broker_manifest["sends"]
    assert len(pubs) == len(sends) == 69  # each send is traced once, a batch send too
    for send in sends:
        pub = pubs[send["result"]["msgId"]]
        assert pub.success is True and (pub.group, pub.region) == (
            "pg-payments" if send["api"] == "sendMessageInTransaction" else "pg-orders", "DefaultRegion")
        if send["api"] == "sendBatch":
            # One Pub for the whole batch: ids joined by commas, no tags or keys of its own.
            assert pub.msg_ids == [m["propertiesAfterSend"]["UNIQ_KEY"] for m in send["messages"]]
            assert pub.offset_msg_id == send["result"]["offsetMsgId"] and (pub.tags, pub.keys) == (None, None)
            assert client_trace_of(broker_store, pub.msg_ids[1])[0].type is TraceType.SUB_BEFORE
            continue
        assert (pub.topic, pub.tags, pub.keys) == (send["topic"], send["tags"], send["keys"])
        transactional = send["api"] == "sendMessageInTransaction"
        assert pub.message_type_name == ("Trans_Msg_Half" if transactional
                                         else "Delay_Msg" if send["delayTimeLevel"] else "Normal_Msg")
        stored = broker_store.get_by_offset_id(pub.offset_msg_id)  # a half message for a transaction
        assert stored.unique_key == pub.msg_id
        assert stored.topic == ("RMQ_SYS_TRANS_HALF_TOPIC" if transactional
                                else topics.SCHEDULE_TOPIC if send["delayTimeLevel"] else send["topic"])
        # The length of the body as sent: compressed by the client when large.
        assert pub.body_length == len(stored.stored_body)
        assert (pub.body_length == send["bodyLength"]) is not stored.compressed
        if not transactional:
            assert pub.offset_msg_id == send["result"]["offsetMsgId"]


def test_every_delivery_has_its_sub_before_and_sub_after(broker_store, golden_broker_manifest):
    consumption = golden_broker_manifest["consumption"]
    deliveries = [(group, d) for group, seen in consumption.items() for d in seen]
    # One SubBefore / SubAfter pair per delivery, no more: retries keep the msgId, and tell
    # themselves apart by their retry times (the delivered copy's reconsume times).
    contexts = all_contexts(broker_store)
    assert sum(1 for c in contexts if c.type is TraceType.SUB_BEFORE) == len(deliveries) == 224
    for msg_id in sorted({d["msgId"] for _, d in deliveries}):
        traced = client_trace_of(broker_store, msg_id)
        before = {c.request_id: c for c in traced if c.type is TraceType.SUB_BEFORE}
        after = {c.request_id: c for c in traced if c.type is TraceType.SUB_AFTER}
        assert before.keys() == after.keys() and len(before) == sum(1 for c in traced if c.type in SUB_TYPES) / 2
        pairs = {(b.group, b.retry_times): (b, after[rid]) for rid, b in before.items()}
        seen_here = [(group, d) for group, d in deliveries if d["msgId"] == msg_id]
        assert sorted(pairs) == sorted((group, d["reconsumeTimes"]) for group, d in seen_here), msg_id
        for group, d in seen_here:
            b, a = pairs[(group, d["reconsumeTimes"])]
            succeeded = d["outcome"] in SUCCESS_OUTCOMES
            assert (a.group, a.msg_id, a.keys, b.keys) == (group, msg_id, d["keys"], d["keys"])
            assert a.success is succeeded and a.consume_result == ("SUCCESS" if succeeded else "FAILED")
            assert b.timestamp <= a.timestamp and abs(a.timestamp - b.timestamp - a.cost_time) <= 1
            started = int(d["properties"].get("CONSUME_START_TIME", 0))  # orderly deliveries have none
            assert not started or b.timestamp <= started <= a.timestamp
            assert b.region is None and b.record.client_host == "127.0.0.1"


def test_end_transaction_contexts_carry_each_answer(broker_store, golden_broker_manifest):
    expected = []
    for event in golden_broker_manifest["transactions"]:
        if event["event"] in ("executeLocalTransaction", "checkLocalTransaction"):
            expected.append((event["transactionId"], event["returned"], event["event"] == "checkLocalTransaction",
                             event["keys"]))
    assert [state for _, state, _, _ in expected] == ["COMMIT_MESSAGE", "ROLLBACK_MESSAGE", "UNKNOW", "COMMIT_MESSAGE"]
    ends = [c for c in all_contexts(broker_store) if c.type is TraceType.END_TRANSACTION]
    assert sorted((c.transaction_id, c.transaction_state.value, c.from_transaction_check, c.keys) for c in ends) == \
        sorted(expected)
    for c in ends:
        assert c.msg_id == c.transaction_id and (c.group, c.topic, c.tags) == ("pg-payments", "Payments", "TagPay")
        assert c.message_type_name == "Trans_msg_Commit" and c.store_host == "127.0.0.1:10911"
    # The unknown answer, then the commit the broker's check got, in time order.
    unknown = [c for c in ends if c.keys == "pay-unknown"][0].msg_id
    states = [c.transaction_state for c in client_trace_of(broker_store, unknown)
              if c.type is TraceType.END_TRANSACTION]
    assert states == [TransactionState.UNKNOWN, TransactionState.COMMIT]


def pub_text(msg_id: str, keys: str = "k", **changes) -> str:
    fields = {"type": "Pub", "ts": "1700000000000", "region": "R", "group": "pg", "topic": "T", "msg_id": msg_id,
              "tags": "null", "keys": keys, "store": "10.0.0.1:10911", "length": "3", "cost": "7", "mtype": "0",
              "offset": "0A00000100002A9F0000000000000000", "ok": "true"}
    fields.update(changes)
    return FIELD_SEPARATOR.join(fields.values())


def test_a_pub_context_is_read_with_its_types():
    [c] = decode_trace_body(pub_text("ID1", keys="a b") + CONTEXT_END)
    assert (c.type, c.msg_id, c.key_list, c.tags, c.timestamp, c.body_length, c.cost_time) == (
        TraceType.PUB, "ID1", ["a", "b"], None, 1_700_000_000_000, 3, 7)
    assert c.success is True and c.message_type_name == "Normal_Msg" and c.record is None
    old = pub_text("ID1", offset="false")  # 13 fields: a client before offsetMsgId was traced
    assert parse_context(old.rsplit(FIELD_SEPARATOR, 1)[0]).offset_msg_id is None


@pytest.mark.parametrize("text", [
    "", "Pub", "Nope\x011", pub_text("X", ts="12x"), pub_text("X", ts="9" * 5000), pub_text("X", cost="2147483648"),
    "SubBefore\x011\x01r\x01g\x01req\x01id\x01-\x01k", "SubAfter\x01req\x01id\x01 1\x01true",
    "EndTransaction\x011\x01r\x01g\x01T\x01id\x01t\x01k\x01h\x012\x01tx\x01MAYBE\x01false",
])
def test_a_malformed_context_raises_the_modules_error(text):
    with pytest.raises(ClientTraceError):
        parse_context(text)
    assert decode_trace_body(text + CONTEXT_END + pub_text("OK") + CONTEXT_END)[0].msg_id == "OK"


TRACE_WORDS = st.sampled_from(["Pub", "SubBefore", "SubAfter", "EndTransaction", "true", "null", "0", "-1",
                               "2147483648", "COMMIT_MESSAGE", "UNKNOW", FIELD_SEPARATOR, CONTEXT_END, "9" * 30])


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_random_bytes_never_break_decoding(body):
    assert all(isinstance(c, ClientTraceContext) for c in decode_trace_body(body))


@settings(max_examples=500, deadline=None)
@given(st.lists(st.one_of(TRACE_WORDS, st.text(max_size=6)), max_size=40).map("".join))
def test_random_text_with_the_separators_raises_only_the_modules_error(text):
    for part in text.split(CONTEXT_END):
        with contextlib.suppress(ClientTraceError):  # anything else fails the test
            parse_context(part)
    decode_trace_body(text)
    decode_trace_body(text.encode("utf-8", errors="surrogatepass"))


SAFE_TEXT = st.text(st.characters(blacklist_characters=[FIELD_SEPARATOR, CONTEXT_END], blacklist_categories=["Cs"]),
                    min_size=1).filter(lambda s: s != "null")


@settings(max_examples=200, deadline=None)
@given(SAFE_TEXT, SAFE_TEXT, st.integers(0, 2**63 - 1), st.integers(-(2**31), 2**31 - 1), st.booleans(),
       st.integers(0, 4))
def test_written_consume_contexts_read_back(msg_id, keys, ts, cost, ok, code):
    before = FIELD_SEPARATOR.join(["SubBefore", str(ts), "null", "cg", "req", msg_id, str(cost), keys])
    after = FIELD_SEPARATOR.join(["SubAfter", "req", msg_id, str(cost), str(ok).lower(), keys, str(code), str(ts),
                                  "cg"])
    b, a = decode_trace_body((before + CONTEXT_END + after + CONTEXT_END).encode("utf-8"))
    assert (b.msg_id, b.keys, b.timestamp, b.retry_times, b.group, b.request_id) == (
        msg_id, keys, ts, cost, "cg", "req")
    assert (a.msg_id, a.keys, a.cost_time, a.success, a.context_code, a.timestamp, a.group, a.position) == (
        msg_id, keys, cost, ok, code, ts, "cg", 1)


def hostile_record(body: bytes, sys_flag: int) -> StoredMessage:
    host = HostAddress(bytes([127, 0, 0, 1]), 10911)
    return StoredMessage(topic=topics.TRACE_TOPIC, queue_id=0, queue_offset=0, phys_offset=0, born_timestamp=0,
                         born_host=host, store_timestamp=0, store_host=host, stored_body=body, sys_flag=sys_flag)


def test_a_record_whose_compressed_body_does_not_inflate_is_skipped():
    for body in (b"Pub\x01not zlib", zlib.compress(pub_text("A").encode())[:-6]):
        msg = hostile_record(body, sys_flag=1)
        assert record_contexts(msg) == []
    assert [c.msg_id for c in record_contexts(hostile_record(zlib.compress(pub_text("A").encode()), 1))] == ["A"]


def test_mqlens_lifecycle_trace_is_not_client_trace(tmp_path):
    with MessageStore.open(tmp_path / "s", StoreConfig(trace=True, flush="sync")) as store:
        put = store.put(NewMessage("Orders", b"hello", tags="TagA", keys=["k1"]))
        store.timeline(put.unique_key)  # writes the pending lifecycle events
        own = all_trace_records(store)
        assert own and not any(is_client_trace_record(msg) for msg in own)
        assert all(record_contexts(msg) == [] for msg in own)
        assert client_trace_of(store, put.unique_key) == []
        # A client trace record beside them, keyed as the client keys it, zipped as a big one is.
        body = (pub_text(put.unique_key, keys="k1") + CONTEXT_END + pub_text("OTHER") + CONTEXT_END).encode()
        store.put(NewMessage(topics.TRACE_TOPIC, body, keys=[put.unique_key, "k1", "OTHER", "k"], compress=True,
                             born_host="10.1.2.3:4567"))
        # The same body under mqlens's own tag is mqlens's, whatever it holds.
        store.put(NewMessage(topics.TRACE_TOPIC, body, tags=PACK_TAG, keys=[put.unique_key]))
        [pub] = client_trace_of(store, put.unique_key)
        assert (pub.type, pub.msg_id, pub.keys, pub.record.client_host) == (TraceType.PUB, put.unique_key, "k1",
                                                                             "10.1.2.3")
        assert store.read(pub.record.phys_offset).unique_key == pub.record.msg_id
        assert client_trace_of(store, "k1") == []  # a key finds the record, but no context has that msgId


def test_a_store_without_the_trace_topic_has_no_client_trace(tmp_path):
    with MessageStore.open(tmp_path / "s", StoreConfig(trace=False, flush="sync")) as store:
        put = store.put(NewMessage("Orders", b"hello"))
        assert topics.TRACE_TOPIC not in store.topics()
        assert client_trace_of(store, put.unique_key) == [] and client_trace_of(store, "") == []


def test_request_ids_pair_deliveries_across_the_store(broker_store):
    by_request: dict[str, list[TraceType]] = defaultdict(list)
    for c in all_contexts(broker_store):
        if c.type in SUB_TYPES:
            by_request[c.request_id].append(c.type)
    assert set(map(tuple, by_request.values())) == {(TraceType.SUB_BEFORE, TraceType.SUB_AFTER)}
