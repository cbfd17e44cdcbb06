"""The remoting client: a few connections per address, opened on demand and replaced when they drop.

Every request goes through the request hook (the ACL signature, when credentials are set) just before
it is encoded. Requests are never re-sent on their own: a call whose connection dropped fails with
ConnectionLost, and the next call to that address opens a fresh connection.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from cluster.remoting.codes import ResponseCode, SerializeType
from cluster.remoting.command import RemotingCommand
from cluster.remoting.connection import RemotingConnection, ResponseCallback, SocketFactory
from cluster.remoting.errors import RemotingError, ResponseError
from cluster.remoting.frame import DEFAULT_MAX_FRAME_BYTES

RequestHook = Callable[[RemotingCommand], None]


@dataclass(frozen=True)
class ClientOptions:
    connections_per_address: int = 2
    connect_timeout_s: float = 3.0
    request_timeout_s: float = 5.0
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    serialize_type: SerializeType = SerializeType.JSON
    socket_factory: SocketFactory | None = field(default=None, compare=False)


class _AddressPool:
    """Up to N connections to one address, used in turn."""

    def __init__(self, address: str, options: ClientOptions):
        self.address = address
        self._options = options
        self._slots: list[RemotingConnection | None] = [None] * max(1, options.connections_per_address)
        self._opening: list[asyncio.Lock] = [asyncio.Lock() for _ in self._slots]
        self._turn = itertools.count()

    async def connection(self) -> RemotingConnection:
        index = next(self._turn) % len(self._slots)
        current = self._slots[index]
        if current is not None and not current.closed:
            return current
        async with self._opening[index]:
            current = self._slots[index]
            if current is None or current.closed:
                current = await RemotingConnection.open(
                    self.address, connect_timeout_s=self._options.connect_timeout_s,
                    socket_factory=self._options.socket_factory, max_frame_bytes=self._options.max_frame_bytes)
                self._slots[index] = current
            return current

    def live(self) -> int:
        return sum(1 for conn in self._slots if conn is not None and not conn.closed)

    async def close(self) -> None:
        for index, conn in enumerate(self._slots):
            if conn is not None:
                await conn.close()
                self._slots[index] = None


class RemotingClient:
    def __init__(self, options: ClientOptions | None = None, *, request_hook: RequestHook | None = None):
        self.options = options or ClientOptions()
        self._request_hook = request_hook
        self._pools: dict[str, _AddressPool] = {}

    def _pool(self, address: str) -> _AddressPool:
        pool = self._pools.get(address)
        if pool is None:
            pool = self._pools[address] = _AddressPool(address, self.options)
        return pool

    def live_connections(self, address: str) -> int:
        pool = self._pools.get(address)
        return pool.live() if pool else 0

    def _prepare(self, cmd: RemotingCommand) -> RemotingCommand:
        cmd.serialize_type = self.options.serialize_type
        if self._request_hook is not None:
            self._request_hook(cmd)
        return cmd

    async def invoke(self, address: str, cmd: RemotingCommand, timeout_s: float | None = None) -> RemotingCommand:
        """Send a request and return its response, whatever its response code."""
        conn = await self._pool(address).connection()
        return await conn.request(self._prepare(cmd), timeout_s or self.options.request_timeout_s)

    async def invoke_ok(self, address: str, cmd: RemotingCommand, timeout_s: float | None = None,
                        accept: tuple[int, ...] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
        """Like invoke, but a response code outside `accept` raises ResponseError."""
        response = await self.invoke(address, cmd, timeout_s)
        if response.code not in accept:
            raise ResponseError(address, cmd.code, response.code, response.remark)
        return response

    async def invoke_oneway(self, address: str, cmd: RemotingCommand) -> None:
        conn = await self._pool(address).connection()
        await conn.oneway(self._prepare(cmd))

    async def invoke_with_callback(self, address: str, cmd: RemotingCommand, callback: ResponseCallback,
                                   timeout_s: float | None = None) -> asyncio.Task:
        """Send now, return at once; the callback gets (response, None) or (None, error) later.
        A connection that cannot be opened is reported through the callback too."""
        try:
            conn = await self._pool(address).connection()
        except RemotingError as exc:
            callback(None, exc)
            done: asyncio.Future = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return asyncio.ensure_future(done)
        return conn.request_with_callback(self._prepare(cmd), timeout_s or self.options.request_timeout_s, callback)

    async def close(self) -> None:
        pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            await pool.close()

    async def __aenter__(self) -> RemotingClient:
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()
