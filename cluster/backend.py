"""A live RocketMQ cluster as the console's backend, reached over the remoting protocol.

The remoting client runs on an event loop of its own, in one thread. The services call this
backend's plain methods from request threads; each call waits a bounded time, so a broker that
does not answer shows as a named gap in the answer, never as a request that hangs. The work
itself is done by one part per concern (overview, topic views, group views, message lookups),
all sharing a ClusterContext.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TypeVar

from backend.protocol import (
    BackendUnavailable,
    BackendView,
    BrokerSetting,
    BrokerSettings,
    ClientTrace,
    DeadLetterPage,
    DeadLetterWindow,
    DelayTables,
    GroupConnections,
    GroupList,
    GroupProgress,
    GroupView,
    KeyMatches,
    OffsetResetDone,
    OffsetResetPlan,
    QueueActivity,
    RecordedProgress,
    ResetTarget,
    TopicList,
    TopicView,
)
from cluster import overview
from cluster.broker_settings import ClusterBrokerSettings
from cluster.calls import within
from cluster.context import ClusterContext, ClusterSettings
from cluster.dead_letters import ClusterDeadLetters
from cluster.group_views import ClusterGroups
from cluster.message_lookups import ClusterLookups
from cluster.offsets import ClusterOffsets
from cluster.remoting.acl import AclCredentials
from cluster.remoting.broker import BrokerAdmin
from cluster.remoting.client import ClientOptions, RemotingClient
from cluster.remoting.namesrv import NameServerAdmin
from cluster.timeline import ClusterTimeline
from cluster.topic_views import ClusterTopics
from store.errors import InvalidIdError
from store.format import topics
from store.format.codec import StoredMessage

__all__ = ["ClusterBackend", "ClusterSettings"]

T = TypeVar("T")


class ClusterBackend:
    kind = "cluster"

    def __init__(self, settings: ClusterSettings):
        if not settings.name_servers:
            raise ValueError("at least one name server address is needed")
        self.settings = settings
        hook = None
        if settings.access_key and settings.secret_key:
            hook = AclCredentials(settings.access_key, settings.secret_key).sign
        self._client = RemotingClient(ClientOptions(request_timeout_s=settings.request_timeout_s,
                                                    connect_timeout_s=settings.request_timeout_s,
                                                    socket_factory=settings.socket_factory), request_hook=hook)
        self.ctx = ClusterContext(settings, NameServerAdmin(self._client, settings.name_servers),
                                  BrokerAdmin(self._client))
        self.topic_views = ClusterTopics(self.ctx)
        self.group_views = ClusterGroups(self.ctx, self.topic_views)
        self.lookups = ClusterLookups(self.ctx)
        self.dead_letters = ClusterDeadLetters(self.ctx, self.topic_views, self.lookups)
        self.offsets = ClusterOffsets(self.ctx, self.topic_views, self.group_views)
        self.broker_configs = ClusterBrokerSettings(self.ctx)
        self.timeline = ClusterTimeline(self.ctx)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="cluster-io", daemon=True)
        self._thread.start()

    def run(self, work: Callable[[], Awaitable[T]], deadline_s: float | None = None) -> T:
        """Run `work()` on the remoting loop and wait for it at most the deadline; past it
        BackendUnavailable."""
        deadline_s = deadline_s or self.settings.deadline_s
        future = asyncio.run_coroutine_threadsafe(within(work(), deadline_s), self._loop)
        try:
            return future.result(deadline_s + 1.0)
        except (FutureTimeout, TimeoutError):
            future.cancel()
            raise BackendUnavailable(f"the cluster did not answer within {deadline_s:g} s") from None

    def close(self) -> None:
        if not self._loop.is_closed():
            try:
                asyncio.run_coroutine_threadsafe(self._client.close(), self._loop).result(5)
            finally:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join(5)
                self._loop.close()

    def describe(self) -> BackendView:
        return self.run(lambda: overview.describe(self.ctx))

    # -- topics
    def list_topics(self) -> TopicList:
        return self.run(self.topic_views.list_topics)

    def get_topic(self, name: str) -> TopicView | None:
        return self.run(lambda: self.topic_views.one_topic(name))

    def queue_activity(self, topic: TopicView, since_ms: int | None) -> list[QueueActivity]:
        return self.run(lambda: self.topic_views.queue_activity(topic, since_ms))

    def topic_names(self) -> list[str]:
        return self.run(self.ctx.topic_names)

    # -- groups
    def list_groups(self) -> list[GroupView]:
        return self.run(self.group_views.list_groups)

    def get_group(self, name: str) -> GroupView:
        return self.run(lambda: self.group_views.get_group(name))

    def group_progress(self, group: str) -> GroupProgress:
        return self.run(lambda: self.group_views.group_progress(group))

    def group_summaries(self) -> GroupList:
        return self.run(self.group_views.group_summaries)

    def group_connections(self, group: str) -> GroupConnections | None:
        return self.run(lambda: self.group_views.group_connections(group))

    # -- lookups
    def read_by_offset_id(self, offset_msg_id: str) -> StoredMessage:
        return self.run(lambda: self.lookups.read_by_offset_id(offset_msg_id))

    def query_key(self, key: str, topic_names: list[str], begin_ms: int, end_ms: int, max_results: int,
                  unique: bool) -> KeyMatches:
        if begin_ms > end_ms:
            raise InvalidIdError("the time window begins after it ends")
        return self.run(lambda: self.lookups.query_key(key, topic_names, begin_ms, end_ms, max_results, unique))

    def read_at(self, topic: str, queue_id: int, queue_offset: int, broker: str | None = None) -> StoredMessage:
        return self.run(lambda: self.lookups.read_at(topic, queue_id, queue_offset, broker))

    # -- dead letters
    def dead_letter_page(self, group: str | None, window: DeadLetterWindow, before: tuple[int, int] | None,
                         limit: int) -> DeadLetterPage:
        return self.run(lambda: self.dead_letters.page(group, window, before, limit))

    def resend_dead_letter(self, dead: StoredMessage, actor: str | None, *, topic: str,
                           marks: dict[str, str] | None = None, unique_key: str | None = None,
                           body: bytes | None = None, property_changes: dict[str, str | None] | None = None) -> str:
        return self.run(lambda: self.dead_letters.resend(dead, topic=topic, marks=marks, unique_key=unique_key,
                                                         body=body, property_changes=property_changes))

    def retry_route(self, group: str, origin: str | None) -> str:
        """A 4.x broker knows no pop consumers: a group's retries always go through %RETRY%group."""
        return topics.retry_topic(group)

    def new_unique_key(self) -> str:
        return self.dead_letters.new_unique_key()

    def copy_state(self, group: str, offset_msg_id: str) -> str:
        return self.run(lambda: self.dead_letters.copy_state(group, offset_msg_id))

    # -- operator settings
    def plan_offset_reset(self, group: str, topic: str, target: ResetTarget,
                          queue_id: int | None = None) -> OffsetResetPlan:
        return self.run(lambda: self.offsets.plan(group, topic, target, queue_id))

    def apply_offset_reset(self, plan: OffsetResetPlan) -> OffsetResetDone:
        return self.run(lambda: self.offsets.apply(plan))

    def broker_setting(self, key: str) -> BrokerSetting:
        return self.run(lambda: self.broker_configs.read(key))

    def update_broker_setting(self, key: str, value: str) -> BrokerSetting:
        return self.run(lambda: self.broker_configs.write(key, value))

    # -- broker settings
    def broker_settings(self, name: str, broker_id: int) -> BrokerSettings | None:
        return self.run(lambda: self.broker_configs.of_broker(name, broker_id))

    # -- timeline
    def recorded_events(self, unique_key: str) -> list:
        """None: mqlens records its own trace events only in the embedded store."""
        return []

    def client_trace(self, unique_key: str) -> ClientTrace:
        return self.run(lambda: self.timeline.client_trace(unique_key))

    def delay_tables(self, copies: list[StoredMessage]) -> DelayTables:
        return self.run(lambda: self.timeline.delay_tables(copies))

    def consumer_progress(self, topic_names: list[str]) -> RecordedProgress:
        return self.run(lambda: self.timeline.consumer_progress(topic_names))

    def settled_half_offsets(self) -> None:
        """Not read on a cluster: whether a half message was rolled back or still waits is unknown."""
        return None
