"""Admin calls against scripted servers: name server fail-over, bodies that are not what they
should be, and lookups across brokers when one broker does not answer."""

from __future__ import annotations

import asyncio
import contextlib
import socket

import pytest

from cluster.remoting.broker import CONSOLE_GROUP, BrokerAdmin, TopicNotOnBroker, decode_records
from cluster.remoting.client import ClientOptions, RemotingClient
from cluster.remoting.codes import RequestCode, ResponseCode, version_name
from cluster.remoting.command import RemotingCommand, response_to
from cluster.remoting.errors import CodecError, ResponseError
from cluster.remoting.lookups import query_by_key, query_by_unique_key
from cluster.remoting.models import QueueStats, Subscription, SubscriptionGroup
from cluster.remoting.namesrv import NameServerAdmin, parse_namesrv_addresses
from store.format import codec
from store.format.hosts import HostAddress
from tests.cluster.fake_server import FakeServer, Peer


def free_address() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


def answering(bodies: dict[int, bytes], codes: dict[int, int] | None = None, ext: dict[str, str] | None = None):
    async def handler(peer: Peer, cmd: RemotingCommand) -> None:
        answer = response_to(cmd, (codes or {}).get(cmd.code, ResponseCode.SUCCESS))
        answer.body = bodies.get(cmd.code, b"")
        answer.ext_fields = dict(ext or {})
        await peer.send(answer)

    return handler


@contextlib.asynccontextmanager
async def server_and_client(handler, **options):
    async with FakeServer(handler) as server, RemotingClient(ClientOptions(**options)) as client:
        yield server, client


def record(topic: str, keys: str, phys_offset: int, unique_key: str) -> bytes:
    host = HostAddress.parse("127.0.0.1:10911")
    return codec.encode(codec.StoredMessage(
        topic=topic, queue_id=1, queue_offset=phys_offset // 100, phys_offset=phys_offset, born_timestamp=1,
        born_host=host, store_timestamp=phys_offset, store_host=host, stored_body=b"body",
        properties={"KEYS": keys, "UNIQ_KEY": unique_key}))


CLUSTER_INFO = (b'{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"127.0.0.1:10911"},"brokerName":"broker-a",'
                b'"cluster":"C"}},"clusterAddrTable":{"C":["broker-a"]}}')


def test_name_servers_fail_over_in_order():
    async def main():
        handler = answering({RequestCode.GET_BROKER_CLUSTER_INFO: CLUSTER_INFO})
        async with server_and_client(handler, connect_timeout_s=2) as (server, client):
            namesrv = NameServerAdmin(client, parse_namesrv_addresses(f" {free_address()} ; {server.address};"))
            return await namesrv.broker_cluster_info()

    info = asyncio.run(main())
    assert info.brokers["broker-a"].addresses == {0: "127.0.0.1:10911"} and info.clusters == {"C": ["broker-a"]}


@pytest.mark.parametrize("body", [
    b"[1, 2]",
    b"{{{",
    b'{"brokerAddrTable":{"b":{"brokerAddrs":{"x":"127.0.0.1:1"}}}}',
    b'{"brokerAddrTable":[]}',
    b'{"clusterAddrTable":{"C":"broker-a"}}',
])
def test_cluster_info_bodies_that_are_wrong_raise_codec_errors(body):
    async def main():
        async with server_and_client(answering({RequestCode.GET_BROKER_CLUSTER_INFO: body})) as (server, client):
            await NameServerAdmin(client, [server.address]).broker_cluster_info()

    with pytest.raises(CodecError):
        asyncio.run(main())


@pytest.mark.parametrize(("code", "body"), [
    (RequestCode.GET_ROUTEINFO_BY_TOPIC, b'{"queueDatas":[{"brokerName":"b","readQueueNums":"many"}]}'),
    (RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, b'{"topicList":"T"}'),
])
def test_route_and_list_bodies_that_are_wrong_raise_codec_errors(code, body):
    async def main():
        async with FakeServer(answering({code: body})) as server, RemotingClient() as client:
            namesrv = NameServerAdmin(client, [server.address])
            if code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
                await namesrv.topic_route("T")
            else:
                await namesrv.topic_list()

    with pytest.raises(CodecError):
        asyncio.run(main())


def test_broker_bodies_that_are_wrong_raise_codec_errors():
    async def main():
        bodies = {RequestCode.GET_BROKER_RUNTIME_INFO: b'{"table":[1]}',
                  RequestCode.VIEW_MESSAGE_BY_ID: b"\x00\x00\x00\x10not a record",
                  RequestCode.GET_ALL_TOPIC_CONFIG: b'{"topicConfigTable":{"T":{"perm":true}}}',
                  RequestCode.GET_CONSUME_STATS: b'{"offsetTable":{"T":{"brokerOffset":1}}}'}
        async with FakeServer(answering(bodies)) as server, RemotingClient() as client:
            broker = BrokerAdmin(client)
            for call in (broker.runtime_info(server.address), broker.view_message(server.address, 0),
                         broker.topic_configs(server.address)):
                with pytest.raises(CodecError):
                    await call

    asyncio.run(main())


def test_records_laid_end_to_end_decode_and_a_torn_one_is_an_error():
    body = record("T", "k1", 100, "U1") + record("T", "k1 k2", 200, "U2")
    assert [m.keys for m in decode_records(body)] == [["k1"], ["k1", "k2"]]
    with pytest.raises(CodecError):
        decode_records(body[:-3])


def test_a_lookup_merges_brokers_and_names_the_one_that_did_not_answer():
    async def main():
        found = record("T", "k1", 100, "U1") + record("T", "other", 200, "U2") + record("T2", "k1", 300, "U3") \
            + record("T", "x k1", 400, "U1")
        broker_a = answering({RequestCode.QUERY_MESSAGE: found},
                             ext={"indexLastUpdateTimestamp": "5", "indexLastUpdatePhyoffset": "6"})
        async with FakeServer(broker_a) as a:
            dead = free_address()
            route = (b'{"brokerDatas":[{"brokerAddrs":{0:"%s"},"brokerName":"broker-a","cluster":"C"},'
                     b'{"brokerAddrs":{"0":"%s"},"brokerName":"broker-b","cluster":"C"}],"queueDatas":[]}'
                     % (a.address.encode(), dead.encode()))
            routes = answering({RequestCode.GET_ROUTEINFO_BY_TOPIC: route})
            async with server_and_client(routes, connect_timeout_s=2) as (namesrv_server, client):
                namesrv = NameServerAdmin(client, [namesrv_server.address])
                by_key = await query_by_key(namesrv, BrokerAdmin(client), "T", "k1")
                by_unique = await query_by_unique_key(namesrv, BrokerAdmin(client), "T", "U1")
                asked = [cmd for cmd in a.received if cmd.code == RequestCode.QUERY_MESSAGE]
        return by_key, by_unique, asked

    by_key, by_unique, asked = asyncio.run(main())
    assert [m.phys_offset for m in by_key.messages] == [100, 400]  # collisions and other topics dropped
    assert not by_key.complete and list(by_key.failed_brokers) == ["broker-b"]
    assert "cannot connect" in by_key.failed_brokers["broker-b"]
    assert [m.phys_offset for m in by_unique.messages] == [100, 400]
    assert asked[0].ext_fields["key"] == "k1" and "_UNIQUE_KEY_QUERY" not in asked[0].ext_fields
    assert asked[1].ext_fields["_UNIQUE_KEY_QUERY"] == "true"


def test_no_match_is_an_empty_answer():
    async def main():
        broker = answering({}, codes={RequestCode.QUERY_MESSAGE: ResponseCode.QUERY_NOT_FOUND},
                           ext={"indexLastUpdateTimestamp": "0", "indexLastUpdatePhyoffset": "0"})
        async with FakeServer(broker) as server, RemotingClient() as client:
            return await BrokerAdmin(client).query_message(server.address, "T", "nothing")

    assert asyncio.run(main()).messages == []


QUEUE_KEY = b'{"brokerName":"broker-a","queueId":%d,"topic":"T"}'


def call_broker(call, bodies: dict[int, bytes], codes: dict[int, int] | None = None,
                ext: dict[str, str] | None = None):
    """Run `call(broker, address)` against a scripted broker; returns (result, requests it received)."""
    async def main():
        async with FakeServer(answering(bodies, codes, ext)) as server, RemotingClient() as client:
            result = await call(BrokerAdmin(client), server.address)
            return result, server.received

    return asyncio.run(main())


STATS_CALLS = {
    RequestCode.GET_TOPIC_STATS_INFO: lambda broker, address: broker.topic_stats(address, "T"),
    RequestCode.GET_CONSUMER_CONNECTION_LIST: lambda broker, address: broker.consumer_connections(address, "G"),
    RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: lambda broker, address: broker.subscription_groups(address),
    RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: lambda broker, address: broker.topics_consumed_by(address, "T"),
}


@pytest.mark.parametrize(("code", "body"), [
    (RequestCode.GET_TOPIC_STATS_INFO, b"[]"),
    (RequestCode.GET_TOPIC_STATS_INFO, b'{"offsetTable":[]}'),
    (RequestCode.GET_TOPIC_STATS_INFO, b'{"offsetTable":{"T":{"minOffset":0}}}'),
    (RequestCode.GET_TOPIC_STATS_INFO, b'{"offsetTable":{{"brokerName":"b","topic":"T"}:{"minOffset":0}}}'),
    (RequestCode.GET_TOPIC_STATS_INFO, b'{"offsetTable":{{"brokerName":"b","queueId":"0","topic":"T"}:{}}}'),
    (RequestCode.GET_TOPIC_STATS_INFO, b'{"offsetTable":{{"brokerName":7,"queueId":0,"topic":"T"}:{}}}'),
    (RequestCode.GET_TOPIC_STATS_INFO, b'{"offsetTable":{%s:{"maxOffset":"9"}}}' % (QUEUE_KEY % 0)),
    (RequestCode.GET_TOPIC_STATS_INFO, b'{"offsetTable":{%s:[1]}}' % (QUEUE_KEY % 0)),
    (RequestCode.GET_CONSUMER_CONNECTION_LIST, b'{"connectionSet":{}}'),
    (RequestCode.GET_CONSUMER_CONNECTION_LIST, b'{"connectionSet":[{"clientId":1}]}'),
    (RequestCode.GET_CONSUMER_CONNECTION_LIST, b'{"connectionSet":[{"version":true}]}'),
    (RequestCode.GET_CONSUMER_CONNECTION_LIST, b'{"connectionSet":["c"]}'),
    (RequestCode.GET_CONSUMER_CONNECTION_LIST, b'{"subscriptionTable":{"T":{"tagsSet":"TagA"}}}'),
    (RequestCode.GET_CONSUMER_CONNECTION_LIST, b'{"subscriptionTable":{"T":{"tagsSet":[1]}}}'),
    (RequestCode.GET_CONSUMER_CONNECTION_LIST, b'{"subscriptionTable":{"T":{"subString":null}}}'),
    (RequestCode.GET_CONSUMER_CONNECTION_LIST, b'{"subscriptionTable":["T"]}'),
    (RequestCode.GET_CONSUMER_CONNECTION_LIST, b'{"messageModel":1}'),
    (RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, b'{"subscriptionGroupTable":["G"]}'),
    (RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, b'{"subscriptionGroupTable":{"G":{"consumeEnable":"yes"}}}'),
    (RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, b'{"subscriptionGroupTable":{"G":{"retryMaxTimes":1.5}}}'),
    (RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, b'{"subscriptionGroupTable":{"G":"G"}}'),
    (RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, b"\xff\xfe"),
    (RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, b'{"groupList":"G"}'),
    (RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, b'{"groupList":[1]}'),
    (RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, b"{{{"),
])
def test_stats_and_group_bodies_that_are_wrong_raise_codec_errors(code, body):
    with pytest.raises(CodecError):
        call_broker(STATS_CALLS[code], {code: body})


def test_stats_and_group_bodies_read_as_the_broker_writes_them():
    stats_body = b'{"offsetTable":{%s:{"lastUpdateTimestamp":0,"maxOffset":0,"minOffset":0},' \
                 b'%s:{"lastUpdateTimestamp":1700000000000,"maxOffset":9,"minOffset":2}}}' % (QUEUE_KEY % 1,
                                                                                              QUEUE_KEY % 0)
    connection_body = (b'{"connectionSet":[{"clientAddr":"10.0.0.2:5","clientId":"b@2","language":"GO","version":412},'
                       b'{"clientAddr":"10.0.0.1:5","clientId":"a@1","language":"JAVA","version":9999}],'
                       b'"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","consumeType":"CONSUME_ACTIVELY",'
                       b'"messageModel":"BROADCASTING","subscriptionTable":{"T":{"classFilterMode":false,'
                       b'"codeSet":[1,2],"expressionType":"TAG","subString":"B || A","subVersion":1,'
                       b'"tagsSet":["B","A"],"topic":"T"}}}')
    groups_body = (b'{"dataVersion":{"counter":1,"timestamp":1},"subscriptionGroupTable":{"G":{"brokerId":1,'
                   b'"consumeBroadcastEnable":false,"consumeEnable":false,"groupName":"G","retryMaxTimes":3,'
                   b'"retryQueueNums":2,"whichBrokerWhenConsumeSlowly":0},"H":{}}}')
    bodies = {RequestCode.GET_TOPIC_STATS_INFO: stats_body, RequestCode.GET_CONSUMER_CONNECTION_LIST: connection_body,
              RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: groups_body,
              RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: b'{"groupList":["Z","A"]}'}

    async def calls(broker, address):
        return [await call(broker, address) for call in STATS_CALLS.values()]

    (stats, connections, groups, consumed_by), _ = call_broker(calls, bodies)
    assert list(stats.queues) == [("T", "broker-a", 0), ("T", "broker-a", 1)]
    assert stats.queues[("T", "broker-a", 0)] == QueueStats(2, 9, 1700000000000)
    assert [(c.client_id, c.language, c.version_name) for c in connections.clients] == [
        ("a@1", "JAVA", "9999"), ("b@2", "GO", "V5_0_0_SNAPSHOT")]
    assert connections.subscriptions["T"] == Subscription("T", "B || A", "TAG", ["A", "B"])
    assert (connections.consume_type, connections.message_model) == ("CONSUME_ACTIVELY", "BROADCASTING")
    assert groups["G"] == SubscriptionGroup("G", False, False, 2, 3, 1, 0)
    assert groups["H"] == SubscriptionGroup("H", True, True, 1, 16, 0, 1)  # RocketMQ's defaults
    assert consumed_by == ["A", "Z"]


@pytest.mark.parametrize(("ordinal", "name"), [
    (409, "V4_9_8"), (408, "V4_9_8_SNAPSHOT"), (212, "V4_0_0_SNAPSHOT"), (213, "V4_0_0"), (401, "V4_9_4"),
    (413, "V5_0_0"), (453, "V5_2_0"), (611, "V5_9_9"), (211, "211"), (612, "612"), (-1, "-1")])
def test_version_ordinals_are_named_as_rocketmq_names_them(ordinal, name):
    assert version_name(ordinal) == name


def test_answer_codes_that_mean_nothing_there():
    not_online = {RequestCode.GET_CONSUMER_CONNECTION_LIST: ResponseCode.CONSUMER_NOT_ONLINE,
                  RequestCode.QUERY_CONSUMER_OFFSET: ResponseCode.QUERY_NOT_FOUND,
                  RequestCode.GET_TOPIC_STATS_INFO: ResponseCode.TOPIC_NOT_EXIST}

    async def calls(broker, address):
        with pytest.raises(TopicNotOnBroker) as missing:
            await broker.topic_stats(address, "T")
        return (await broker.consumer_connections(address, "G"), await broker.consumer_offset(address, "G", "T", 0),
                missing.value.response_code)

    assert call_broker(calls, {}, not_online)[0] == (None, None, ResponseCode.TOPIC_NOT_EXIST)


@pytest.mark.parametrize("code", [ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_OFFSET_MOVED])
def test_a_pull_that_finds_nothing_is_none_and_asks_without_commit_or_suspend(code):
    found, received = call_broker(lambda broker, address: broker.pull_one(address, "T", 3, 7), {},
                                  {RequestCode.PULL_MESSAGE: code})
    assert found is None
    fields = received[0].ext_fields
    assert (fields["consumerGroup"], fields["topic"], fields["queueId"], fields["queueOffset"]) == (
        CONSOLE_GROUP, "T", "3", "7")
    assert fields["maxMsgNums"] == "1" and fields["subscription"] == "*" and fields["expressionType"] == "TAG"
    assert int(fields["sysFlag"]) & 0b11 == 0  # neither commit offset nor suspend


def pulled_record(queue_offset: int) -> bytes:
    host = HostAddress.parse("127.0.0.1:10911")
    return codec.encode(codec.StoredMessage(
        topic="T", queue_id=3, queue_offset=queue_offset, phys_offset=0, born_timestamp=1, born_host=host,
        store_timestamp=2, store_host=host, stored_body=b"body", properties={"UNIQ_KEY": "U"}))


@pytest.mark.parametrize("body", [pulled_record(8), pulled_record(7) + pulled_record(8), b"", b"\x00\x00\x00\x09x"])
def test_a_pull_answering_other_records_is_a_codec_error(body):
    with pytest.raises(CodecError):
        call_broker(lambda broker, address: broker.pull_one(address, "T", 3, 7), {RequestCode.PULL_MESSAGE: body})


def test_a_pull_answering_the_record_returns_it_and_a_busy_slave_is_an_error():
    found, _ = call_broker(lambda broker, address: broker.pull_one(address, "T", 3, 7),
                           {RequestCode.PULL_MESSAGE: pulled_record(7)})
    assert (found.queue_offset, found.body, found.unique_key) == (7, b"body", "U")
    with pytest.raises(ResponseError) as retry:
        call_broker(lambda broker, address: broker.pull_one(address, "T", 3, 7), {},
                    {RequestCode.PULL_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY})
    assert retry.value.response_code == ResponseCode.PULL_RETRY_IMMEDIATELY


@pytest.mark.parametrize("ext", [{}, {"offset": "x"}, {"offset": ""}])
def test_offset_answers_without_a_readable_offset_are_codec_errors(ext):
    async def calls(broker, address):
        for call in (broker.min_offset(address, "T", 0), broker.max_offset(address, "T", 0),
                     broker.offset_by_time(address, "T", 0, 5), broker.consumer_offset(address, "G", "T", 0)):
            with pytest.raises(CodecError):
                await call
        return True

    assert call_broker(calls, {}, ext=ext)[0]


def test_offset_answers_read_the_offset_field_and_requests_name_the_queue():
    async def calls(broker, address):
        return [await broker.min_offset(address, "T", 2), await broker.max_offset(address, "T", 2),
                await broker.offset_by_time(address, "T", 2, 1234), await broker.consumer_offset(address, "G", "T", 2)]

    offsets, received = call_broker(calls, {}, ext={"offset": "42"})
    assert offsets == [42, 42, 42, 42]
    assert [cmd.code for cmd in received] == [RequestCode.GET_MIN_OFFSET, RequestCode.GET_MAX_OFFSET,
                                              RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, RequestCode.QUERY_CONSUMER_OFFSET]
    assert received[2].ext_fields == {"topic": "T", "queueId": "2", "timestamp": "1234"}
    assert received[3].ext_fields == {"consumerGroup": "G", "topic": "T", "queueId": "2"}


def test_topics_of_a_cluster_read_the_topic_list_and_refuse_a_wrong_one():
    async def main(body):
        async with FakeServer(answering({RequestCode.GET_TOPICS_BY_CLUSTER: body})) as server, \
                RemotingClient() as client:
            topics = await NameServerAdmin(client, [server.address]).topics_of_cluster("C")
            return topics, server.received[0].ext_fields

    assert asyncio.run(main(b'{"topicList":["b","a"]}')) == (["a", "b"], {"cluster": "C"})
    with pytest.raises(CodecError):
        asyncio.run(main(b'{"topicList":{"a":1}}'))


def test_offset_resets_and_broker_config_writes_send_what_the_broker_reads():
    reset_body = (b'{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:3,'
                  b'{"brokerName":"broker-a","queueId":1,"topic":"T"}:0}}')

    async def calls(broker, address):
        await broker.update_consumer_offset(address, "G", "T", 1, 7)
        set_to = await broker.reset_offset_by_time(address, "G", "T", -1)
        await broker.update_broker_config(address, {"messageDelayLevel": "1s 5s"})
        with pytest.raises(ValueError):
            await broker.update_broker_config(address, {"messageDelayLevel": "1s\nbrokerPermission=0"})
        return set_to

    set_to, received = call_broker(calls, {RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: reset_body})
    assert set_to == {0: 3, 1: 0}
    assert [cmd.code for cmd in received] == [RequestCode.UPDATE_CONSUMER_OFFSET,
                                              RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                                              RequestCode.UPDATE_BROKER_CONFIG]
    assert received[0].ext_fields == {"consumerGroup": "G", "topic": "T", "queueId": "1", "commitOffset": "7"}
    assert received[1].ext_fields == {"topic": "T", "group": "G", "timestamp": "-1", "isForce": "true"}
    assert received[2].body == b"messageDelayLevel=1s 5s\n"


def test_a_reset_answer_with_an_offset_that_is_not_a_number_is_a_codec_error():
    body = b'{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:"x"}}'
    with pytest.raises(CodecError):
        call_broker(lambda broker, address: broker.reset_offset_by_time(address, "G", "T", 0),
                    {RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: body})
