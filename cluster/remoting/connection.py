"""One asyncio connection to a name server or broker: a table of requests waiting for answers.

A reader task decodes frames as they arrive and settles the waiting request by its opaque. When the
connection drops, every waiting request fails with ConnectionLost and the connection stays closed
(the client opens a new one for the next call). A frame announcing more than `max_frame_bytes` is
refused before its bytes are read, and the connection is closed: the stream cannot be resynchronised.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import socket
from collections.abc import Awaitable, Callable

from cluster.remoting.codes import ResponseCode
from cluster.remoting.command import ONEWAY_FLAG, RemotingCommand, response_to
from cluster.remoting.errors import ConnectFailed, ConnectionLost, RemotingError, RemotingTimeout
from cluster.remoting.frame import (
    DEFAULT_MAX_FRAME_BYTES,
    FRAME_LENGTH,
    decode_frame_payload,
    encode_frame,
    frame_length,
)

log = logging.getLogger(__name__)

SocketFactory = Callable[[], socket.socket]
# Answers a request the server sends us (RocketMQ brokers ask clients things); None: no answer.
ServerRequestHandler = Callable[[RemotingCommand], Awaitable[RemotingCommand | None]]
ResponseCallback = Callable[[RemotingCommand | None, BaseException | None], None]

_OPAQUE_LIMIT = 2**31


async def _not_supported(cmd: RemotingCommand) -> RemotingCommand | None:
    if cmd.is_oneway:
        return None
    return response_to(cmd, ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f"request code {cmd.code} not supported")


def split_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"not a host:port address: {address!r}")
    return host.strip("[]"), int(port)


class RemotingConnection:
    def __init__(self, address: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                 max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                 on_server_request: ServerRequestHandler = _not_supported):
        self.address = address
        self._reader = reader
        self._writer = writer
        self._max_frame_bytes = max_frame_bytes
        self._on_server_request = on_server_request
        self._waiting: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._opaques = itertools.count(1)
        self._write_lock = asyncio.Lock()
        self._closed_reason: str | None = None
        self._reader_task = asyncio.get_running_loop().create_task(self._read_loop())

    @classmethod
    async def open(cls, address: str, *, connect_timeout_s: float = 3.0,
                   socket_factory: SocketFactory | None = None, **options) -> RemotingConnection:
        """Connect to host:port. `socket_factory` makes the (unconnected) socket, for example one
        created inside another network namespace."""
        host, port = split_address(address)
        try:
            async with asyncio.timeout(connect_timeout_s):
                if socket_factory is None:
                    reader, writer = await asyncio.open_connection(host, port)
                else:
                    sock = socket_factory()
                    sock.setblocking(False)
                    try:
                        await asyncio.get_running_loop().sock_connect(sock, (host, port))
                    except BaseException:
                        sock.close()
                        raise
                    reader, writer = await asyncio.open_connection(sock=sock)
        except TimeoutError:
            raise ConnectFailed(address, f"no connection within {connect_timeout_s:g} s") from None
        except OSError as exc:
            raise ConnectFailed(address, exc.strerror or str(exc)) from None
        return cls(address, reader, writer, **options)

    @property
    def closed(self) -> bool:
        return self._closed_reason is not None

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def _next_opaque(self) -> int:
        while True:
            opaque = next(self._opaques) % _OPAQUE_LIMIT
            if opaque and opaque not in self._waiting:
                return opaque

    async def _write(self, cmd: RemotingCommand) -> None:
        data = encode_frame(cmd)
        if self.closed:
            raise ConnectionLost(self.address, self._closed_reason)
        async with self._write_lock:
            try:
                self._writer.write(data)
                await self._writer.drain()
            except (OSError, RuntimeError) as exc:
                self._close(f"write failed: {exc}")
                raise ConnectionLost(self.address, self._closed_reason) from None

    async def request(self, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        """Send `cmd` (its opaque is assigned here) and wait for the response with the same opaque.
        The timeout covers the sending too: a server that stops reading fills the socket buffers,
        and then the write itself waits."""
        cmd.opaque = self._next_opaque()
        cmd.flag &= ~ONEWAY_FLAG
        future: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._waiting[cmd.opaque] = future
        try:
            async with asyncio.timeout(timeout_s):
                await self._write(cmd)
                return await future
        except TimeoutError:
            raise RemotingTimeout(self.address, cmd.code, timeout_s) from None
        finally:
            self._waiting.pop(cmd.opaque, None)
            if future.done() and not future.cancelled():
                future.exception()  # seen: a write failure already reported it

    async def oneway(self, cmd: RemotingCommand) -> None:
        """Send `cmd` with the one-way flag: the server sends no answer."""
        cmd.opaque = self._next_opaque()
        cmd.flag |= ONEWAY_FLAG
        await self._write(cmd)

    def request_with_callback(self, cmd: RemotingCommand, timeout_s: float,
                              callback: ResponseCallback) -> asyncio.Task:
        """Send `cmd` and return at once; `callback(response, None)` or `callback(None, error)` runs
        on the event loop when the answer, the timeout or the connection's end comes."""

        async def run() -> None:
            try:
                response = await self.request(cmd, timeout_s)
            except RemotingError as exc:
                callback(None, exc)
            else:
                callback(response, None)

        return asyncio.get_running_loop().create_task(run())

    async def _read_loop(self) -> None:
        reason = "connection closed by peer"
        try:
            while True:
                prefix = await self._reader.readexactly(FRAME_LENGTH.size)
                length = frame_length(prefix, self._max_frame_bytes)
                cmd = decode_frame_payload(await self._reader.readexactly(length))
                if cmd.is_response:
                    future = self._waiting.get(cmd.opaque)
                    if future is not None and not future.done():
                        future.set_result(cmd)
                    else:
                        log.debug("%s: response to unknown request %d dropped", self.address, cmd.opaque)
                else:
                    answer = await self._on_server_request(cmd)
                    if answer is not None:
                        await self._write(answer)
        except asyncio.IncompleteReadError:
            pass
        except asyncio.CancelledError:
            reason = "connection closed"
        except (OSError, RemotingError) as exc:
            reason = str(exc)
            log.warning("%s: connection dropped: %s", self.address, reason)
        self._close(reason)

    def _close(self, reason: str) -> None:
        if self._closed_reason is not None:
            return
        self._closed_reason = reason
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(ConnectionLost(self.address, reason))
        self._waiting.clear()
        if self._writer.transport.get_write_buffer_size():
            self._writer.transport.abort()  # a peer that stopped reading would keep a flushing close open forever
        else:
            self._writer.close()

    async def close(self) -> None:
        self._close("connection closed")
        if self._reader_task is not asyncio.current_task():
            self._reader_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader_task
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()
