"""What every part of the cluster backend shares: the settings, the name server and broker admin
calls, and the questions each part asks the name server first."""

from __future__ import annotations

from dataclasses import dataclass, field

from backend.protocol import BackendUnavailable
from cluster.remoting.broker import BrokerAdmin
from cluster.remoting.connection import SocketFactory
from cluster.remoting.errors import RemotingError
from cluster.remoting.models import TopicRoute
from cluster.remoting.namesrv import NameServerAdmin


@dataclass(frozen=True)
class ClusterSettings:
    name_servers: list[str]
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    request_timeout_s: float = 3.0
    deadline_s: float = 5.0  # what one console request waits for the brokers together
    socket_factory: SocketFactory | None = field(default=None, compare=False)


@dataclass
class ClusterContext:
    settings: ClusterSettings
    namesrv: NameServerAdmin
    brokers: BrokerAdmin

    def no_name_server(self, exc: BaseException) -> BackendUnavailable:
        return BackendUnavailable(f"no name server answered ({'; '.join(self.settings.name_servers)}): {exc}")

    async def broker_addresses(self) -> dict[str, str]:
        """Broker name -> the address to ask (its master, else a slave)."""
        try:
            info = await self.namesrv.broker_cluster_info()
        except RemotingError as exc:
            raise self.no_name_server(exc) from None
        return {name: addr for name, data in sorted(info.brokers.items()) if (addr := data.pick_address())}

    async def topic_names(self) -> list[str]:
        try:
            return sorted(await self.namesrv.topic_list())
        except RemotingError as exc:
            raise self.no_name_server(exc) from None


def route_brokers(route: TopicRoute) -> list[tuple[str, str]]:
    """(broker name, address to ask) of each broker holding the topic's queues."""
    addresses = {b.broker_name: b.pick_address() for b in route.brokers}
    return sorted({(q.broker_name, addr) for q in route.queues if (addr := addresses.get(q.broker_name))})
