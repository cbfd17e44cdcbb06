"""The gRPC front's server: started by the app's lifespan on the app's event loop (so it shares
the store, the put batcher and the flow gates with the REST API), stopped before the store
closes. Also runs the front's background work: auto-renewing PushConsumer deliveries and asking
producers about transactions left open."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path

import anyio.to_thread
import grpc

from app.grpc.access import Access
from app.grpc.calls import CallCounter
from app.grpc.client_settings import ServerLimits
from app.grpc.messages import incoming
from app.grpc.protocol import service_pb2 as spb
from app.grpc.protocol import service_pb2_grpc
from app.grpc.renewal import AutoRenewer
from app.grpc.service import FrontParts, MessagingFront
from app.grpc.telemetry import TelemetryHub
from app.services.metrics import rpc_counter

log = logging.getLogger("mqlens.grpc")

MAX_RECEIVE_MESSAGE_BYTES = 8 * 1024 * 1024 + 64 * 1024  # a largest body and its properties
STOP_GRACE_S = 2.0
LONG_POLLING_MS = 20_000  # what a PushConsumer is told to wait in one receive (RocketMQ 5 proxy: 20 s)


class GrpcListenError(RuntimeError):
    """The front's port cannot be bound."""


@dataclass(frozen=True)
class Listen:
    host: str
    port: int
    tls_cert: Path | None = None
    tls_key: Path | None = None


@dataclass(frozen=True)
class TransactionChecks:
    every_ms: int  # how often open transactions are looked at
    after_ms: int  # how long a transaction stays open before its producer is asked
    max_checks: int


class GrpcFront:
    def __init__(self, parts: FrontParts, listen: Listen, checks: TransactionChecks):
        self.parts = parts
        self.listen = listen
        self.checks = checks
        self.port: int | None = None
        self._server: grpc.aio.Server | None = None
        self._tasks: list[asyncio.Task] = []

    async def start(self) -> int:
        server = grpc.aio.server(options=[("grpc.max_receive_message_length", MAX_RECEIVE_MESSAGE_BYTES),
                                          ("grpc.so_reuseport", 0)])
        service_pb2_grpc.add_MessagingServiceServicer_to_server(MessagingFront(self.parts), server)
        address = f"{self.listen.host}:{self.listen.port}"
        try:
            if self.listen.tls_cert is not None:
                credentials = grpc.ssl_server_credentials(
                    [(self.listen.tls_key.read_bytes(), self.listen.tls_cert.read_bytes())])
                port = server.add_secure_port(address, credentials)
            else:
                port = server.add_insecure_port(address)
        except RuntimeError:
            raise GrpcListenError(f"the gRPC front cannot listen on {address}: the port is in use or not allowed "
                                  "(--grpc-port N moves it, --grpc-port 0 turns it off)") from None
        await server.start()
        self._server, self.port = server, port
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self.parts.renewer.run()), loop.create_task(self._check_transactions())]
        log.info("gRPC front for RocketMQ 5 clients on %s:%d%s", self.listen.host, port,
                 " (TLS)" if self.listen.tls_cert is not None else "")
        return port

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        self.parts.hub.close_all()
        if self._server is not None:
            await self._server.stop(STOP_GRACE_S)

    async def _check_transactions(self) -> None:
        while True:
            await asyncio.sleep(self.checks.every_ms / 1000)
            try:
                await self.ask_about_open_transactions()
            except Exception:
                log.exception("transaction check failed; trying again in %d ms", self.checks.every_ms)

    async def ask_about_open_transactions(self) -> int:
        """Send each transaction open longer than `after_ms` to a connected producer of its topic."""
        store = self.parts.store
        due = await anyio.to_thread.run_sync(store.open_transactions_to_check, self.checks.after_ms,
                                             self.checks.max_checks)
        asked = 0
        for check in due:
            producers = self.parts.hub.producers_of(check.real_topic)
            if not producers:
                continue
            command = spb.TelemetryCommand(recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand(
                message=incoming(check.half, check.real_topic), transaction_id=check.transaction_id))
            asked += any(self.parts.hub.push(client_id, command) for client_id in producers)
        return asked


def front_for(state, settings) -> GrpcFront | None:
    """The front the app's settings ask for, made from the app's parts (None when turned off)."""
    if settings.grpc_port == 0 or settings.read_only:
        return None
    store = state.store
    hub = TelemetryHub()
    parts = FrontParts(
        store=store, put_batcher=state.put_batcher, put_gate=state.put_gate, receive_gate=state.receive_gate,
        receive_threads=state.receive_threads, access=Access(state.credential_verifier),
        limits=ServerLimits(max_body_bytes=min(settings.max_request_bytes, store.config.max_message_bytes),
                            long_polling_ms=LONG_POLLING_MS),
        clients=state.client_sessions,
        counter=CallCounter(rpc_counter(state.metrics_registry)), hub=hub,
        renewer=AutoRenewer(store.renew_many, hub.connected))
    listen = Listen(settings.host, settings.grpc_port, settings.grpc_tls_cert, settings.grpc_tls_key)
    checks = TransactionChecks(settings.transaction_check_interval_ms, settings.transaction_timeout_ms,
                               settings.transaction_check_max)
    return GrpcFront(parts, listen, checks)
