"""Finding messages on a live cluster: by offset id (on the broker the id names), by key or
unique key (on every broker holding each topic, merged), and by queue offset."""

from __future__ import annotations

import asyncio

from backend.protocol import BackendRefused, BackendUnavailable, BrokerGone, KeyMatches
from cluster.calls import Calls
from cluster.context import ClusterContext, route_brokers
from cluster.remoting.errors import RemotingError, ResponseError
from cluster.remoting.lookups import BROKER_QUERY_MAX, key_matches
from cluster.remoting.namesrv import TopicNotFound
from store.errors import MessageNotFoundError
from store.format.codec import StoredMessage
from store.format.ids import decode_offset_msg_id

MAX_TOPICS_SEARCHED = 256  # a key looked up in every topic: at most this many, the rest named as not searched
SEARCH_SHARE_OF_DEADLINE = 0.8  # a key search stops here and answers what it found, naming what did not answer


class ClusterLookups:
    def __init__(self, ctx: ClusterContext):
        self.ctx = ctx

    async def read_by_offset_id(self, offset_msg_id: str) -> StoredMessage:
        host, phys_offset = decode_offset_msg_id(offset_msg_id)
        address = str(host)
        try:
            info = await self.ctx.namesrv.broker_cluster_info()
        except RemotingError as exc:
            raise self.ctx.no_name_server(exc) from None
        # Only the cluster's own brokers are asked: an id is any 16 bytes, and a unique key looks like one.
        names = {addr: name for name, data in info.brokers.items() for addr in data.addresses.values()}
        if address not in names:
            raise BrokerGone(f"no message with offset id {offset_msg_id} (it names {address}, which is no broker "
                             f"this cluster lists now)")
        where = f"broker {names[address]} ({address})"
        try:
            msg = await self.ctx.brokers.view_message(address, phys_offset)
        except ResponseError as exc:
            raise MessageNotFoundError(f"no message with offset id {offset_msg_id} ({where} has none at commit log "
                                       f"offset {phys_offset}: {exc.remark or exc.response_code})") from None
        except (RemotingError, TimeoutError) as exc:
            raise BackendUnavailable(f"{where} did not answer: {exc or type(exc).__name__}") from None
        if msg.offset_msg_id != offset_msg_id.upper():
            raise MessageNotFoundError(f"no message with offset id {offset_msg_id} (it names another offset)")
        return msg

    async def query_key(self, key: str, topic_names: list[str], begin_ms: int, end_ms: int, max_results: int,
                        unique: bool) -> KeyMatches:
        calls, searched = Calls(), topic_names[:MAX_TOPICS_SEARCHED]
        notes = [] if len(searched) == len(topic_names) else [
            f"searched {len(searched)} of {len(topic_names)} topics (the first by name): name a topic to search it"]
        tasks = {asyncio.ensure_future(self._query_topic(calls, name, key, begin_ms, end_ms, max_results, unique)):
                 name for name in searched}
        done, late = await asyncio.wait(tasks, timeout=self.ctx.settings.deadline_s * SEARCH_SHARE_OF_DEADLINE) \
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

    async def _query_topic(self, calls: Calls, topic: str, key: str, begin_ms: int, end_ms: int, max_results: int,
                           unique: bool) -> tuple[list[StoredMessage], bool]:
        """(the topic's matches on every broker holding it, whether a broker may have had more)."""
        try:
            route = await calls.call(None, self.ctx.namesrv.topic_route(topic))
        except TopicNotFound:
            return [], False
        except RemotingError as exc:
            calls.failed(f"route of {topic}", exc)
            return [], False

        async def of_broker(broker: str, address: str) -> tuple[list[StoredMessage], bool]:
            try:
                answer = await calls.call(broker, self.ctx.brokers.query_message(
                    address, topic, key, max_num=max_results, begin_ms=begin_ms, end_ms=end_ms, unique_key=unique))
            except (RemotingError, TimeoutError) as exc:
                calls.failed(broker, exc, address)
                return [], False
            kept = [m for m in answer.messages
                    if key_matches(m, topic, key, unique) and begin_ms <= m.store_timestamp <= end_ms]
            return kept, len(answer.messages) >= min(max_results, BROKER_QUERY_MAX)

        answers = await asyncio.gather(*(of_broker(b, a) for b, a in route_brokers(route) if not calls.is_down(b)))
        return [m for messages, _ in answers for m in messages], any(cut for _, cut in answers)

    async def read_at(self, topic: str, queue_id: int, queue_offset: int, broker: str | None) -> StoredMessage:
        try:
            route = await self.ctx.namesrv.topic_route(topic)
        except TopicNotFound:
            raise MessageNotFoundError(f"no topic {topic} on this cluster") from None
        except RemotingError as exc:
            raise BackendUnavailable(f"no name server gave the route of {topic}: {exc}") from None
        holders = dict(route_brokers(route))
        if broker is None and len(holders) > 1:
            raise BackendRefused(f"topic {topic} has queues on brokers {', '.join(sorted(holders))}: "
                                 f"name the queue's broker (broker=...)")
        name = broker if broker is not None else next(iter(holders), None)
        if name not in holders:
            raise MessageNotFoundError(f"no queue of topic {topic} on broker {name} (it is on "
                                       f"{', '.join(sorted(holders)) or 'no broker'})")
        where = f"{topic}:{queue_id}:{queue_offset} on broker {name}"
        try:
            msg = await self.ctx.brokers.pull_one(holders[name], topic, queue_id, queue_offset)
        except ResponseError as exc:
            raise MessageNotFoundError(f"no message at {where}: {exc.remark or exc.response_code}") from None
        except (RemotingError, TimeoutError) as exc:
            raise BackendUnavailable(f"broker {name} ({holders[name]}) did not answer: {exc}") from None
        if msg is None:
            raise MessageNotFoundError(f"no message at {where} (before the queue's first offset, or past its last)")
        return msg
