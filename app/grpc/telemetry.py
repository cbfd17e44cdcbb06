"""Telemetry streams: one open stream per client, over which the server answers the client's
settings and pushes its own commands (transaction checks)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from app.grpc.protocol import definition_pb2 as pb
from app.grpc.protocol import service_pb2 as spb

OUTBOX_COMMANDS = 256  # commands waiting to be written to one client; beyond it a push is dropped


@dataclass
class _Stream:
    outbox: asyncio.Queue
    settings: pb.Settings | None = None
    topics: frozenset[str] = field(default_factory=frozenset)


class TelemetryHub:
    """The open streams by client id (event loop only)."""

    def __init__(self):
        self._streams: dict[str, _Stream] = {}

    def attach(self, client_id: str) -> asyncio.Queue:
        """A new stream of the client (a reconnect replaces the older one, which is ended)."""
        older = self._streams.get(client_id)
        if older is not None:
            _end(older.outbox)
        stream = _Stream(asyncio.Queue(OUTBOX_COMMANDS))
        if older is not None:
            stream.settings, stream.topics = older.settings, older.topics
        self._streams[client_id] = stream
        return stream.outbox

    def detach(self, client_id: str, outbox: asyncio.Queue) -> None:
        stream = self._streams.get(client_id)
        if stream is not None and stream.outbox is outbox:
            del self._streams[client_id]

    def end(self, client_id: str) -> None:
        """The client said goodbye: end its stream."""
        stream = self._streams.pop(client_id, None)
        if stream is not None:
            _end(stream.outbox)

    def settings_received(self, client_id: str, settings: pb.Settings) -> None:
        stream = self._streams.get(client_id)
        if stream is not None:
            stream.settings = settings
            if settings.HasField("publishing"):
                stream.topics = frozenset(r.name for r in settings.publishing.topics)

    def push(self, client_id: str, command: spb.TelemetryCommand) -> bool:
        stream = self._streams.get(client_id)
        if stream is None:
            return False
        try:
            stream.outbox.put_nowait(command)
        except asyncio.QueueFull:
            return False
        return True

    def producers_of(self, topic: str) -> list[str]:
        """Clients with an open stream that publish to `topic` (or told no topics: they may)."""
        return [client_id for client_id, s in self._streams.items()
                if s.settings is not None and s.settings.HasField("publishing") and (not s.topics or topic in s.topics)]

    def connected(self, client_id: str) -> bool:
        return client_id in self._streams

    def close_all(self) -> None:
        for stream in self._streams.values():
            _end(stream.outbox)
        self._streams.clear()


def _end(outbox: asyncio.Queue) -> None:
    while True:
        try:
            outbox.put_nowait(None)
            return
        except asyncio.QueueFull:
            outbox.get_nowait()
