"""What the console sees of the cluster: its name servers, brokers, their roles, versions and rates."""

from __future__ import annotations

import asyncio

from backend.protocol import BackendView, BrokerView, ClusterView
from cluster.context import ClusterContext
from cluster.remoting.errors import RemotingError


async def describe(ctx: ClusterContext) -> BackendView:
    servers = list(ctx.settings.name_servers)
    try:
        info = await ctx.namesrv.broker_cluster_info()
    except RemotingError as exc:
        return BackendView(kind="cluster", name_servers=servers,
                           problems=[f"no name server answered ({'; '.join(servers)}): {exc}"])
    seen: list[tuple[str, str, int, str]] = []
    for cluster, names in sorted(info.clusters.items()):
        for name in names:
            data = info.brokers.get(name)
            for broker_id, address in sorted((data.addresses if data else {}).items()):
                seen.append((cluster, name, broker_id, address))
    views = await asyncio.gather(*(_broker_view(ctx, *entry) for entry in seen))
    clusters = [ClusterView(cluster, [v for v in views if v.cluster == cluster]) for cluster in sorted(info.clusters)]
    problems = [f"broker {v.name} ({v.address}) did not answer: {v.error}" for v in views if v.error]
    return BackendView(kind="cluster", name_servers=servers, clusters=clusters, problems=problems)


async def _broker_view(ctx: ClusterContext, cluster: str, name: str, broker_id: int, address: str) -> BrokerView:
    try:
        table = await asyncio.wait_for(ctx.brokers.runtime_info(address), ctx.settings.request_timeout_s)
    except (RemotingError, TimeoutError) as exc:
        return BrokerView(cluster, name, broker_id, address, error=str(exc) or type(exc).__name__)
    return BrokerView(cluster, name, broker_id, address, version=table.get("brokerVersionDesc"),
                      put_tps=_first_number(table.get("putTps")),
                      get_tps=_first_number(table.get("getTransferedTps")),
                      commitlog_max_offset=_integer(table.get("commitLogMaxOffset")),
                      earliest_message_ms=_integer(table.get("earliestMessageTimeStamp")))


def _first_number(text: str | None) -> float | None:
    """RocketMQ's rates read '12.50 11.80 10.02' (the last 10 s, 1 min, 10 min): the first."""
    parts = (text or "").split()
    try:
        return float(parts[0]) if parts else None
    except ValueError:
        return None


def _integer(text: str | None) -> int | None:
    try:
        return int(text) if text else None
    except ValueError:
        return None
