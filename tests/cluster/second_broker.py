"""A second real broker, `broker-b`, beside the fixture's `broker-a`: same cluster (DefaultCluster),
same name server, same network namespace, its own ports and store. Started from the fixture's jars
the way `rmq-fixture start` starts broker-a, and killed, paused and restarted by its PID for fault
tests. Only the processes this module starts are ever signalled."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from cluster.remoting.client import ClientOptions, RemotingClient
from cluster.remoting.codes import ResponseCode
from cluster.remoting.command import request
from cluster.remoting.errors import RemotingError
from cluster.remoting.frame import FRAME_LENGTH, decode_frame_payload, encode_frame, frame_length
from cluster.remoting.namesrv import NameServerAdmin
from tests.cluster.rocketmq_fixture import (
    FAST_DELAY_LEVELS,
    FIXTURE_HOME,
    RMQ_FIXTURE,
    RocketMQFixture,
    wait_answering,
)

CLUSTER = "DefaultCluster"
START_DEADLINE_S = 90
STOP_DEADLINE_S = 15
ESTABLISHED = "01"  # a socket state in /proc/net/tcp
REGISTER_BROKER = 103  # RequestCode.REGISTER_BROKER: a broker announcing itself and its topics to a name server
PERM_READ_WRITE = 6
# The JVM options `rmq-fixture` gives its brokers (RocketMQ 4.9.8 on Java 17 needs the opens).
JVM_OPTIONS = ("-Xms128m", "-Xmx512m", "-XX:MaxDirectMemorySize=512m", "-XX:+UseSerialGC",
               "-XX:-OmitStackTraceInFastThrow",
               "--add-opens", "java.base/java.nio=ALL-UNNAMED", "--add-opens", "java.base/jdk.internal.ref=ALL-UNNAMED",
               "--add-exports", "java.base/sun.nio.ch=ALL-UNNAMED", "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED",
               "--add-opens", "java.base/java.lang=ALL-UNNAMED")


def broker_conf(name: str, port: int, home: Path, namesrv: str) -> str:
    store = home / "store"
    return "\n".join([
        f"brokerClusterName={CLUSTER}", f"brokerName={name}", "brokerId=0", f"namesrvAddr={namesrv}",
        "brokerIP1=127.0.0.1", f"listenPort={port}", f"storePathRootDir={store}",
        f"storePathCommitLog={store / 'commitlog'}", "autoCreateTopicEnable=true", "autoCreateSubscriptionGroup=true",
        "traceTopicEnable=false", "brokerRole=ASYNC_MASTER", "flushDiskType=ASYNC_FLUSH",
        f"messageDelayLevel={FAST_DELAY_LEVELS}", "maxHashSlotNum=5000", "maxIndexNum=20000",
        "deleteWhen=04", "fileReservedTime=48", "diskMaxUsedSpaceRatio=95", ""])


@dataclass
class ExtraBroker:
    """One more master broker of the fixture's cluster. `start()` returns once the name server lists
    it; `kill()` is a crash (SIGKILL), `pause()`/`resume()` a broker that stops answering but keeps
    its connections (SIGSTOP/SIGCONT). Its run folder `home` (under the fixture's run dir) holds
    broker.conf, broker.out, its store and its logs; a restart keeps the store."""

    rocketmq: RocketMQFixture
    name: str = "broker-b"
    port: int = 10921  # its VIP channel is port-2, its HA port port+1: clear of broker-a's 10909/10911/10912
    home: Path = field(init=False)
    _proc: subprocess.Popen | None = field(default=None, init=False, repr=False)

    def __post_init__(self):
        self.home = self.rocketmq.run_dir / self.name

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self.running else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, deadline_s: float = START_DEADLINE_S) -> ExtraBroker:
        """Launch it; returns once the name server lists it and it answers runtime info."""
        assert not self.running, f"{self.name} already runs"
        (self.home / "store").mkdir(parents=True, exist_ok=True)
        conf = self.home / "broker.conf"
        conf.write_text(broker_conf(self.name, self.port, self.home, self.rocketmq.namesrv))
        classpath = subprocess.run([str(RMQ_FIXTURE), "classpath"], capture_output=True, text=True,
                                   timeout=30, check=True).stdout.strip()
        command = [str(RMQ_FIXTURE), "exec", "--dir", str(self.rocketmq.run_dir), "--",
                   "java", *JVM_OPTIONS, f"-Duser.home={self.home}", f"-Drocketmq.namesrv.addr={self.rocketmq.namesrv}",
                   "-cp", classpath, "org.apache.rocketmq.broker.BrokerStartup", "-c", str(conf)]
        with (self.home / "broker.out").open("ab") as out:
            # exec replaces itself with nsenter, which replaces itself with java: the PID stays the JVM's.
            # A session of its own, so a signal aimed at the test's process group never reaches it.
            self._proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                          cwd=self.home, start_new_session=True,
                                          env={**os.environ, "ROCKETMQ_HOME": str(FIXTURE_HOME)})
        try:
            self.wait_registered(deadline_s)
            wait_answering(self.rocketmq, self.address)
        except BaseException:
            self.kill()
            raise
        return self

    def registered_address(self) -> str | None:
        """The address the name server lists for this broker's master, or None."""
        async def ask() -> str | None:
            options = ClientOptions(socket_factory=self.rocketmq.socket_factory, connect_timeout_s=2,
                                    request_timeout_s=2)
            async with RemotingClient(options) as client:
                info = await NameServerAdmin(client, [self.rocketmq.namesrv]).broker_cluster_info()
            data = info.brokers.get(self.name)
            return data.addresses.get(0) if data else None

        try:
            return asyncio.run(ask())
        except RemotingError:
            return None

    def wait_registered(self, deadline_s: float = START_DEADLINE_S) -> None:
        deadline = time.monotonic() + deadline_s
        while self.registered_address() != self.address:
            if not self.running:
                raise RuntimeError(f"{self.name} exited during start:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} not registered within {deadline_s} s:\n{self.log_tail()}")
            time.sleep(0.2)

    def wait_unregistered(self, deadline_s: float = 150) -> None:
        """Until the name server no longer lists this broker (it drops a broker whose connection
        closed at once, one that stopped heartbeating after 120 s)."""
        deadline = time.monotonic() + deadline_s
        while self.registered_address() is not None:
            if time.monotonic() > deadline:
                raise AssertionError(f"the name server still lists {self.name} after {deadline_s} s")
            time.sleep(0.2)

    def kill(self) -> None:
        """SIGKILL, as in a crash; returns once the process is gone."""
        if self._proc is None:
            return
        if self._proc.poll() is None:
            self._proc.kill()  # a paused broker too, without a SIGCONT that would let it answer first
        self._proc.wait(STOP_DEADLINE_S)

    def pause(self) -> None:
        """SIGSTOP: the broker keeps its sockets open (the kernel still accepts connections and
        buffers requests) but answers nothing."""
        assert self.running
        self._proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.running
        self._proc.send_signal(signal.SIGCONT)

    def restart(self, deadline_s: float = START_DEADLINE_S) -> ExtraBroker:
        self.kill()
        return self.start(deadline_s)

    def unread_requests(self) -> int:
        """Connections to this broker holding bytes it has not read: requests that wait on a paused
        broker. Read from the namespace's TCP tables (/proc/PID/net of a process inside it; the JVM
        listens on an IPv6 wildcard socket, so its connections are in tcp6)."""
        return sum(1 for waiting in self._unread_per_connection() if waiting > 0)

    def unread_bytes(self) -> int:
        """Bytes of requests a paused broker has not read, over all its connections: grows with each
        request sent to it, also on a connection already holding some."""
        return sum(self._unread_per_connection())

    def _unread_per_connection(self) -> Iterator[int]:
        listening = f"{self.port:04X}"
        for table in ("tcp", "tcp6"):
            for line in Path(f"/proc/{self.rocketmq.netns_pid}/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                local_port, state, queues = fields[1].rsplit(":", 1)[1], fields[3], fields[4]
                if local_port == listening and state == ESTABLISHED:
                    yield int(queues.split(":")[1], 16)

    def log_tail(self, lines: int = 30) -> str:
        tails = []
        for path in (self.home / "broker.out", self.home / "logs" / "rocketmqlogs" / "broker.log"):
            if path.is_file():
                tails.append(f"--- {path.name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:]))
        return "\n".join(tails)


@dataclass
class TwoBrokers:
    """The fixture's cluster (name server + broker-a) with broker-b beside it."""

    cluster: RocketMQFixture
    broker_b: ExtraBroker

    def ensure_running(self) -> None:
        """Restart broker-b if a test left it down or paused."""
        if self.broker_b.running:
            self.broker_b.resume()
            return
        self.broker_b.start()


@contextlib.contextmanager
def registered_broker(rocketmq: RocketMQFixture, name: str, address: str, topics: list[str]) -> Iterator[None]:
    """Announce a broker at `address` (a scripted one: tests/cluster/fake_server.py) to the fixture's
    name server, holding one queue of each topic, for the block. The name server keeps it while the
    registering connection stays open; closing it at the end makes the name server drop it."""
    table = {topic: {"topicName": topic, "readQueueNums": 1, "writeQueueNums": 1, "perm": PERM_READ_WRITE,
                     "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False} for topic in topics}
    body = orjson.dumps({"topicConfigSerializeWrapper": {"topicConfigTable": table}, "filterServerList": []})
    announce = request(REGISTER_BROKER, {"brokerName": name, "brokerAddr": address, "clusterName": CLUSTER,
                                         "haServerAddr": address, "brokerId": 0, "compressed": False,
                                         "bodyCrc32": 0}, body)
    announce.opaque = 1
    with rocketmq.connect_raw(rocketmq.namesrv) as connection:
        connection.sendall(encode_frame(announce))
        answer = decode_frame_payload(_read_exactly(connection, frame_length(_read_exactly(connection,
                                                                                          FRAME_LENGTH.size))))
        assert answer.code == ResponseCode.SUCCESS, f"the name server refused the registration: {answer.remark}"
        yield


def _read_exactly(connection, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        assert chunk, "the name server closed the connection"
        data += chunk
    return data
