"""Dead letters on a live cluster: each %DLQ%group queue read backwards by PULL_MESSAGE (no group's
offset moves), merged newest first across queues and brokers, a page at a time; a dead letter
resent by SEND_MESSAGE to a topic's broker; and what became of a resent copy."""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections import deque

from backend.protocol import (
    BackendUnavailable,
    BrokerGone,
    DeadLetterPage,
    DeadLetterWindow,
    QueueOffsets,
    SendUnanswered,
)
from cluster.calls import Calls
from cluster.context import ClusterContext, route_brokers
from cluster.message_lookups import ClusterLookups
from cluster.remoting.broker import OutgoingMessage
from cluster.remoting.errors import RemotingError, ResponseError
from cluster.remoting.namesrv import TopicNotFound
from cluster.topic_views import ClusterTopics
from store.errors import InvalidMessageError, MessageNotFoundError
from store.format import topics
from store.format.codec import COMPRESSED_FLAG, StoredMessage
from store.format.hosts import HostAddress
from store.format.ids import UniqueKeyFactory, decode_offset_msg_id
from store.format.properties import format_properties
from store.format.resend_plan import plan_resend
from store.format.topics import PERM_WRITE

PULL_WINDOW = 32  # records one backward step of a queue reads (a 4.x broker's most per pull)
MAX_SCANNED = 1_000  # records one page looks at, filters included; past it the page ends early with a cursor
KEY_MATCHES_MAX = 64  # dead letters a key filter finds in each broker's index, the newest
Position = tuple[int, int]  # (store time, commit log offset): the inbox's order, newest first


def position(msg: StoredMessage) -> Position:
    return msg.store_timestamp, msg.phys_offset


class _WallClock:
    @staticmethod
    def now_ms() -> int:
        return time.time_ns() // 1_000_000


class _QueueReader:
    """One dead-letter queue on one broker, read backwards a window at a time from a starting offset."""

    def __init__(self, ctx: ClusterContext, calls: Calls, topic: str, queue: QueueOffsets, address: str):
        self.ctx, self.calls, self.topic, self.queue, self.address = ctx, calls, topic, queue, address
        self.low, self.upper = queue.min_offset, queue.max_offset  # still to read: [low, upper)
        self.buffer: deque[StoredMessage] = deque()  # read, newest first

    @property
    def broker(self) -> str:
        return self.queue.broker or ""

    def stop(self) -> None:
        self.upper = self.low
        self.buffer.clear()

    async def start_before(self, newest_ms: int) -> None:
        """Skip what was stored after `newest_ms`: the broker's time index says where that begins."""
        if self.upper <= self.low:
            return
        try:
            first_after = await self.calls.call(self.broker, self.ctx.brokers.offset_by_time(
                self.address, self.topic, self.queue.queue_id, newest_ms + 1))
        except (RemotingError, TimeoutError) as exc:
            self.calls.failed(self.broker, exc, self.address)
            self.stop()
            return
        # The answer is the last offset when every message is older: one past it is kept to read it too.
        self.upper = max(self.low, min(self.upper, first_after + 1))

    async def fill(self) -> None:
        """Read the next window back (when the buffer is empty and the queue has more)."""
        while not self.buffer and self.upper > self.low:
            start, end = max(self.low, self.upper - PULL_WINDOW), self.upper
            found: list[StoredMessage] = []
            offset = start
            try:
                while offset < end:
                    batch = await self.calls.call(self.broker, self.ctx.brokers.pull(
                        self.address, self.topic, self.queue.queue_id, offset, end - offset))
                    found += [m for m in batch.messages if m.queue_offset < end]
                    if not batch.messages or batch.next_offset <= offset:
                        break
                    offset = batch.next_offset
            except (RemotingError, TimeoutError) as exc:
                self.calls.failed(self.broker, exc, self.address)
                self.stop()
                return
            self.upper = start
            self.buffer.extend(sorted(found, key=position, reverse=True))


class ClusterDeadLetters:
    def __init__(self, ctx: ClusterContext, topic_views: ClusterTopics, lookups: ClusterLookups):
        self.ctx = ctx
        self.topic_views = topic_views
        self.lookups = lookups
        self._unique_keys = UniqueKeyFactory(HostAddress(bytes([127, 0, 0, 1]), 0), _WallClock(), os.getpid())

    def new_unique_key(self) -> str:
        return self._unique_keys.create()

    async def _dead_letter_topics(self, group: str | None) -> list[str]:
        if group is not None:
            return [topics.dlq_topic(group)]
        return [name for name in await self.ctx.topic_names() if topics.is_dlq_topic(name)]

    async def page(self, group: str | None, window: DeadLetterWindow, before: Position | None,
                   limit: int) -> DeadLetterPage:
        names = await self._dead_letter_topics(group)
        if window.key is not None:
            return await self._keyed(names, window, before, limit)
        calls = Calls()
        views = [v for v in await asyncio.gather(*(self.topic_views.topic(name, calls) for name in names)) if v]
        held = sum(q.max_offset - q.min_offset for v in views for q in v.queue_offsets)
        addresses = await self.ctx.broker_addresses()
        readers = [_QueueReader(self.ctx, calls, view.name, q, addresses[q.broker or ""])
                   for view in views for q in view.queue_offsets
                   if q.max_offset > q.min_offset and (q.broker or "") in addresses]
        newest = min(t for t in (before[0] if before else None, window.end_ms) if t is not None) \
            if before or window.end_ms is not None else None
        if newest is not None:
            await asyncio.gather(*(r.start_before(newest) for r in readers))
        await asyncio.gather(*(r.fill() for r in readers))
        found, scanned, last = [], 0, None
        while len(found) <= limit and scanned < MAX_SCANNED:
            live = [r for r in readers if r.buffer]
            if not live:
                break
            reader = max(live, key=lambda r: position(r.buffer[0]))
            msg = reader.buffer.popleft()
            scanned, last = scanned + 1, position(msg)
            if msg.store_timestamp < window.begin_ms:
                reader.stop()  # the rest of this queue is older still
            elif (before is None or last < before) and (window.end_ms is None or msg.store_timestamp <= window.end_ms) \
                    and (window.tag is None or msg.tags == window.tag):
                found.append(msg)
            if not reader.buffer:
                await reader.fill()
        if len(found) > limit:
            return DeadLetterPage(found[:limit], position(found[limit - 1]), held, calls.problems())
        more = any(r.buffer for r in readers)
        return DeadLetterPage(found, last if more else None, held, calls.problems(), whole=not more)

    async def _keyed(self, names: list[str], window: DeadLetterWindow, before: Position | None,
                     limit: int) -> DeadLetterPage:
        """The dead letters whose keys or unique key are the key, from the brokers' key index."""
        assert window.key is not None
        end = window.end_ms if window.end_ms is not None else 2**63 - 1
        by_key, by_unique = await asyncio.gather(*(
            self.lookups.query_key(window.key, names, window.begin_ms, end, KEY_MATCHES_MAX, unique)
            for unique in (False, True)))
        matches = {m.offset_msg_id: m for m in itertools.chain(by_key.messages, by_unique.messages)
                   if (window.tag is None or m.tags == window.tag) and (before is None or position(m) < before)}
        found = sorted(matches.values(), key=position, reverse=True)
        problems = sorted(set(by_key.problems + by_unique.problems))
        if len(found) > limit:
            return DeadLetterPage(found[:limit], position(found[limit - 1]), len(found), problems)
        return DeadLetterPage(found, None, len(found), problems, whole=not (by_key.truncated or by_unique.truncated))

    async def resend(self, dead: StoredMessage, *, topic: str | None, marks: dict[str, str] | None,
                     unique_key: str | None, body: bytes | None,
                     property_changes: dict[str, str | None] | None) -> str:
        """Send the dead letter's fresh copy (store.format.resend_plan) to a broker holding its target
        topic, the dead letter's own broker first; its offset message id."""
        target = topic or ""
        try:
            route = await self.ctx.namesrv.topic_route(target) if target else None
            info = await self.ctx.namesrv.broker_cluster_info()
        except TopicNotFound:  # its brokers may be down and gone from the name server for now
            raise BrokerGone(f"no broker this cluster lists now holds {target}") from None
        except RemotingError as exc:
            raise self.ctx.no_name_server(exc) from None
        own = {addr: name for name, data in info.brokers.items() for addr in data.addresses.values()}
        holders = dict(route_brokers(route)) if route is not None else {}
        writable = {q.broker_name: q.write_queues for q in route.queues if q.perm & PERM_WRITE and q.write_queues} \
            if route is not None else {}
        choices = sorted((b for b in holders if b in writable), key=lambda b: (b != own.get(str(dead.store_host)), b))
        if not choices:
            raise BrokerGone(f"no broker this cluster lists now takes messages of {target or 'its topic'}")
        broker = choices[0]
        cluster_name = info.brokers[broker].cluster if broker in info.brokers else ""
        plan = plan_resend(dead, cluster_name, topic=target or None, marks=marks, unique_key=unique_key, body=body,
                           property_changes=property_changes)
        message = OutgoingMessage(plan.target, dead.queue_offset % writable[broker], plan.source.stored_body,
                                  format_properties(plan.properties), plan.source.sys_flag & COMPRESSED_FLAG,
                                  plan.source.flag, plan.source.born_timestamp)
        try:
            sent = await self.ctx.brokers.send(holders[broker], message)
        except ResponseError as exc:
            raise InvalidMessageError(f"broker {broker} refused the copy: {exc.remark or exc.response_code}") \
                from None
        except (RemotingError, TimeoutError) as exc:
            raise SendUnanswered(f"broker {broker} ({holders[broker]}) did not answer the send: {exc}", broker) \
                from None
        return sent.offset_msg_id

    async def copy_state(self, group: str, offset_msg_id: str) -> str:
        """consumed when the group's committed offset is past the copy, pending before it, unknown
        when the copy or the offset cannot be read."""
        try:
            host, _ = decode_offset_msg_id(offset_msg_id)
            copy = await self.lookups.read_by_offset_id(offset_msg_id)
            committed = await self.ctx.brokers.consumer_offset(str(host), group, copy.topic, copy.queue_id)
        except (MessageNotFoundError, BackendUnavailable, RemotingError, TimeoutError, ValueError):
            return "unknown"
        return "consumed" if committed is not None and committed > copy.queue_offset else "pending"
