"""Topics on a live cluster: routes, queues per broker, their offsets and last update."""

from __future__ import annotations

import asyncio

from backend.protocol import BackendUnavailable, QueueActivity, QueueOffsets, TopicList, TopicView
from cluster.calls import Calls
from cluster.context import ClusterContext, route_brokers
from cluster.remoting.errors import RemotingError
from cluster.remoting.namesrv import TopicNotFound
from store.format import topics
from store.format.topics import PERM_READ, PERM_WRITE


class ClusterTopics:
    def __init__(self, ctx: ClusterContext):
        self.ctx = ctx

    async def list_topics(self) -> TopicList:
        try:
            names = await self.ctx.namesrv.topic_list()
        except RemotingError as exc:
            raise self.ctx.no_name_server(exc) from None
        calls = Calls()
        views = await asyncio.gather(*(self.topic(name, calls) for name in names))
        return TopicList([v for v in views if v is not None], calls.problems())

    async def one_topic(self, name: str) -> TopicView | None:
        return await self.topic(name, Calls(), unreadable_route_raises=True)

    async def topic(self, name: str, calls: Calls, unreadable_route_raises: bool = False) -> TopicView | None:
        try:
            route = await calls.call(None, self.ctx.namesrv.topic_route(name))
        except TopicNotFound:
            return None
        except RemotingError as exc:
            if unreadable_route_raises:
                raise BackendUnavailable(f"no name server gave the route of {name}: {exc}") from None
            calls.failed(f"route of {name}", exc)
            return None
        offsets = []
        for broker_name, address in route_brokers(route):
            if calls.is_down(broker_name):
                continue
            try:
                stats = await calls.call(broker_name, self.ctx.brokers.topic_stats(address, name))
            except (RemotingError, TimeoutError) as exc:
                calls.failed(broker_name, exc, address)
                continue
            offsets += [QueueOffsets(queue_id, q.min_offset, q.max_offset, broker, q.last_update_ms)
                        for (_, broker, queue_id), q in stats.queues.items()]
        perm = max((q.perm for q in route.queues), default=0)
        return TopicView(name, sum(q.write_queues for q in route.queues), perm, bool(perm & PERM_READ),
                         bool(perm & PERM_WRITE), topics.copy_kind(name), topics.is_system_topic(name),
                         sorted(offsets, key=lambda q: (q.broker or "", q.queue_id)))

    async def queue_activity(self, topic: TopicView, since_ms: int | None) -> list[QueueActivity]:
        addresses = await self.ctx.broker_addresses()
        timeout_s = self.ctx.settings.request_timeout_s

        async def one(q: QueueOffsets) -> QueueActivity:
            newest = q.last_update_ms if q.max_offset > q.min_offset else None
            if since_ms is None or q.max_offset <= q.min_offset:
                return QueueActivity(newest, None if since_ms is None else 0)
            address = addresses.get(q.broker or "")
            try:
                first = await asyncio.wait_for(self.ctx.brokers.offset_by_time(address, topic.name, q.queue_id,
                                                                               since_ms), timeout_s) \
                    if address else None
            except (RemotingError, TimeoutError):
                first = None
            return QueueActivity(newest, None if first is None else max(0, q.max_offset - max(first, q.min_offset)))

        return list(await asyncio.gather(*(one(q) for q in topic.queue_offsets)))
