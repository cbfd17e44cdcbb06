"""Admin calls against scripted servers: name server fail-over, bodies that are not what they
should be, and lookups across brokers when one broker does not answer."""

from __future__ import annotations

import asyncio
import contextlib
import socket

import pytest

from cluster.remoting.broker import BrokerAdmin, decode_records
from cluster.remoting.client import ClientOptions, RemotingClient
from cluster.remoting.codes import RequestCode, ResponseCode
from cluster.remoting.command import RemotingCommand, response_to
from cluster.remoting.errors import CodecError
from cluster.remoting.lookups import query_by_key, query_by_unique_key
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
