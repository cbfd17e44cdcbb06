"""What a message's retry timeline reads from a live cluster: the RocketMQ clients' own trace of it
(RMQ_SYS_TRACE_TOPIC, found by its unique key on every broker holding that topic), the delay
levels of the brokers that scheduled its copies, and the committed offsets of the groups that
consume its topics. A 4.x broker keeps no receive (pop) state and mqlens records no events here."""

from __future__ import annotations

import asyncio

from backend.protocol import ClientTrace, DelayTables, RecordedProgress
from cluster.calls import Calls
from cluster.context import ClusterContext, route_brokers
from cluster.group_views import NO_SUCH_GROUP_CODES
from cluster.remoting.errors import RemotingError, ResponseError
from cluster.remoting.lookups import BROKER_QUERY_MAX, key_matches
from cluster.remoting.models import TopicRoute
from cluster.remoting.namesrv import TopicNotFound
from store.format import topics
from store.format.client_trace import contexts_about
from store.format.codec import StoredMessage
from store.format.delay_levels import DelayLevels

DELAY_LEVELS_SETTING = "messageDelayLevel"


class ClusterTimeline:
    def __init__(self, ctx: ClusterContext):
        self.ctx = ctx

    async def _route(self, calls: Calls, topic: str) -> TopicRoute | None:
        try:
            return await calls.call(None, self.ctx.namesrv.topic_route(topic))
        except TopicNotFound:
            return None
        except RemotingError as exc:
            calls.failed(f"route of {topic}", exc)
            return None

    async def client_trace(self, unique_key: str) -> ClientTrace:
        calls = Calls()
        route = await self._route(calls, topics.TRACE_TOPIC)

        async def of_broker(broker: str, address: str) -> list[StoredMessage]:
            try:
                answer = await calls.call(broker, self.ctx.brokers.query_message(
                    address, topics.TRACE_TOPIC, unique_key, max_num=BROKER_QUERY_MAX))
            except (RemotingError, TimeoutError) as exc:
                calls.failed(broker, exc, address)
                return []
            return [m for m in answer.messages if key_matches(m, topics.TRACE_TOPIC, unique_key, False)]

        holders = route_brokers(route) if route is not None else []
        found = await asyncio.gather(*(of_broker(broker, address) for broker, address in holders))
        return ClientTrace(contexts_about([m for records in found for m in records], unique_key), calls.problems())

    async def delay_tables(self, copies: list[StoredMessage]) -> DelayTables:
        """The table of the broker that stored the first scheduled copy (RocketMQ's default when
        there is none, or it cannot be read: then said in the problems)."""
        hosts = list(dict.fromkeys(str(m.store_host) for m in copies if m.topic == topics.SCHEDULE_TOPIC))
        if not hosts:
            return DelayTables(DelayLevels())
        names = {address: name for name, address in (await self.ctx.broker_addresses()).items()}
        calls, specs = Calls(), {}
        for address in hosts:
            if address not in names:
                continue  # only the cluster's own brokers are asked
            try:
                config = await calls.call(names[address], self.ctx.brokers.broker_config(address))
            except (RemotingError, TimeoutError) as exc:
                calls.failed(names[address], exc, address)
                continue
            if spec := config.get(DELAY_LEVELS_SETTING):
                specs[address] = spec
        problems = calls.problems()
        if len(set(specs.values())) > 1:
            problems.append(f"the brokers' delay levels differ ({', '.join(sorted(specs))}): due times use those "
                            f"of {next(iter(specs))}")
        for address, spec in specs.items():
            try:
                return DelayTables(DelayLevels(spec), problems)
            except ValueError as exc:
                problems.append(f"{address}: unreadable {DELAY_LEVELS_SETTING} {spec[:80]!r}: {exc}")
        problems.append("due times of scheduled copies use RocketMQ's default delay levels")
        return DelayTables(DelayLevels(), problems)

    async def consumer_progress(self, topic_names: list[str]) -> RecordedProgress:
        """The committed offsets, on every topic, of each group a broker holding one of these
        topics names as consuming it."""
        calls = Calls()
        routes = await asyncio.gather(*(self._route(calls, topic) for topic in topic_names))
        holders = sorted({(topic, broker, address) for topic, route in zip(topic_names, routes, strict=True)
                          if route is not None for broker, address in route_brokers(route)})

        async def groups_of(topic: str, broker: str, address: str) -> list[tuple[str, str, str]]:
            try:
                groups = await calls.call(broker, self.ctx.brokers.topics_consumed_by(address, topic))
            except (RemotingError, TimeoutError) as exc:
                calls.failed(broker, exc, address)
                return []
            return [(group, broker, address) for group in groups]

        asked = {pair for pairs in await asyncio.gather(*(groups_of(*h) for h in holders)) for pair in pairs}
        offsets: dict[tuple[str, str], dict[int, int]] = {}

        async def offsets_of(group: str, broker: str, address: str) -> None:
            try:
                stats = await calls.call(broker, self.ctx.brokers.consume_stats(address, group))
            except ResponseError as exc:
                if exc.response_code not in NO_SUCH_GROUP_CODES:
                    calls.failed(broker, exc, address)
                return
            except (RemotingError, TimeoutError) as exc:
                calls.failed(broker, exc, address)
                return
            for (topic, _, queue_id), progress in stats.queues.items():
                if progress.consumer_offset < 0:
                    continue
                queues = offsets.setdefault((topic, group), {})
                # A queue id on two brokers: the hops do not say which broker's queue, so the lower offset.
                queues[queue_id] = min(queues.get(queue_id, progress.consumer_offset), progress.consumer_offset)

        await asyncio.gather(*(offsets_of(*pair) for pair in sorted(asked)))
        return RecordedProgress(offsets, {}, calls.problems())
