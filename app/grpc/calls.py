"""What every RPC shares: the caller's metadata (client id, signature), its address, and one
wrapper that answers a protocol status for any error and counts the call by method and code."""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import grpc

from app.grpc.protocol import definition_pb2 as pb
from app.grpc.statuses import Code, RpcRefusal, status_of

log = logging.getLogger("mqlens.grpc")

CLIENT_ID = "x-mq-client-id"
AUTHORIZATION = "authorization"
DATE_TIME = "x-mq-date-time"
LANGUAGE = "x-mq-language"
CLIENT_VERSION = "x-mq-client-version"
MAX_CLIENT_ID_CHARS = 256


@dataclass(frozen=True)
class Caller:
    client_id: str | None
    address: str  # host:port of the connection
    peer: str  # as gRPC names it: ipv4:host:port
    authorization: str | None
    date_time: str | None
    language: str | None
    version: str | None

    def require_client_id(self) -> str:
        if not self.client_id:
            raise RpcRefusal(Code.CLIENT_ID_REQUIRED, f"the {CLIENT_ID} header is required")
        return self.client_id


def peer_address(context: grpc.aio.ServicerContext) -> str:
    """'ipv4:127.0.0.1:5000' -> '127.0.0.1:5000'; '[::1]:5000' for IPv6."""
    peer = context.peer() or ""
    scheme, _, rest = peer.partition(":")
    if scheme == "ipv6":
        host, _, port = rest.rpartition(":")
        return f"{host}:{port}" if host.startswith("[") else f"[{host}]:{port}"
    return rest if scheme == "ipv4" else peer


def caller_of(context: grpc.aio.ServicerContext) -> Caller:
    headers: dict[str, str] = {}
    for key, value in context.invocation_metadata() or ():
        if isinstance(value, str):
            headers.setdefault(key, value)
    client_id = headers.get(CLIENT_ID)
    if client_id is not None and (len(client_id) > MAX_CLIENT_ID_CHARS or not client_id.isprintable()):
        client_id = None
    return Caller(client_id, peer_address(context), context.peer() or "", headers.get(AUTHORIZATION),
                  headers.get(DATE_TIME), headers.get(LANGUAGE), headers.get(CLIENT_VERSION))


class CallCounter:
    """Counts answered calls by method and status code (the /metrics counter)."""

    def __init__(self, count: Callable[[str, str], None]):
        self._count = count
        self._names = {number: name for name, number in pb.Code.items()}

    def count(self, method: str, code: int) -> None:
        self._count(method, self._names.get(code) or str(code))


def unary(response_type: type, counter_of: Callable[[object], CallCounter]):
    """A unary RPC method that answers `response_type(status=...)` for any error it raises."""

    def wrap(method):
        name = method.__name__

        @functools.wraps(method)
        async def call(self, request, context):
            try:
                response = await method(self, request, context)
            except Exception as exc:  # every error becomes a status: the client never sees a broken call
                response = response_type(status=_logged_status(name, exc))
            counter_of(self).count(name, response.status.code)
            return response

        return call

    return wrap


def server_stream(response_type: type, counter_of: Callable[[object], CallCounter]):
    """A streaming RPC method; an error before or between its answers ends the stream with one
    `response_type(status=...)`."""

    def wrap(method):
        name = method.__name__

        @functools.wraps(method)
        async def call(self, request, context) -> AsyncIterator:
            code = Code.OK
            try:
                async for response in method(self, request, context):
                    if response.HasField("status"):
                        code = response.status.code
                    yield response
            except Exception as exc:
                failed = _logged_status(name, exc)
                code = failed.code
                yield response_type(status=failed)
            finally:
                counter_of(self).count(name, code)

        return call

    return wrap


def _logged_status(method: str, exc: Exception) -> pb.Status:
    answer = status_of(exc)
    if answer.code in (Code.INTERNAL_ERROR, Code.INTERNAL_SERVER_ERROR):
        log.exception("%s failed", method, exc_info=exc)
    return answer
