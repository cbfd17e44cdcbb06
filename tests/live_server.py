"""The real server for tests and benchmarks: `mqlens serve` in a subprocess on a loopback port,
started, checked and stopped with explicit conditions and deadlines."""

from __future__ import annotations

import functools
import itertools
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TypeVar

import httpx

ADMIN_TOKEN = "live-admin-token-0123456789"  # the bootstrap admin token every test server starts with
ADMIN_HEADERS = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
STARTUP_DEADLINE_S = 60
STOP_DEADLINE_S = 60
# A fresh store's geometry unless the caller gives one: RocketMQ's defaults reserve 1.5 GB of disk
# per store (a 1 GiB commit log segment, a 400 MiB index file), and a suite starts dozens.
SMALL_STORE_GEOMETRY = {"commitlog_file_size": 64 * 2**20, "cq_file_size": 20 * 30_000,
                        "index_slots": 50_000, "index_entries": 200_000}
GEOMETRY_FLAGS = ("--commitlog-file-size", "--cq-file-size", "--index-slots", "--index-entries")

T = TypeVar("T")


# Listening ports for tests come from below the kernel's ephemeral range (32768 and up), so no
# outgoing connection can take one between the choice and the bind, and each xdist worker has
# its own slice, so no two workers choose the same one.
TEST_PORTS_START, TEST_PORTS_END = 20000, 32000
TEST_PORT_SLICES = 8


@functools.cache
def _port_candidates() -> Iterator[int]:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    width = (TEST_PORTS_END - TEST_PORTS_START) // TEST_PORT_SLICES
    start = TEST_PORTS_START + (int(worker) % TEST_PORT_SLICES if worker.isdigit() else 0) * width
    first = random.randrange(width)  # processes one after another in a slice start apart
    return itertools.cycle([start + (first + i) % width for i in range(width)])


def free_port() -> int:
    """A loopback port nothing listens on, never handed out twice in a row by this process."""
    candidates = _port_candidates()
    for _ in range(TEST_PORTS_END - TEST_PORTS_START):
        port = next(candidates)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free test port left")


def wait_until(condition: Callable[[], T], deadline_s: float, what: str, poll_s: float = 0.05) -> T:
    """Call `condition` until it returns something true (returned); fail after `deadline_s`."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(poll_s)
    raise AssertionError(f"timed out waiting for {what}")


def _names_store_or_geometry(settings: dict[str, object], args: tuple[str, ...]) -> bool:
    if "store_dir" in settings or "--store" in args or any(a.startswith(GEOMETRY_FLAGS) for a in args):
        return True
    return any(key in settings for key in SMALL_STORE_GEOMETRY)


class LiveServer:
    """One `mqlens serve` process at a time on a fixed port and data directory; `start` again
    after `stop` serves the same data. Settings come as MQLENS_* environment variables. A store
    the server makes gets SMALL_STORE_GEOMETRY unless `small_store` is off (benchmarks) or the
    settings or arguments name a geometry or another store."""

    def __init__(self, data_dir: Path, log_path: Path, settings: dict[str, object] | None = None,
                 args: tuple[str, ...] = (), port: int | None = None, small_store: bool = True,
                 command_prefix: tuple[str, ...] = ()):
        self.data_dir = data_dir
        self.port = port or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.args = args
        self.command_prefix = command_prefix  # runs the server through this (into another network namespace)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("MQLENS_")}
        self.env["MQLENS_BOOTSTRAP_ADMIN_TOKEN"] = ADMIN_TOKEN
        self.env["MQLENS_GRPC_PORT"] = "0"  # the gRPC front only where a test asks for it (settings)
        self.env["MQLENS_PIPELINE_WARM"] = "false"  # a warm Spark (a JVM) too
        if small_store and not _names_store_or_geometry(settings or {}, args):
            self.env.update({f"MQLENS_{k.upper()}": str(v) for k, v in SMALL_STORE_GEOMETRY.items()})
        self.env.update({f"MQLENS_{k.upper()}": str(v) for k, v in (settings or {}).items()})
        self.admin_headers = ADMIN_HEADERS
        self._log: IO[str] = log_path.open("a+")
        self.proc: subprocess.Popen | None = None

    def start(self, deadline_s: float = STARTUP_DEADLINE_S) -> LiveServer:
        assert self.proc is None or self.proc.poll() is not None, "the server is already running"
        self.proc = subprocess.Popen(
            [*self.command_prefix, sys.executable, "-c", "from app.cli import entry; entry()", "serve",
             "--data", str(self.data_dir), "--host", "127.0.0.1", "--port", str(self.port), *self.args],
            stdout=self._log, stderr=subprocess.STDOUT, env=self.env, cwd=self.data_dir.parent)
        wait_until(self.healthy, deadline_s, f"{self.base_url}/healthz")
        return self

    def client(self, **kwargs) -> httpx.Client:
        """A client of this server that sends the admin token."""
        return httpx.Client(base_url=self.base_url, headers=self.admin_headers, **{"timeout": 30, **kwargs})

    def log_text(self) -> str:
        self._log.flush()
        self._log.seek(0)
        return self._log.read()

    def healthy(self) -> bool:
        """The server answers /healthz; raises when its process has ended."""
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"server exited with {self.proc.returncode}:\n{self.log_text()[-5000:]}")
        try:
            return httpx.get(f"{self.base_url}/healthz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    def stop(self, deadline_s: float = STOP_DEADLINE_S) -> int:
        """SIGTERM, then wait for the process to end; its exit status."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=deadline_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"server did not stop within {deadline_s} s:\n{self.log_text()[-5000:]}") from None

    def kill(self) -> None:
        """SIGKILL: the process ends at once, as in a crash."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=STOP_DEADLINE_S)

    def close(self) -> None:
        """Kill the process if it still runs (a failed test), and close the log."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()

    def __enter__(self) -> LiveServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
