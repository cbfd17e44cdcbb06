"""A live RocketMQ cluster as the console's backend, reached over the remoting protocol.

The remoting client runs on an event loop of its own, in one thread. The services call this
backend's plain methods from request threads; each call waits a bounded time, so a broker that
does not answer shows as a named gap in the answer, never as a request that hangs.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import TypeVar

from backend.protocol import (
    BackendRefused,
    BackendUnavailable,
    BackendView,
    BrokerQueueLag,
    BrokerView,
    ClusterView,
    ConsumerClientView,
    GroupConnections,
    GroupList,
    GroupProgress,
    GroupSummary,
    GroupView,
    KeyMatches,
    QueueActivity,
    QueueOffsets,
    TopicList,
    TopicView,
)
from cluster.remoting.acl import AclCredentials
from cluster.remoting.broker import BrokerAdmin
from cluster.remoting.client import ClientOptions, RemotingClient
from cluster.remoting.codes import ResponseCode
from cluster.remoting.connection import SocketFactory
from cluster.remoting.errors import RemotingError, ResponseError
from cluster.remoting.lookups import BROKER_QUERY_MAX, key_matches
from cluster.remoting.models import SubscriptionGroup, TopicRoute
from cluster.remoting.namesrv import NameServerAdmin, TopicNotFound
from store.errors import InvalidIdError, MessageNotFoundError
from store.format import topics
from store.format.codec import StoredMessage
from store.format.ids import decode_offset_msg_id

T = TypeVar("T")
PERM_READ, PERM_WRITE = 4, 2
MAX_CONCURRENT_CALLS = 16  # calls one console request has in flight at once
DEFAULT_RETRY_MAX_TIMES = 16  # a group's maxReconsumeTimes when nobody set it
NO_SUCH_GROUP_CODES = (ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,)
MAX_TOPICS_SEARCHED = 256  # a key looked up in every topic: at most this many, the rest named as not searched
SEARCH_SHARE_OF_DEADLINE = 0.8  # a key search stops here and answers what it found, naming what did not answer


@dataclass(frozen=True)
class ClusterSettings:
    name_servers: list[str]
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    request_timeout_s: float = 3.0
    deadline_s: float = 5.0  # what one console request waits for the brokers together
    socket_factory: SocketFactory | None = field(default=None, compare=False)


class ClusterUnreachable(Exception):
    """No name server answered."""


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
        self.namesrv = NameServerAdmin(self._client, settings.name_servers)
        self.brokers = BrokerAdmin(self._client)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="cluster-io", daemon=True)
        self._thread.start()

    def run(self, work: Callable[[], Awaitable[T]], deadline_s: float | None = None) -> T:
        """Run `work()` on the remoting loop and wait for it at most the deadline; past it
        BackendUnavailable."""
        deadline_s = deadline_s or self.settings.deadline_s
        future = asyncio.run_coroutine_threadsafe(_within(work(), deadline_s), self._loop)
        try:
            return future.result(deadline_s + 1.0)
        except (FutureTimeout, TimeoutError):
            future.cancel()
            raise BackendUnavailable(f"the cluster did not answer within {deadline_s:g} s") from None

    def describe(self) -> BackendView:
        return self.run(self._describe)

    async def _describe(self) -> BackendView:
        servers = list(self.settings.name_servers)
        try:
            info = await self.namesrv.broker_cluster_info()
        except RemotingError as exc:
            return BackendView(kind="cluster", name_servers=servers,
                               problems=[f"no name server answered ({'; '.join(servers)}): {exc}"])
        seen: list[tuple[str, str, int, str]] = []
        for cluster, names in sorted(info.clusters.items()):
            for name in names:
                data = info.brokers.get(name)
                for broker_id, address in sorted((data.addresses if data else {}).items()):
                    seen.append((cluster, name, broker_id, address))
        views = await asyncio.gather(*(self._broker_view(*entry) for entry in seen))
        clusters = [ClusterView(cluster, [v for v in views if v.cluster == cluster])
                    for cluster in sorted(info.clusters)]
        problems = [f"broker {v.name} ({v.address}) did not answer: {v.error}" for v in views if v.error]
        return BackendView(kind="cluster", name_servers=servers, clusters=clusters, problems=problems)

    async def _broker_view(self, cluster: str, name: str, broker_id: int, address: str) -> BrokerView:
        try:
            table = await asyncio.wait_for(self.brokers.runtime_info(address), self.settings.request_timeout_s)
        except (RemotingError, TimeoutError) as exc:
            return BrokerView(cluster, name, broker_id, address, error=str(exc) or type(exc).__name__)
        return BrokerView(cluster, name, broker_id, address, version=table.get("brokerVersionDesc"),
                          put_tps=_first_number(table.get("putTps")),
                          get_tps=_first_number(table.get("getTransferedTps")),
                          commitlog_max_offset=_integer(table.get("commitLogMaxOffset")),
                          earliest_message_ms=_integer(table.get("earliestMessageTimeStamp")))

    def list_topics(self) -> TopicList:
        return self.run(self._list_topics)

    def get_topic(self, name: str) -> TopicView | None:
        return self.run(lambda: self._one_topic(name))

    def queue_activity(self, topic: TopicView, since_ms: int | None) -> list[QueueActivity]:
        return self.run(lambda: self._queue_activity(topic, since_ms))

    async def _list_topics(self) -> TopicList:
        try:
            names = await self.namesrv.topic_list()
        except RemotingError as exc:
            raise BackendUnavailable(f"no name server answered ({'; '.join(self.settings.name_servers)}): {exc}") \
                from None
        calls = _Calls()
        views = await asyncio.gather(*(self._topic(name, calls) for name in names))
        return TopicList([v for v in views if v is not None], calls.problems())

    async def _one_topic(self, name: str) -> TopicView | None:
        return await self._topic(name, _Calls(), unreadable_route_raises=True)

    async def _topic(self, name: str, calls: _Calls, unreadable_route_raises: bool = False) -> TopicView | None:
        try:
            route = await calls.call(None, self.namesrv.topic_route(name))
        except TopicNotFound:
            return None
        except RemotingError as exc:
            if unreadable_route_raises:
                raise BackendUnavailable(f"no name server gave the route of {name}: {exc}") from None
            calls.failed(f"route of {name}", exc)
            return None
        offsets = []
        for broker_name, address in _route_brokers(route):
            if calls.is_down(broker_name):
                continue
            try:
                stats = await calls.call(broker_name, self.brokers.topic_stats(address, name))
            except (RemotingError, TimeoutError) as exc:
                calls.failed(broker_name, exc, address)
                continue
            offsets += [QueueOffsets(queue_id, q.min_offset, q.max_offset, broker, q.last_update_ms)
                        for (_, broker, queue_id), q in stats.queues.items()]
        perm = max((q.perm for q in route.queues), default=0)
        return TopicView(name, sum(q.write_queues for q in route.queues), perm, bool(perm & PERM_READ),
                         bool(perm & PERM_WRITE), topics.copy_kind(name), topics.is_system_topic(name),
                         sorted(offsets, key=lambda q: (q.broker or "", q.queue_id)))

    async def _queue_activity(self, topic: TopicView, since_ms: int | None) -> list[QueueActivity]:
        addresses = await self._broker_addresses()

        async def one(q: QueueOffsets) -> QueueActivity:
            newest = q.last_update_ms if q.max_offset > q.min_offset else None
            if since_ms is None or q.max_offset <= q.min_offset:
                return QueueActivity(newest, None if since_ms is None else 0)
            address = addresses.get(q.broker or "")
            try:
                first = await asyncio.wait_for(self.brokers.offset_by_time(address, topic.name, q.queue_id, since_ms),
                                               self.settings.request_timeout_s) if address else None
            except (RemotingError, TimeoutError):
                first = None
            return QueueActivity(newest, None if first is None else max(0, q.max_offset - max(first, q.min_offset)))

        return list(await asyncio.gather(*(one(q) for q in topic.queue_offsets)))

    async def _broker_addresses(self) -> dict[str, str]:
        """Broker name -> the address to ask (its master, else a slave)."""
        try:
            info = await self.namesrv.broker_cluster_info()
        except RemotingError as exc:
            raise BackendUnavailable(f"no name server answered ({'; '.join(self.settings.name_servers)}): {exc}") \
                from None
        return {name: addr for name, data in sorted(info.brokers.items()) if (addr := data.pick_address())}

    def list_groups(self) -> list[GroupView]:
        return self.run(self._list_groups)

    def get_group(self, name: str) -> GroupView:
        found = {g.name: g for g in self.list_groups()}
        return found.get(name) or GroupView(name, DEFAULT_RETRY_MAX_TIMES, "concurrent", "clustering", 1, True,
                                            configured=False, message_model_recorded=False)

    def group_progress(self, group: str) -> GroupProgress:
        return self.run(lambda: self._group_progress(group))

    async def _list_groups(self, calls: _Calls | None = None) -> list[GroupView]:
        calls, merged = calls or _Calls(), {}
        for broker, address in (await self._broker_addresses()).items():
            try:
                configs = await calls.call(broker, self.brokers.subscription_groups(address))
            except (RemotingError, TimeoutError) as exc:
                calls.failed(broker, exc, address)
                continue
            for name, config in configs.items():
                merged.setdefault(name, _group_view(config))
        return [merged[name] for name in sorted(merged)]

    def group_summaries(self) -> GroupList:
        return self.run(self._group_summaries)

    def group_connections(self, group: str) -> GroupConnections | None:
        return self.run(lambda: self._group_connections(group))

    async def _group_summaries(self) -> GroupList:
        calls = _Calls()
        groups = await self._list_groups(calls)
        try:
            names = set(await self.namesrv.topic_list())
        except RemotingError as exc:
            raise BackendUnavailable(f"no name server answered ({'; '.join(self.settings.name_servers)}): {exc}") \
                from None

        async def held(topic: str) -> int:
            view = await self._topic(topic, calls) if topic in names else None
            return 0 if view is None else sum(q.max_offset - q.min_offset for q in view.queue_offsets)

        async def summary(group: GroupView) -> GroupSummary:
            progress, retry, dead = await asyncio.gather(self._group_progress(group.name, calls),
                                                         held(topics.retry_topic(group.name)),
                                                         held(topics.dlq_topic(group.name)))
            return GroupSummary(group.name, True, len(progress.queues), sum(q.lag for q in progress.queues),
                                retry, dead)

        found = await asyncio.gather(*(summary(g) for g in groups))
        return GroupList(list(found), calls.problems())

    async def _group_connections(self, group: str) -> GroupConnections | None:
        """The first broker that knows the group's consumers answers (each broker hears from all of them)."""
        calls = _Calls()
        for broker, address in (await self._broker_addresses()).items():
            try:
                found = await calls.call(broker, self.brokers.consumer_connections(address, group))
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

    async def _group_progress(self, group: str, calls: _Calls | None = None) -> GroupProgress:
        calls = calls or _Calls()

        async def of_broker(broker: str, address: str) -> list[BrokerQueueLag]:
            try:
                stats = await calls.call(broker, self.brokers.consume_stats(address, group))
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
                    low = await calls.call(broker, self.brokers.min_offset(address, topic, queue_id))
                except (RemotingError, TimeoutError):
                    low = 0
                committed, high = progress.consumer_offset, progress.broker_offset
                rows.append(BrokerQueueLag(topic, queue_id, committed, low, high, max(0, high - max(committed, low)),
                                           0 <= committed < low, broker_name))
            return rows

        brokers = await self._broker_addresses()
        found = [row for rows in await asyncio.gather(*(of_broker(b, a) for b, a in brokers.items())) for row in rows]
        found.sort(key=lambda r: (topics.is_system_topic(r.topic), r.topic, r.broker or "", r.queue_id))
        return GroupProgress(found, calls.problems())

    def close(self) -> None:
        if not self._loop.is_closed():
            try:
                asyncio.run_coroutine_threadsafe(self._client.close(), self._loop).result(5)
            finally:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join(5)
                self._loop.close()

    # -- lookups
    def topic_names(self) -> list[str]:
        return self.run(self._topic_names)

    async def _topic_names(self) -> list[str]:
        try:
            return sorted(await self.namesrv.topic_list())
        except RemotingError as exc:
            raise BackendUnavailable(f"no name server answered ({'; '.join(self.settings.name_servers)}): {exc}") \
                from None

    def read_by_offset_id(self, offset_msg_id: str) -> StoredMessage:
        return self.run(lambda: self._read_by_offset_id(offset_msg_id))

    async def _read_by_offset_id(self, offset_msg_id: str) -> StoredMessage:
        host, phys_offset = decode_offset_msg_id(offset_msg_id)
        address = str(host)
        try:
            info = await self.namesrv.broker_cluster_info()
        except RemotingError as exc:
            raise BackendUnavailable(f"no name server answered ({'; '.join(self.settings.name_servers)}): {exc}") \
                from None
        # Only the cluster's own brokers are asked: an id is any 16 bytes, and a unique key looks like one.
        names = {addr: name for name, data in info.brokers.items() for addr in data.addresses.values()}
        if address not in names:
            raise MessageNotFoundError(f"no message with offset id {offset_msg_id} (it names {address}, which is "
                                       f"no broker of this cluster)")
        where = f"broker {names[address]} ({address})"
        try:
            msg = await self.brokers.view_message(address, phys_offset)
        except ResponseError as exc:
            raise MessageNotFoundError(f"no message with offset id {offset_msg_id} ({where} has none at commit log "
                                       f"offset {phys_offset}: {exc.remark or exc.response_code})") from None
        except (RemotingError, TimeoutError) as exc:
            raise BackendUnavailable(f"{where} did not answer: {exc or type(exc).__name__}") from None
        if msg.offset_msg_id != offset_msg_id.upper():
            raise MessageNotFoundError(f"no message with offset id {offset_msg_id} (it names another offset)")
        return msg

    def query_key(self, key: str, topic_names: list[str], begin_ms: int, end_ms: int, max_results: int,
                  unique: bool) -> KeyMatches:
        if begin_ms > end_ms:
            raise InvalidIdError("the time window begins after it ends")
        return self.run(lambda: self._query_key(key, topic_names, begin_ms, end_ms, max_results, unique))

    async def _query_key(self, key: str, topic_names: list[str], begin_ms: int, end_ms: int, max_results: int,
                         unique: bool) -> KeyMatches:
        calls, searched = _Calls(), topic_names[:MAX_TOPICS_SEARCHED]
        notes = [] if len(searched) == len(topic_names) else [
            f"searched {len(searched)} of {len(topic_names)} topics (the first by name): name a topic to search it"]
        tasks = {asyncio.ensure_future(self._query_topic(calls, name, key, begin_ms, end_ms, max_results, unique)):
                 name for name in searched}
        done, late = await asyncio.wait(tasks, timeout=self.settings.deadline_s * SEARCH_SHARE_OF_DEADLINE) \
            if tasks else (set(), set())
        for task in late:
            task.cancel()
        if late:
            notes.append(f"{len(late)} topics did not answer before the deadline: "
                         f"{', '.join(sorted(tasks[t] for t in late)[:10])}")
        found, truncated = [], bool(notes)
        for task in done:
            messages, cut = task.result()
            found += messages
            truncated |= cut
        found.sort(key=lambda m: (m.store_timestamp, m.phys_offset), reverse=True)
        if len(found) > max_results:
            found, truncated = found[:max_results], True
        return KeyMatches(found, truncated, searched, calls.problems() + notes)

    async def _query_topic(self, calls: _Calls, topic: str, key: str, begin_ms: int, end_ms: int, max_results: int,
                           unique: bool) -> tuple[list[StoredMessage], bool]:
        """(the topic's matches on every broker holding it, whether a broker may have had more)."""
        try:
            route = await calls.call(None, self.namesrv.topic_route(topic))
        except TopicNotFound:
            return [], False
        except RemotingError as exc:
            calls.failed(f"route of {topic}", exc)
            return [], False

        async def of_broker(broker: str, address: str) -> tuple[list[StoredMessage], bool]:
            try:
                answer = await calls.call(broker, self.brokers.query_message(
                    address, topic, key, max_num=max_results, begin_ms=begin_ms, end_ms=end_ms, unique_key=unique))
            except (RemotingError, TimeoutError) as exc:
                calls.failed(broker, exc, address)
                return [], False
            kept = [m for m in answer.messages
                    if key_matches(m, topic, key, unique) and begin_ms <= m.store_timestamp <= end_ms]
            return kept, len(answer.messages) >= min(max_results, BROKER_QUERY_MAX)

        answers = await asyncio.gather(*(of_broker(b, a) for b, a in _route_brokers(route) if not calls.is_down(b)))
        return [m for messages, _ in answers for m in messages], any(cut for _, cut in answers)

    def read_at(self, topic: str, queue_id: int, queue_offset: int, broker: str | None = None) -> StoredMessage:
        return self.run(lambda: self._read_at(topic, queue_id, queue_offset, broker))

    async def _read_at(self, topic: str, queue_id: int, queue_offset: int, broker: str | None) -> StoredMessage:
        try:
            route = await self.namesrv.topic_route(topic)
        except TopicNotFound:
            raise MessageNotFoundError(f"no topic {topic} on this cluster") from None
        except RemotingError as exc:
            raise BackendUnavailable(f"no name server gave the route of {topic}: {exc}") from None
        holders = dict(_route_brokers(route))
        if broker is None and len(holders) > 1:
            raise BackendRefused(f"topic {topic} has queues on brokers {', '.join(sorted(holders))}: "
                                 f"name the queue's broker (broker=...)")
        name = broker if broker is not None else next(iter(holders), None)
        if name not in holders:
            raise MessageNotFoundError(f"no queue of topic {topic} on broker {name} (it is on "
                                       f"{', '.join(sorted(holders)) or 'no broker'})")
        where = f"{topic}:{queue_id}:{queue_offset} on broker {name}"
        try:
            msg = await self.brokers.pull_one(holders[name], topic, queue_id, queue_offset)
        except ResponseError as exc:
            raise MessageNotFoundError(f"no message at {where}: {exc.remark or exc.response_code}") from None
        except (RemotingError, TimeoutError) as exc:
            raise BackendUnavailable(f"broker {name} ({holders[name]}) did not answer: {exc}") from None
        if msg is None:
            raise MessageNotFoundError(f"no message at {where} (before the queue's first offset, or past its last)")
        return msg


class _Calls:
    """The calls of one console request: at most MAX_CONCURRENT_CALLS at once, each bounded; a
    broker that failed once is not asked again within the request, and is named once."""

    def __init__(self):
        self._slots = asyncio.Semaphore(MAX_CONCURRENT_CALLS)
        self._failures: dict[str, str] = {}

    async def call(self, broker: str | None, work: Awaitable[T]) -> T:
        async with self._slots:
            if broker is not None and broker in self._failures:
                work.close()  # never awaited: the broker already failed
                raise TimeoutError(self._failures[broker])
            return await work

    def is_down(self, broker: str) -> bool:
        return broker in self._failures

    def failed(self, what: str, exc: BaseException, address: str | None = None) -> None:
        where = f"broker {what} ({address})" if address else what
        self._failures.setdefault(what, f"{where} did not answer: {exc or type(exc).__name__}")

    def problems(self) -> list[str]:
        return sorted(self._failures.values())


def _group_view(config: SubscriptionGroup) -> GroupView:
    # RocketMQ 4.x keeps neither the consume mode nor the message model with the group: the clients choose them.
    return GroupView(config.name, config.retry_max_times, "concurrent", "clustering", config.retry_queues,
                     config.consume_enable, configured=True, message_model_recorded=False)


def _route_brokers(route: TopicRoute) -> list[tuple[str, str]]:
    """(broker name, address to ask) of each broker holding the topic's queues."""
    addresses = {b.broker_name: b.pick_address() for b in route.brokers}
    return sorted({(q.broker_name, addr) for q in route.queues if (addr := addresses.get(q.broker_name))})


async def _within(work: Awaitable[T], deadline_s: float) -> T:
    return await asyncio.wait_for(work, deadline_s)


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
