"""Consumer groups on a live cluster: their settings, progress and lag per broker and queue,
retry and dead-letter counts, and the consumers online."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from backend.protocol import (
    BrokerQueueLag,
    ConsumerClientView,
    GroupConnections,
    GroupList,
    GroupProgress,
    GroupSummary,
    GroupView,
)
from cluster.calls import Calls
from cluster.context import ClusterContext
from cluster.remoting.codes import ResponseCode
from cluster.remoting.errors import RemotingError, ResponseError
from cluster.remoting.models import SubscriptionGroup
from cluster.topic_views import ClusterTopics
from store.format import topics

NO_SUCH_GROUP_CODES = (ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,)


class ClusterGroups:
    def __init__(self, ctx: ClusterContext, topic_views: ClusterTopics):
        self.ctx = ctx
        self.topic_views = topic_views

    async def _configs_by_broker(self, calls: Calls) -> AsyncIterator[dict[str, SubscriptionGroup]]:
        """Each master broker's subscription groups, in broker name order; a broker that fails is named."""
        for broker, address in (await self.ctx.broker_addresses()).items():
            try:
                yield await calls.call(broker, self.ctx.brokers.subscription_groups(address))
            except (RemotingError, TimeoutError) as exc:
                calls.failed(broker, exc, address)

    async def list_groups(self, calls: Calls | None = None) -> list[GroupView]:
        merged: dict[str, GroupView] = {}
        async for configs in self._configs_by_broker(calls or Calls()):
            for name, config in configs.items():
                merged.setdefault(name, group_view(config))
        return [merged[name] for name in sorted(merged)]

    async def get_group(self, name: str) -> GroupView:
        """The group's settings from the first broker that has them; the defaults when none does."""
        async for configs in self._configs_by_broker(Calls()):
            if name in configs:
                return group_view(configs[name])
        return GroupView(name, topics.DEFAULT_RETRY_MAX_TIMES, "concurrent", "clustering", 1, True, configured=False,
                         message_model_recorded=False)

    async def group_summaries(self) -> GroupList:
        calls = Calls()
        groups = await self.list_groups(calls)
        names = set(await self.ctx.topic_names())

        async def held(topic: str) -> int:
            view = await self.topic_views.topic(topic, calls) if topic in names else None
            return 0 if view is None else sum(q.max_offset - q.min_offset for q in view.queue_offsets)

        async def summary(group: GroupView) -> GroupSummary:
            progress, retry, dead = await asyncio.gather(self.group_progress(group.name, calls),
                                                         held(topics.retry_topic(group.name)),
                                                         held(topics.dlq_topic(group.name)))
            return GroupSummary(group.name, True, len(progress.queues), sum(q.lag for q in progress.queues),
                                retry, dead)

        found = await asyncio.gather(*(summary(g) for g in groups))
        return GroupList(list(found), calls.problems())

    async def group_connections(self, group: str) -> GroupConnections | None:
        """The first broker that knows the group's consumers answers (each broker hears from all of them)."""
        calls = Calls()
        for broker, address in (await self.ctx.broker_addresses()).items():
            try:
                found = await calls.call(broker, self.ctx.brokers.consumer_connections(address, group))
            except (RemotingError, TimeoutError) as exc:
                calls.failed(broker, exc, address)
                continue
            if found is not None:
                return GroupConnections(
                    [ConsumerClientView(c.client_id, c.address, c.language, c.version_name) for c in found.clients],
                    {topic: sub.expression for topic, sub in sorted(found.subscriptions.items())},
                    found.consume_type, found.message_model, found.consume_from_where, calls.problems())
        if calls.problems():
            return GroupConnections([], {}, "", "", "", calls.problems())
        return None

    async def group_progress(self, group: str, calls: Calls | None = None) -> GroupProgress:
        calls = calls or Calls()
        admin = self.ctx.brokers

        async def of_broker(broker: str, address: str) -> list[BrokerQueueLag]:
            try:
                stats = await calls.call(broker, admin.consume_stats(address, group))
            except ResponseError as exc:
                if exc.response_code in NO_SUCH_GROUP_CODES:
                    return []  # this broker has no offsets of the group
                calls.failed(broker, exc, address)
                return []
            except (RemotingError, TimeoutError) as exc:
                calls.failed(broker, exc, address)
                return []
            rows = []
            for (topic, broker_name, queue_id), progress in stats.queues.items():
                try:
                    low = await calls.call(broker, admin.min_offset(address, topic, queue_id))
                except (RemotingError, TimeoutError):
                    low = 0
                committed, high = progress.consumer_offset, progress.broker_offset
                rows.append(BrokerQueueLag(topic, queue_id, committed, low, high, max(0, high - max(committed, low)),
                                           0 <= committed < low, broker_name))
            return rows

        brokers = await self.ctx.broker_addresses()
        found = [row for rows in await asyncio.gather(*(of_broker(b, a) for b, a in brokers.items())) for row in rows]
        found.sort(key=lambda r: (topics.is_system_topic(r.topic), r.topic, r.broker or "", r.queue_id))
        return GroupProgress(found, calls.problems())


def group_view(config: SubscriptionGroup) -> GroupView:
    # RocketMQ 4.x keeps neither the consume mode nor the message model with the group: the clients choose them.
    return GroupView(config.name, config.retry_max_times, "concurrent", "clustering", config.retry_queues,
                     config.consume_enable, configured=True, message_model_recorded=False)
