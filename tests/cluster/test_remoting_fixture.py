"""The remoting client against a real RocketMQ 4.9.8 name server and broker, answers compared with
RocketMQ's own mqadmin. One cluster per session; each test uses its own topic names."""

from __future__ import annotations

import asyncio
import re
import time
import uuid

import orjson
import pytest

from cluster.remoting.broker import BrokerAdmin
from cluster.remoting.client import ClientOptions, RemotingClient
from cluster.remoting.codes import RequestCode, ResponseCode, SerializeType
from cluster.remoting.command import RESPONSE_FLAG, request
from cluster.remoting.errors import ResponseError
from cluster.remoting.fastjson import loads_fastjson
from cluster.remoting.frame import FRAME_LENGTH, decode_frame, encode_frame
from cluster.remoting.header_json import decode_json_header
from cluster.remoting.lookups import query_by_key, query_by_unique_key
from cluster.remoting.namesrv import NameServerAdmin, TopicNotFound
from tests.cluster.mqadmin_tables import cluster_list, consumer_progress_rows
from tests.cluster.rocketmq_fixture import FAST_DELAY_LEVELS, RocketMQFixture

BROKER = "127.0.0.1:10911"


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def with_admins(rocketmq: RocketMQFixture, body, serialize_type: SerializeType = SerializeType.JSON):
    async def main():
        options = ClientOptions(socket_factory=rocketmq.socket_factory, serialize_type=serialize_type)
        async with RemotingClient(options) as client:
            return await body(NameServerAdmin(client, [rocketmq.namesrv]), BrokerAdmin(client))

    return asyncio.run(main())


async def eventually(attempt, deadline_s: float = 30.0):
    """Retry `attempt` (an async callable) until it returns something truthy or the deadline passes."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            result = await attempt()
        except ResponseError:
            result = None
        if result or time.monotonic() > deadline:
            return result
        await asyncio.sleep(0.2)


def capture_exchange(rocketmq: RocketMQFixture, address: str, frame: bytes) -> bytes:
    """Send one frame over a plain socket and return the answer's bytes exactly as they arrived."""
    with rocketmq.connect_raw(address) as sock:
        sock.sendall(frame)
        data = b""
        while len(data) < FRAME_LENGTH.size or len(data) < FRAME_LENGTH.size + int.from_bytes(data[:4], "big"):
            chunk = sock.recv(65536)
            assert chunk, "connection closed before the whole answer arrived"
            data += chunk
    return data


# ---------------------------------------------------------------- bytes captured from the real servers

def test_json_frames_from_the_name_server_decode_and_re_encode_to_the_same_bytes(rocketmq):
    sent = request(RequestCode.GET_BROKER_CLUSTER_INFO)
    sent.opaque = 4242
    captured = capture_exchange(rocketmq, rocketmq.namesrv, encode_frame(sent))
    answer = decode_frame(captured)
    assert captured[4] == SerializeType.JSON and answer.serialize_type == SerializeType.JSON
    assert answer.is_response and answer.opaque == 4242 and answer.code == ResponseCode.SUCCESS
    header_len = int.from_bytes(captured[4:8], "big") & 0xFFFFFF
    header_bytes = captured[8 : 8 + header_len]
    assert decode_json_header(header_bytes).code == answer.code
    assert orjson.loads(header_bytes)["flag"] == RESPONSE_FLAG
    assert decode_frame(encode_frame(answer)) == answer
    assert encode_frame(answer) == captured  # fastjson's header form, byte for byte
    assert b"brokerAddrs" in answer.body and BROKER in loads_fastjson(answer.body)["brokerAddrTable"][
        "broker-a"]["brokerAddrs"].values()


@pytest.mark.parametrize("topic_exists", [True, False])
def test_binary_frames_from_the_name_server_re_encode_to_the_same_bytes(rocketmq, topic_exists):
    topic = "TBW102" if topic_exists else unique("NoSuchTopic")  # TBW102: the broker's default topic
    sent = request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    sent.serialize_type, sent.opaque = SerializeType.ROCKETMQ, 77
    captured = capture_exchange(rocketmq, rocketmq.namesrv, encode_frame(sent))
    answer = decode_frame(captured)
    assert captured[4] == SerializeType.ROCKETMQ and answer.opaque == 77 and answer.is_response
    assert encode_frame(answer) == captured
    if topic_exists:
        assert answer.code == ResponseCode.SUCCESS and loads_fastjson(answer.body)["queueDatas"]
    else:
        assert answer.code == ResponseCode.TOPIC_NOT_EXIST and topic in answer.remark


def test_binary_frames_from_the_broker_re_encode_to_the_same_bytes(rocketmq):
    sent = request(RequestCode.GET_BROKER_RUNTIME_INFO)
    sent.serialize_type = SerializeType.ROCKETMQ
    captured = capture_exchange(rocketmq, BROKER, encode_frame(sent))
    answer = decode_frame(captured)
    assert answer.code == ResponseCode.SUCCESS and encode_frame(answer) == captured
    assert "brokerVersionDesc" in loads_fastjson(answer.body)["table"]


# ---------------------------------------------------------------- admin calls against mqadmin

@pytest.mark.parametrize("serialize_type", list(SerializeType))
def test_cluster_info_and_runtime_info_match_cluster_list(rocketmq, serialize_type):
    async def body(namesrv: NameServerAdmin, broker: BrokerAdmin):
        info = await namesrv.broker_cluster_info()
        versions = {addr: (await broker.runtime_info(addr))["brokerVersionDesc"]
                    for data in info.brokers.values() for addr in data.addresses.values()}
        return info, versions

    info, versions = with_admins(rocketmq, body, serialize_type)
    ours = sorted((data.cluster, name, broker_id, addr, versions[addr])
                  for name, data in info.brokers.items() for broker_id, addr in data.addresses.items())
    assert ours == cluster_list(rocketmq.mqadmin("clusterList"))
    assert info.clusters == {"DefaultCluster": ["broker-a"]}
    assert info.brokers["broker-a"].master_address == BROKER


def test_topic_route_list_and_configs_match_mqadmin(rocketmq):
    topic = unique("RouteTopic")
    rocketmq.mqadmin("updateTopic", "-t", topic, "-c", "DefaultCluster", "-r", "3", "-w", "5")

    async def body(namesrv: NameServerAdmin, broker: BrokerAdmin):
        route = await eventually(lambda: namesrv.topic_route(topic))
        return route, await namesrv.topic_list(), await broker.topic_configs(BROKER)

    route, topics, configs = with_admins(rocketmq, body)
    printed = rocketmq.mqadmin("topicRoute", "-t", topic)
    theirs = loads_fastjson(printed[printed.index("{") : printed.rindex("}") + 1])
    assert [(q.broker_name, q.read_queues, q.write_queues, q.perm, q.topic_sys_flag) for q in route.queues] == [
        (q["brokerName"], q["readQueueNums"], q["writeQueueNums"], q["perm"], q["topicSysFlag"])
        for q in theirs["queueDatas"]]
    assert [(b.cluster, b.broker_name, b.addresses) for b in route.brokers] == [
        (b["cluster"], b["brokerName"], {int(k): v for k, v in b["brokerAddrs"].items()})
        for b in theirs["brokerDatas"]]
    assert topic in topics
    listed = {line.strip() for line in rocketmq.mqadmin("topicList").splitlines()}
    assert topic in listed and set(topics) <= listed | {""}
    assert (configs[topic].read_queues, configs[topic].write_queues) == (3, 5)


def test_an_unknown_topic_has_no_route(rocketmq):
    async def body(namesrv: NameServerAdmin, broker: BrokerAdmin):
        with pytest.raises(TopicNotFound) as missing:
            await namesrv.topic_route(unique("Missing"))
        return missing.value.response_code

    assert with_admins(rocketmq, body) == ResponseCode.TOPIC_NOT_EXIST


def query_msg_by_id_fields(text: str) -> dict[str, str]:
    return dict(m.groups() for m in re.finditer(r"^([A-Z][A-Za-z ]+):\s+(.*)$", text, re.MULTILINE))


def test_view_message_by_id_matches_query_msg_by_id(rocketmq):
    topic, keys = unique("ViewTopic"), unique("view")
    sent = rocketmq.produce(topic, 3, keys)

    async def body(namesrv: NameServerAdmin, broker: BrokerAdmin):
        return [await broker.view_message_by_id(line["offsetMsgId"]) for line in sent]

    messages = with_admins(rocketmq, body)
    for index, (line, message) in enumerate(zip(sent, messages, strict=True)):
        assert message.offset_msg_id == line["offsetMsgId"] and message.unique_key == line["msgId"]
        assert message.topic == topic and message.keys == [f"{keys}-{index}"]
        assert message.body == f"hello {index}".encode()
        theirs = query_msg_by_id_fields(rocketmq.mqadmin("queryMsgById", "-i", line["offsetMsgId"]))
        assert theirs["Topic"] == topic and theirs["Keys"] == f"[{keys}-{index}]" and theirs["Tags"] == "[TagA]"
        assert int(theirs["Queue ID"]) == message.queue_id == int(line["queueId"])
        assert int(theirs["Queue Offset"]) == message.queue_offset
        assert int(theirs["CommitLog Offset"]) == message.phys_offset
        assert int(theirs["Reconsume Times"]) == message.reconsume_times
        assert int(theirs["System Flag"]) == message.sys_flag
        assert theirs["Store Host"].lstrip("/") == str(message.store_host)
        assert theirs["Born Host"].lstrip("/") == str(message.born_host)
        assert f"UNIQ_KEY={message.unique_key}" in theirs["Properties"]


def test_broker_config_matches_get_broker_config(rocketmq):
    settings = with_admins(rocketmq, lambda namesrv, broker: broker.broker_config(BROKER))
    printed = rocketmq.mqadmin("getBrokerConfig", "-b", BROKER)
    theirs = dict((key.strip(), value) for key, _, value in
                  (line.partition("=  ") for line in printed.splitlines() if "=  " in line))
    assert settings == theirs
    assert settings["messageDelayLevel"] == FAST_DELAY_LEVELS and settings["brokerName"] == "broker-a"


def test_view_message_at_a_bad_offset_is_an_error(rocketmq):
    async def body(namesrv: NameServerAdmin, broker: BrokerAdmin):
        with pytest.raises(ResponseError) as refused:
            await broker.view_message(BROKER, 10**12)
        return refused.value

    error = with_admins(rocketmq, body)
    assert error.response_code != ResponseCode.SUCCESS and error.address == BROKER


def query_msg_by_key_rows(text: str) -> set[tuple[str, int, int]]:
    rows = set()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and re.fullmatch(r"[0-9A-F]{32}", parts[0]):
            rows.add((parts[0], int(parts[1]), int(parts[2])))
    return rows


def test_query_by_key_matches_query_msg_by_key(rocketmq):
    topic, keys = unique("KeyTopic"), unique("key")
    sent = rocketmq.produce(topic, 4, keys)
    wanted = f"{keys}-2"

    async def body(namesrv: NameServerAdmin, broker: BrokerAdmin):
        found = await eventually(lambda: _found(query_by_key(namesrv, broker, topic, wanted)))
        missing = await query_by_key(namesrv, broker, topic, unique("absent"))
        by_unique = await broker.query_message(BROKER, topic, sent[1]["msgId"], unique_key=True)
        copies = await query_by_unique_key(namesrv, broker, topic, sent[3]["msgId"])
        return found, missing, by_unique, copies

    found, missing, by_unique, copies = with_admins(rocketmq, body)
    assert found.complete and [m.keys for m in found.messages] == [[wanted]]
    assert found.messages[0].offset_msg_id == sent[2]["offsetMsgId"]
    # mqadmin prints a message's unique key (the msgId a producer is given) in its "Message ID" column.
    ours = {(m.unique_key, m.queue_id, m.queue_offset) for m in found.messages}
    assert ours == query_msg_by_key_rows(rocketmq.mqadmin("queryMsgByKey", "-t", topic, "-k", wanted))
    assert missing.messages == [] and missing.complete
    assert [m.unique_key for m in by_unique.messages] == [sent[1]["msgId"]]
    assert by_unique.index_last_update_ms > 0
    assert [m.offset_msg_id for m in copies.messages] == [sent[3]["offsetMsgId"]] and copies.complete


async def _found(lookup):
    result = await lookup
    return result if result.messages else None


def test_consume_stats_match_consumer_progress(rocketmq):
    topic, group = unique("StatsTopic"), unique("StatsGroup")
    rocketmq.produce(topic, 6, unique("stats"))
    rocketmq.run("consume", group, topic, "6", "60")

    async def body(namesrv: NameServerAdmin, broker: BrokerAdmin):
        async def consumed_all():
            stats = await broker.consume_stats(BROKER, group)
            done = sum(p.consumer_offset for (t, _, _), p in stats.queues.items() if t == topic)
            return stats if done == 6 else None

        return await eventually(consumed_all)

    stats = with_admins(rocketmq, body)  # object keys in the body: {{"brokerName":...,"queueId":...}:{...}}
    ours = {key: (p.broker_offset, p.consumer_offset) for key, p in stats.queues.items()}
    assert ours == consumer_progress_rows(rocketmq.mqadmin("consumerProgress", "-g", group))
    assert topic in {t for t, _, _ in ours} and {t for t, _, _ in ours} <= {topic, f"%RETRY%{group}"}
    assert all(p.lag == 0 for (t, _, _), p in stats.queues.items() if t == topic)
