"""The console attached to the RocketMQ fixture: `mqlens serve --namesrv` run inside the fixture's
network namespace, its HTTP port forwarded to this one."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from tests.cluster.forwarder import Forwarder
from tests.cluster.rocketmq_fixture import RMQ_FIXTURE, RocketMQFixture
from tests.live_server import LiveServer


@contextlib.contextmanager
def console_on(rocketmq: RocketMQFixture, folder: Path, settings: dict | None = None) -> Iterator[LiveServer]:
    forwarder = Forwarder(rocketmq.socket_factory).start()
    port = forwarder.port
    server = LiveServer(folder / "data", folder / "server.log", {"namesrv": rocketmq.namesrv, **(settings or {})},
                        port=port, command_prefix=(str(RMQ_FIXTURE), "exec", "--dir", str(rocketmq.run_dir), "--"))
    try:
        with server:
            server.start()
            yield server
    finally:
        forwarder.close()
