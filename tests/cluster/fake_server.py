"""A remoting server on a loopback port whose behaviour each test scripts: to test the client's
side of timeouts, drops, reordered answers, oversized frames and requests from the server."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Awaitable, Callable

import orjson

from cluster.remoting.codes import RequestCode, ResponseCode
from cluster.remoting.command import RemotingCommand, response_to
from cluster.remoting.frame import FRAME_LENGTH, decode_frame_payload, encode_frame, frame_length

Handler = Callable[["Peer", RemotingCommand], Awaitable[None]]


class Peer:
    """One accepted connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader = reader
        self.writer = writer

    async def send(self, cmd: RemotingCommand) -> None:
        self.writer.write(encode_frame(cmd))
        await self.writer.drain()

    async def send_raw(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def receive(self) -> RemotingCommand:
        length = frame_length(await self.reader.readexactly(FRAME_LENGTH.size))
        return decode_frame_payload(await self.reader.readexactly(length))

    def close(self) -> None:
        self.writer.close()


class FakeServer:
    """Listens on 127.0.0.1:`port` (0: any free port); with a `socket_factory`, on a socket it makes
    (one created inside the RocketMQ fixture's network namespace, so brokers there can be played)."""

    def __init__(self, handler: Handler, port: int = 0, socket_factory: Callable[[], socket.socket] | None = None):
        self.handler = handler
        self.port = port
        self.socket_factory = socket_factory
        self.received: list[RemotingCommand] = []
        self.peers: list[Peer] = []
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> FakeServer:
        if self.socket_factory is None:
            self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        else:
            listener = self.socket_factory()
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", self.port))
            self._server = await asyncio.start_server(self._serve, sock=listener)
        return self

    async def __aexit__(self, *exc_info) -> None:
        for peer in self.peers:
            peer.close()
        self._server.close()
        await self._server.wait_closed()

    @property
    def address(self) -> str:
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"{host}:{port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = Peer(reader, writer)
        self.peers.append(peer)
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while not writer.is_closing():
                cmd = await peer.receive()
                self.received.append(cmd)
                await self.handler(peer, cmd)


@contextlib.contextmanager
def fake_server_thread(handler: Handler, port: int = 0, socket_factory: Callable[[], socket.socket] | None = None):
    """A FakeServer on an event loop of its own thread, for code under test that runs elsewhere
    (another process); yields its address."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="fake-remoting-server", daemon=True)
    thread.start()
    server = FakeServer(handler, port, socket_factory)
    asyncio.run_coroutine_threadsafe(server.__aenter__(), loop).result(10)
    try:
        yield server.address
    finally:
        asyncio.run_coroutine_threadsafe(server.__aexit__(None, None, None), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def route(topic: str, brokers: dict[str, str]) -> bytes:
    """A route body: the topic on each broker (name -> address) of cluster C, one queue each."""
    return orjson.dumps({
        "queueDatas": [{"brokerName": name, "readQueueNums": 1, "writeQueueNums": 1, "perm": 6} for name in brokers],
        "brokerDatas": [{"cluster": "C", "brokerName": name, "brokerAddrs": {"0": address}}
                        for name, address in brokers.items()]})


def name_server_of(brokers: dict[str, str], topic_names: list[str]) -> Handler:
    """A name server of cluster C: these brokers (name -> address), these topics, each on every broker."""

    async def name_server(peer: Peer, cmd: RemotingCommand) -> None:
        answer = response_to(cmd, ResponseCode.SUCCESS)
        if cmd.code == RequestCode.GET_BROKER_CLUSTER_INFO:
            answer.body = orjson.dumps({
                "brokerAddrTable": {n: {"cluster": "C", "brokerName": n, "brokerAddrs": {"0": a}}
                                    for n, a in brokers.items()},
                "clusterAddrTable": {"C": sorted(brokers)}})
        elif cmd.code == RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER:
            answer.body = orjson.dumps({"topicList": topic_names})
        elif cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            answer.body = route(cmd.ext_fields["topic"], brokers)
        await peer.send(answer)

    return name_server
