"""The real RocketMQ 4.9.8 name server and broker from ../shared/rocketmq-4.9.8-cluster, for tests.

The cluster runs in its own loopback-only network namespace (`rmq-fixture start --net private`);
the test process stays where it is and creates its client sockets inside that namespace with
setns(2), switching only the calling thread and only while the socket is created.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import re
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from cluster.remoting.broker import BrokerAdmin
from cluster.remoting.client import ClientOptions, RemotingClient
from cluster.remoting.errors import RemotingError, ResponseError

FIXTURE_HOME = Path(__file__).resolve().parents[3] / "shared" / "rocketmq-4.9.8-cluster"
RMQ_FIXTURE = FIXTURE_HOME / "bin" / "rmq-fixture"
CLONE_NEWNET = 0x40000000
BROKER_A = "127.0.0.1:10911"
FAST_DELAY_LEVELS = " ".join(["1s"] * 18)


def unavailable_reason() -> str | None:
    """Why the fixture cannot start on this machine at all, or None."""
    if not RMQ_FIXTURE.is_file():
        return f"the RocketMQ fixture is not beside the repository ({FIXTURE_HOME})"
    if not os.path.exists("/proc/thread-self/ns/net"):
        return "no Linux network namespaces here"
    if os.geteuid() != 0:
        return "the RocketMQ fixture's private network namespace needs root"
    return None


@contextlib.contextmanager
def network_namespace_of(pid: int):
    """Run the block with this thread in the network namespace of `pid`."""
    libc = ctypes.CDLL(None, use_errno=True)
    mine = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    try:
        if libc.setns(target, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into the namespace of {pid} failed")
        try:
            yield
        finally:
            if libc.setns(mine, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back failed")
    finally:
        os.close(target)
        os.close(mine)


@dataclass
class RocketMQFixture:
    run_dir: Path
    namesrv: str
    netns_pid: int

    def socket_factory(self) -> socket.socket:
        with network_namespace_of(self.netns_pid):
            return socket.socket(socket.AF_INET, socket.SOCK_STREAM)

    def connect_raw(self, address: str, timeout_s: float = 10.0) -> socket.socket:
        host, port = address.rsplit(":", 1)
        sock = self.socket_factory()
        sock.settimeout(timeout_s)
        sock.connect((host, int(port)))
        return sock

    def run(self, *args: str, timeout_s: float = 120) -> str:
        done = subprocess.run([str(RMQ_FIXTURE), *args[:1], "--dir", str(self.run_dir), *args[1:]],
                              capture_output=True, text=True, timeout=timeout_s)
        if done.returncode != 0:
            raise AssertionError(f"rmq-fixture {' '.join(args)} failed ({done.returncode}):\n"
                                 f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
        return done.stdout

    def mqadmin(self, *args: str) -> str:
        return self.run("mqadmin", *args)

    def produce(self, topic: str, count: int, key_prefix: str) -> list[dict[str, str]]:
        """Send messages; one dict per SEND_OK line (msgId, offsetMsgId, queueId)."""
        out = self.run("produce", topic, str(count), key_prefix)
        sent = [dict(re.findall(r"(\w+)=(\S+)", line)) for line in out.splitlines() if line.startswith("SEND_OK")]
        assert len(sent) == count, out
        return sent

    def log_tails(self) -> str:
        tails = []
        for name in ("broker.log", "namesrv.log"):
            path = self.run_dir / "logs" / "rocketmqlogs" / name
            if path.is_file():
                tails.append(f"--- {name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-40:]))
        return "\n".join(tails)


def acl_home(home: Path, access_key: str, secret_key: str) -> dict[str, str]:
    """A RocketMQ home with the fixture's logging configs and one admin account; the environment
    that makes `start` run a broker with ACL on against it."""
    (home / "conf").mkdir(parents=True)
    for config in (FIXTURE_HOME / "conf").glob("*.xml"):
        shutil.copy(config, home / "conf" / config.name)
    (home / "conf" / "plain_acl.yml").write_text(
        f"globalWhiteRemoteAddresses:\naccounts:\n  - accessKey: {access_key}\n    secretKey: {secret_key}\n"
        "    whiteRemoteAddress:\n    admin: true\n")
    return {"RMQ_FIXTURE_BROKER_EXTRA": "aclEnable=true", "RMQ_FIXTURE_JAVA_OPTS": f"-Drocketmq.home.dir={home}"}


def start(run_dir: Path, env: dict[str, str] | None = None, *, trace: bool = False) -> RocketMQFixture:
    """`trace`: the broker keeps RMQ_SYS_TRACE_TOPIC and `produce` / `consume` trace what they do."""
    command = [str(RMQ_FIXTURE), "start", "--dir", str(run_dir), "--net", "private",
               "--delay-levels", FAST_DELAY_LEVELS, "--hash-slots", "5000", "--index-num", "20000",
               "--trace", "on" if trace else "off"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=150, env={**os.environ, **(env or {})})
    except subprocess.TimeoutExpired:
        stop(run_dir)
        raise
    if done.returncode != 0:
        stop(run_dir)
        raise RuntimeError(f"rmq-fixture start failed:\n{done.stderr[-3000:]}")
    status = subprocess.run([str(RMQ_FIXTURE), "status", "--dir", str(run_dir)],
                            capture_output=True, text=True, timeout=30).stdout
    fields = dict(line.split("=", 1) for line in status.splitlines() if "=" in line)
    cluster = RocketMQFixture(run_dir=run_dir, namesrv=done.stdout.strip(), netns_pid=int(fields["netns_pid"]))
    try:
        wait_answering(cluster, BROKER_A)
    except BaseException:
        stop(run_dir)
        raise
    return cluster


def wait_answering(cluster: RocketMQFixture, broker: str, deadline_s: float = 30) -> None:
    """Until the broker answers runtime info. Registered is not enough: in a 4.9.8 broker's first
    second GET_BROKER_RUNTIME_INFO fails (NoSuchElementException: its rate samples are still empty).
    Any other refusal (a broker with ACL on refuses this unsigned request) is an answer."""
    async def ask() -> None:
        options = ClientOptions(socket_factory=cluster.socket_factory, connect_timeout_s=2, request_timeout_s=2)
        async with RemotingClient(options) as client:
            await BrokerAdmin(client).runtime_info(broker)

    deadline = time.monotonic() + deadline_s
    while True:
        try:
            return asyncio.run(ask())
        except ResponseError as exc:
            if "NoSuchElementException" not in (exc.remark or "") or time.monotonic() > deadline:
                return
        except RemotingError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.1)


def stop(run_dir: Path) -> None:
    subprocess.run([str(RMQ_FIXTURE), "stop", "--dir", str(run_dir), "--kill"],
                   capture_output=True, text=True, timeout=60)
