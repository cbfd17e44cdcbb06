"""The asyncio client against scripted servers: request ids, timeouts, one-way, callbacks,
dropped connections and reconnects, oversized frames, requests from the server, ACL signing."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import logging
import socket
import struct

import pytest

from cluster.remoting.acl import AclCredentials, signature
from cluster.remoting.client import ClientOptions, RemotingClient
from cluster.remoting.codes import ResponseCode, SerializeType
from cluster.remoting.command import RESPONSE_FLAG, RemotingCommand, request, response_to
from cluster.remoting.connection import RemotingConnection
from cluster.remoting.errors import ConnectFailed, ConnectionLost, RemotingTimeout, ResponseError
from tests.cluster.fake_server import FakeServer, Peer


async def echo(peer: Peer, cmd: RemotingCommand) -> None:
    if not cmd.is_oneway:
        answer = response_to(cmd, ResponseCode.SUCCESS)
        answer.body = cmd.body
        await peer.send(answer)


async def silent(peer: Peer, cmd: RemotingCommand) -> None:
    return None


def test_answers_in_any_order_reach_their_requests():
    held: list[RemotingCommand] = []

    async def answer_in_reverse(peer: Peer, cmd: RemotingCommand) -> None:
        held.append(cmd)
        if len(held) == 3:
            for waiting in reversed(held):
                await echo(peer, waiting)

    async def main():
        async with FakeServer(answer_in_reverse) as server:
            conn = await RemotingConnection.open(server.address)
            answers = await asyncio.gather(*(conn.request(request(11, body=bytes([i])), 5) for i in range(3)))
            assert [a.body for a in answers] == [b"\x00", b"\x01", b"\x02"]
            assert len({cmd.opaque for cmd in server.received}) == 3 and conn.waiting == 0
            await conn.close()

    asyncio.run(main())


def test_a_request_times_out_and_a_late_answer_is_dropped():
    async def main():
        async with FakeServer(silent) as server:
            conn = await RemotingConnection.open(server.address)
            with pytest.raises(RemotingTimeout):
                await conn.request(request(28), 0.05)
            assert conn.waiting == 0
            late = response_to(server.received[0], ResponseCode.SUCCESS)
            await server.peers[0].send(late)
            server.handler = echo
            assert (await conn.request(request(28, body=b"x"), 5)).body == b"x"
            await conn.close()

    asyncio.run(main())


def test_oneway_gets_no_answer_and_the_connection_goes_on():
    async def main():
        single = RemotingClient(ClientOptions(connections_per_address=1))
        async with FakeServer(echo) as server, single as client:
            await client.invoke_oneway(server.address, request(15, {"offset": 3}))
            assert (await client.invoke(server.address, request(14))).code == ResponseCode.SUCCESS
            assert server.received[0].is_oneway and server.received[0].ext_fields == {"offset": "3"}
            assert not server.received[1].is_oneway

    asyncio.run(main())


def test_callbacks_get_the_answer_or_the_error():
    async def drop_second(peer: Peer, cmd: RemotingCommand) -> None:
        if cmd.code == 2:
            peer.close()
        else:
            await echo(peer, cmd)

    async def main():
        outcomes = []
        single = RemotingClient(ClientOptions(connections_per_address=1))
        async with FakeServer(drop_second) as server, single as client:
            first = await client.invoke_with_callback(server.address, request(1, body=b"a"),
                                                      lambda r, e: outcomes.append((r and r.body, e)))
            await first
            second = await client.invoke_with_callback(server.address, request(2),
                                                       lambda r, e: outcomes.append((r, e)))
            await second
        assert outcomes[0] == (b"a", None)
        assert outcomes[1][0] is None and isinstance(outcomes[1][1], ConnectionLost)

    asyncio.run(main())


def test_a_dropped_connection_fails_its_requests_and_the_next_call_reconnects():
    async def drop_first_connection(peer: Peer, cmd: RemotingCommand) -> None:
        if peer is server.peers[0]:
            peer.close()
        else:
            await echo(peer, cmd)

    async def main():
        nonlocal server
        single = RemotingClient(ClientOptions(connections_per_address=1))
        async with FakeServer(drop_first_connection) as server, single as client:
            with pytest.raises(ConnectionLost):
                await client.invoke(server.address, request(106))
            assert client.live_connections(server.address) == 0
            assert (await client.invoke(server.address, request(106, body=b"ok"))).body == b"ok"
            assert len(server.peers) == 2 and client.live_connections(server.address) == 1

    server = None
    asyncio.run(main())


def test_a_server_that_stops_reading_times_the_request_out_while_it_is_still_being_sent():
    """A hung broker whose socket buffers are full: the write waits, and the request's timeout
    covers it; the next call times out as well, and closing drops the unsent bytes instead of
    waiting for them to flush."""

    async def main():
        with socket.create_server(("127.0.0.1", 0)) as never_reads:  # the kernel accepts; nobody reads
            conn = await RemotingConnection.open(f"127.0.0.1:{never_reads.getsockname()[1]}")
            big = request(11, body=bytes(8 * 2**20))  # more than the socket buffers hold
            async with asyncio.timeout(10):  # the test's own bound, so that a regression fails instead of hanging
                with pytest.raises(RemotingTimeout):
                    await conn.request(big, 0.3)
                with pytest.raises(RemotingTimeout):
                    await conn.request(request(28), 0.3)
                assert conn.waiting == 0
                await conn.close()
            assert conn.closed

    asyncio.run(main())


def test_an_oversized_frame_is_refused_before_it_is_read():
    async def announce_a_huge_frame(peer: Peer, cmd: RemotingCommand) -> None:
        await peer.send_raw(struct.pack(">i", 64 * 1024 * 1024))  # and never the bytes

    async def main():
        bounded = RemotingClient(ClientOptions(max_frame_bytes=1024 * 1024))
        async with FakeServer(announce_a_huge_frame) as server, bounded as client:
            with pytest.raises(ConnectionLost, match="refused"):
                await client.invoke(server.address, request(33), timeout_s=30)

    asyncio.run(main())


def test_garbage_from_the_server_closes_the_connection():
    async def garbage(peer: Peer, cmd: RemotingCommand) -> None:
        await peer.send_raw(struct.pack(">iI", 6, (9 << 24) | 2) + b"{}")

    async def main():
        async with FakeServer(garbage) as server:
            conn = await RemotingConnection.open(server.address)
            with pytest.raises(ConnectionLost, match="serialize type"):
                await conn.request(request(1), 30)
            assert conn.closed

    asyncio.run(main())


def test_requests_from_the_server_are_answered_not_supported():
    async def ask_the_client(peer: Peer, cmd: RemotingCommand) -> None:
        if cmd.is_response:
            return
        await peer.send(RemotingCommand(code=307, opaque=99))
        await echo(peer, cmd)

    async def main():
        async with FakeServer(ask_the_client) as server, RemotingClient() as client:
            await client.invoke(server.address, request(34))
            for _ in range(200):
                if len(server.received) == 2:
                    break
                await asyncio.sleep(0.01)
        answer = server.received[1]
        assert answer.is_response and answer.opaque == 99
        assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED

    asyncio.run(main())


def test_response_codes_other_than_success_raise_with_the_remark():
    async def refuse(peer: Peer, cmd: RemotingCommand) -> None:
        await peer.send(response_to(cmd, ResponseCode.NO_PERMISSION, "no permission for code 28"))

    async def main():
        async with FakeServer(refuse) as server, RemotingClient() as client:
            with pytest.raises(ResponseError, match="no permission") as refused:
                await client.invoke_ok(server.address, request(28))
        assert refused.value.response_code == ResponseCode.NO_PERMISSION

    asyncio.run(main())


def test_connect_failures_name_the_address():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = f"127.0.0.1:{probe.getsockname()[1]}"

    async def main():
        async with RemotingClient(ClientOptions(connect_timeout_s=2)) as client:
            with pytest.raises(ConnectFailed, match=free):
                await client.invoke(free, request(106))

    asyncio.run(main())


def test_a_pool_spreads_calls_over_its_connections_and_the_binary_header_is_used_when_chosen():
    async def main():
        async with FakeServer(echo) as server:
            options = ClientOptions(connections_per_address=2, serialize_type=SerializeType.ROCKETMQ)
            async with RemotingClient(options) as client:
                for _ in range(4):
                    await client.invoke(server.address, request(105, {"topic": "T"}))
                assert client.live_connections(server.address) == 2
            assert len(server.peers) == 2
            assert {cmd.serialize_type for cmd in server.received} == {SerializeType.ROCKETMQ}

    asyncio.run(main())


def expected_signature(fields: dict[str, str], body: bytes, secret: str) -> str:
    content = "".join(value for key, value in sorted(fields.items()) if key != "Signature").encode() + body
    return base64.b64encode(hmac.new(secret.encode(), content, hashlib.sha1).digest()).decode()


def test_requests_are_signed_and_the_secret_is_never_shown(caplog):
    credentials = AclCredentials("ops-key", "s3cret-value")

    async def main():
        async with FakeServer(echo) as server, RemotingClient(request_hook=credentials.sign) as client:
            await client.invoke(server.address, request(12, {"topic": "T", "key": "k1"}, body=b"payload"))
        return server.received[0]

    with caplog.at_level(logging.DEBUG):
        sent = asyncio.run(main())
    assert sent.ext_fields["AccessKey"] == "ops-key"
    assert sent.ext_fields["Signature"] == expected_signature(sent.ext_fields, b"payload", "s3cret-value")
    assert "s3cret" not in repr(credentials) and "s3cret" not in caplog.text
    assert "s3cret" not in "".join(sent.ext_fields.values())


def test_the_signature_orders_keys_as_java_does():
    # Java's TreeMap compares UTF-16 code units: U+1F600 (D83D DE00) sorts before U+FFFF.
    fields = {"\uffff": "second", "\U0001F600": "first", "Signature": "ignored"}
    content = b"firstsecond"
    assert signature(fields, b"", "k") == base64.b64encode(hmac.new(b"k", content, hashlib.sha1).digest()).decode()
    token = AclCredentials("a", "b", security_token="t")
    cmd = RemotingCommand(code=1, flag=RESPONSE_FLAG)
    token.sign(cmd)
    assert cmd.ext_fields["SecurityToken"] == "t" and repr(token) == "AclCredentials(access_key='a')"
