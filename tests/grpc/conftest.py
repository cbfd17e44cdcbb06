"""A real `mqlens serve` with its gRPC front on a loopback port, and official RocketMQ 5 Python
clients in processes of their own, driven one JSON command at a time (official_client.py)."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.live_server import LiveServer, free_port

DRIVER = Path(__file__).with_name("official_client.py")
READY_DEADLINE_S = 60
CALL_DEADLINE_S = 60


class ClientFailed(Exception):
    """The official client raised: `kind` is its exception's class name."""

    def __init__(self, kind: str, message: str):
        super().__init__(f"{kind}: {message}")
        self.kind = kind


class OfficialClient:
    """One process holding official clients (a producer, a simple consumer, push consumers)."""

    def __init__(self, endpoint: str, home: Path, ak: str = "", sk: str = "", env: dict | None = None):
        home.mkdir(parents=True, exist_ok=True)
        self.log_path = home / "driver.log"
        self._log = self.log_path.open("w")
        environ = {**os.environ, "HOME": str(home), **(env or {})}
        self.proc = subprocess.Popen([sys.executable, str(DRIVER), endpoint, ak, sk], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._log, text=True, env=environ)
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self._answer(READY_DEADLINE_S)

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _answer(self, deadline_s: float) -> dict:
        try:
            line = self._lines.get(timeout=deadline_s)
        except queue.Empty:
            raise AssertionError(f"the client did not answer within {deadline_s} s:\n{self.log_text()}") from None
        if line is None:
            raise AssertionError(f"the client process ended:\n{self.log_text()}")
        answer = json.loads(line)
        if "error" in answer:
            raise ClientFailed(answer["type"], answer["error"])
        return answer["ok"]

    def call(self, op: str, deadline_s: float = CALL_DEADLINE_S, **fields) -> dict:
        self.proc.stdin.write(json.dumps({"op": op, **fields}) + "\n")
        self.proc.stdin.flush()
        return self._answer(deadline_s)

    def log_text(self) -> str:
        self._log.flush()
        return self.log_path.read_text()[-5000:]

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.call("shutdown", deadline_s=20)
                self.proc.wait(timeout=20)
            except (AssertionError, ClientFailed, OSError, subprocess.TimeoutExpired):
                pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


def grpc_live_server(folder: Path) -> LiveServer:
    """A server with sync flush, its gRPC front on a free port, a short delay level table and
    transaction checks every half second."""
    return LiveServer(folder / "data", folder / "server.log", settings={
        "grpc_port": free_port(), "flush": "sync", "delay_levels": "1s 2s 3s 4s 5s",
        "transaction_check_interval_ms": 500, "transaction_timeout_ms": 1000})


@pytest.fixture
def grpc_server(tmp_path: Path) -> Iterator[LiveServer]:
    with grpc_live_server(tmp_path) as server:
        server.start()
        yield server


def endpoint_of(server: LiveServer) -> str:
    return f"127.0.0.1:{server.env['MQLENS_GRPC_PORT']}"


@pytest.fixture
def official_client(tmp_path: Path, grpc_server: LiveServer):
    """Makes official client processes against `grpc_server`; all are shut down after the test."""
    made: list[OfficialClient] = []

    def make(name: str = "client", **kwargs) -> OfficialClient:
        client = OfficialClient(endpoint_of(grpc_server), tmp_path / "clients" / f"{name}-{len(made)}", **kwargs)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()
