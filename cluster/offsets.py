"""A consumer group's offsets reset on a live cluster: planned from each broker's queues and the
group's committed offsets there, applied through the group's consumers online (the brokers tell
them, INVOKE_BROKER_TO_RESET_OFFSET) or, with none online, by writing the committed offsets."""

from __future__ import annotations

import asyncio
from itertools import groupby

from backend.protocol import (
    BackendRefused,
    BrokerQueueReset,
    OffsetResetDone,
    OffsetResetPlan,
    QueueOffsets,
    ResetTarget,
    queue_reset,
)
from cluster.calls import Calls
from cluster.context import ClusterContext
from cluster.group_views import ClusterGroups
from cluster.remoting.errors import RemotingError
from cluster.topic_views import ClusterTopics

LATEST_TIMESTAMP = -1  # what INVOKE_BROKER_TO_RESET_OFFSET takes for "the max offsets"
EARLIEST_TIMESTAMP = 0


def through_consumers_refusal(plan: OffsetResetPlan) -> str | None:
    """Why a reset cannot go through the group's consumers online, or None when it can: the brokers
    move every queue of the topic to a time, never one queue or an exact offset."""
    if plan.target.kind == "offset":
        return "a reset to an exact offset"
    if plan.queue_id is not None:
        return "a reset of one queue"
    return None


class ClusterOffsets:
    def __init__(self, ctx: ClusterContext, topic_views: ClusterTopics, group_views: ClusterGroups):
        self.ctx = ctx
        self.topic_views = topic_views
        self.group_views = group_views

    async def plan(self, group: str, topic: str, target: ResetTarget, queue_id: int | None) -> OffsetResetPlan:
        calls = Calls()
        view = await self.topic_views.topic(topic, calls, unreadable_route_raises=True)
        queues = [] if view is None else [q for q in view.queue_offsets if queue_id in (None, q.queue_id)]
        addresses = await self.ctx.broker_addresses()

        async def planned(q: QueueOffsets) -> BrokerQueueReset | None:
            broker = q.broker or ""
            address = addresses.get(broker)
            if address is None:
                calls.failed(broker, LookupError("the name server names no address for it now"))
                return None
            try:
                before = await calls.call(broker, self.ctx.brokers.consumer_offset(address, group, topic, q.queue_id))
                wanted = await self._wanted(calls, broker, address, topic, q, target)
            except (RemotingError, TimeoutError) as exc:
                calls.failed(broker, exc, address)
                return None
            return queue_reset(broker, q.queue_id, q.min_offset, q.max_offset, before, wanted)

        rows, connections = await asyncio.gather(asyncio.gather(*(planned(q) for q in queues)),
                                                 self.group_views.group_connections(group))
        online = bool(connections and connections.clients and topic in connections.subscriptions)
        problems = calls.problems() + (connections.problems if connections else [])
        return OffsetResetPlan(group, topic, target, queue_id, [r for r in rows if r is not None], online,
                               sorted(set(problems)))

    async def _wanted(self, calls: Calls, broker: str, address: str, topic: str, q: QueueOffsets,
                      target: ResetTarget) -> int:
        if target.kind == "earliest":
            return q.min_offset
        if target.kind == "latest":
            return q.max_offset
        if target.kind == "time":
            return await calls.call(broker, self.ctx.brokers.offset_by_time(address, topic, q.queue_id,
                                                                            target.value or 0))
        return target.value or 0

    async def apply(self, plan: OffsetResetPlan) -> OffsetResetDone:
        calls = Calls()
        addresses = await self.ctx.broker_addresses()
        by_broker = {}
        for broker, rows in groupby(sorted(plan.queues, key=lambda r: r.broker), key=lambda r: r.broker):
            if broker in addresses:
                by_broker[broker] = list(rows)
            else:
                calls.failed(broker, LookupError("the name server names no address for it now"))
        if plan.consumers_online:
            refusal = through_consumers_refusal(plan)
            if refusal:
                raise BackendRefused(f"consumers of {plan.group} are online: {refusal} needs them stopped")
            work = [self._through_consumers(calls, plan, addresses[b], b, rows) for b, rows in by_broker.items()]
        else:
            work = [self._committed(calls, plan, addresses[b], b, rows) for b, rows in by_broker.items()]
        done = [row for rows in await asyncio.gather(*work) for row in rows]
        return OffsetResetDone(done, "consumers" if plan.consumers_online else "offsets", calls.problems())

    async def _through_consumers(self, calls: Calls, plan: OffsetResetPlan, address: str, broker: str,
                                 rows: list[BrokerQueueReset]) -> list[BrokerQueueReset]:
        timestamp = {"earliest": EARLIEST_TIMESTAMP, "latest": LATEST_TIMESTAMP}.get(plan.target.kind,
                                                                                     plan.target.value or 0)
        try:
            set_to = await calls.call(broker, self.ctx.brokers.reset_offset_by_time(address, plan.group, plan.topic,
                                                                                    timestamp))
        except (RemotingError, TimeoutError) as exc:
            calls.failed(broker, exc, address)
            return []
        return [queue_reset(broker, r.queue_id, r.min_offset, r.max_offset, r.before, set_to[r.queue_id])
                for r in rows if r.queue_id in set_to]

    async def _committed(self, calls: Calls, plan: OffsetResetPlan, address: str, broker: str,
                         rows: list[BrokerQueueReset]) -> list[BrokerQueueReset]:
        done = []
        for row in rows:
            try:
                await calls.call(broker, self.ctx.brokers.update_consumer_offset(address, plan.group, plan.topic,
                                                                                 row.queue_id, row.after))
            except (RemotingError, TimeoutError) as exc:
                calls.failed(broker, exc, address)
                break
            done.append(row)
        return done
