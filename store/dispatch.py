"""Dispatch: project commit log records (bytes already on disk) into consume queues and index.

Live writes and crash recovery run this same code; every step is idempotent."""

from __future__ import annotations

from collections.abc import Callable

from store import topics
from store.codec import TRANSACTION_PREPARED, TRANSACTION_ROLLBACK, StoredMessage, split_keys
from store.commitlog import CommitLog
from store.consume_queue import ConsumeQueues
from store.delay_levels import DelayLevels
from store.index import IndexService
from store.javahash import tags_code


def tags_code_of(msg: StoredMessage, delay_levels: DelayLevels) -> int:
    if msg.topic == topics.SCHEDULE_TOPIC:
        level = msg.properties.get(topics.DELAY)
        if level is not None and level.lstrip("-").isdigit() and int(level) > 0:
            return delay_levels.deliver_time(int(level), msg.store_timestamp)
    return tags_code(msg.properties.get(topics.TAGS))


def index_keys_of(msg: StoredMessage) -> list[str]:
    keys = []
    uniq = msg.properties.get(topics.UNIQ_KEY)
    if uniq:
        keys.append(uniq)
    keys.extend(split_keys(msg.properties.get(topics.KEYS)))
    return keys


class Dispatcher:
    def __init__(self, commitlog: CommitLog, queues: ConsumeQueues, index: IndexService,
                 delay_levels: DelayLevels):
        self.commitlog = commitlog
        self.queues = queues
        self.index = index
        self.delay_levels = delay_levels
        self.dispatched_to = commitlog.min_offset
        self.last_store_timestamp = 0
        self.listeners: list[Callable[[StoredMessage], None]] = []

    def dispatch_record(self, msg: StoredMessage) -> None:
        ttype = msg.transaction_type
        if ttype not in (TRANSACTION_PREPARED, TRANSACTION_ROLLBACK):
            cq = self.queues.get_or_create(msg.topic, msg.queue_id)
            cq.put(msg.queue_offset, msg.phys_offset, msg.size, tags_code_of(msg, self.delay_levels))
        if ttype != TRANSACTION_ROLLBACK:
            keys = index_keys_of(msg)
            if keys:
                self.index.put_keys(msg.topic, keys, msg.phys_offset, msg.store_timestamp)
        self.last_store_timestamp = msg.store_timestamp
        for listener in self.listeners:
            listener(msg)

    def dispatch_pending(self) -> int:
        """Dispatch every record between the progress mark and the commit log's end."""
        count = 0
        end = self.commitlog.end
        if self.dispatched_to >= end:
            return 0
        for msg in self.commitlog.iterate(self.dispatched_to, end):
            self.dispatch_record(msg)
            count += 1
        self.dispatched_to = end
        return count
