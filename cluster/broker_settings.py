"""Broker settings on a live cluster: one setting as every broker (masters and slaves) has it,
and its write to all of them (UPDATE_BROKER_CONFIG); every setting of one broker."""

from __future__ import annotations

import asyncio

from backend.protocol import BrokerSetting, BrokerSettings, BrokerSettingValue
from cluster.calls import Calls
from cluster.context import ClusterContext
from cluster.remoting.errors import RemotingError
from cluster.remoting.models import MASTER_ID


class ClusterBrokerSettings:
    def __init__(self, ctx: ClusterContext):
        self.ctx = ctx

    async def _every_broker(self) -> list[tuple[str, str]]:
        """(name, address) of every broker; a slave's name carries its id."""
        try:
            info = await self.ctx.namesrv.broker_cluster_info()
        except RemotingError as exc:
            raise self.ctx.no_name_server(exc) from None
        return [(name if broker_id == MASTER_ID else f"{name} (slave {broker_id})", address)
                for name, data in sorted(info.brokers.items()) for broker_id, address in data.addresses.items()]

    async def read(self, key: str, calls: Calls | None = None) -> BrokerSetting:
        calls = calls or Calls()

        async def of(broker: str, address: str) -> BrokerSettingValue:
            try:
                config = await calls.call(broker, self.ctx.brokers.broker_config(address))
            except (RemotingError, TimeoutError) as exc:
                calls.failed(broker, exc, address)
                return BrokerSettingValue(broker, address, None, f"did not answer: {exc or type(exc).__name__}")
            return BrokerSettingValue(broker, address, config.get(key))

        found = await asyncio.gather(*(of(broker, address) for broker, address in await self._every_broker()))
        return BrokerSetting(key, list(found), calls.problems())

    async def write(self, key: str, value: str) -> BrokerSetting:
        calls = Calls()

        async def to(broker: str, address: str) -> None:
            try:
                await calls.call(broker, self.ctx.brokers.update_broker_config(address, {key: value}))
            except (RemotingError, TimeoutError) as exc:
                calls.failed(broker, exc, address)

        await asyncio.gather(*(to(broker, address) for broker, address in await self._every_broker()))
        return await self.read(key, calls)

    async def of_broker(self, name: str, broker_id: int) -> BrokerSettings | None:
        """GET_BROKER_CONFIG of one broker; a broker that does not answer gives no settings and names why."""
        try:
            info = await self.ctx.namesrv.broker_cluster_info()
        except RemotingError as exc:
            raise self.ctx.no_name_server(exc) from None
        data = info.brokers.get(name)
        address = data.addresses.get(broker_id) if data is not None else None
        if address is None:
            return None
        try:
            config = await asyncio.wait_for(self.ctx.brokers.broker_config(address),
                                            self.ctx.settings.request_timeout_s)
        except (RemotingError, TimeoutError) as exc:
            return BrokerSettings(name, broker_id, address, {},
                                  [f"broker {name} ({address}) did not answer: {exc or type(exc).__name__}"])
        return BrokerSettings(name, broker_id, address, dict(sorted(config.items())))
