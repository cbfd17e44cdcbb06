"""Reading: a record by offset, offset id or queue offset, queries by key and unique key, a
message's timeline, the topics' queues and the store check."""

from __future__ import annotations

from store.broker import trace_log
from store.broker.trace import TraceEvent
from store.engine.results import DEFAULT_QUERY_MAX, FAR_FUTURE_MS, MAX_QUERY_RESULTS, QueryResult
from store.errors import (
    InvalidIdError,
    MessageNotFoundError,
    StoreError,
)
from store.format import ids, topics
from store.format.codec import StoredMessage
from store.projections.dead_letters import DeadLetterUnits


class Lookups:
    def read(self, phys_offset: int) -> StoredMessage:
        with self._reading():
            try:
                return self.commitlog.read_apart(phys_offset)
            except StoreError as exc:
                raise MessageNotFoundError(f"no message at commit log offset {phys_offset}: {exc}") from None

    def get_by_offset_id(self, offset_msg_id: str) -> StoredMessage:
        _, phys = ids.decode_offset_msg_id(offset_msg_id)
        return self.read(phys)

    def get_by_queue_offset(self, topic: str, queue_id: int, queue_offset: int) -> StoredMessage:
        with self._reading():
            cq = self.queues.get(topic, queue_id)
            if cq is None:
                raise MessageNotFoundError(f"topic {topic!r} has no queue {queue_id}")
            if not cq.min_offset <= queue_offset < cq.max_offset:
                raise MessageNotFoundError(
                    f"offset {queue_offset} is outside queue {topic}:{queue_id} [{cq.min_offset}, {cq.max_offset})"
                )
            unit = cq.get(queue_offset)
            return self.read(unit.phys_offset)

    def dispatch_lag_bytes(self) -> int:
        """Commit log bytes written but not yet projected into consume queues and index."""
        with self._reading():
            return max(0, self.commitlog.end - self.dispatcher.dispatched_to)

    def queue_offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset stored at or after `timestamp_ms` (the max offset if none)."""
        with self._reading():
            cq = self.queues.get(topic, queue_id)
            if cq is None:
                raise MessageNotFoundError(f"topic {topic!r} has no queue {queue_id}")
            return cq.offset_by_time(timestamp_ms, lambda phys: self.commitlog.read(phys).store_timestamp)

    def _query(self, topic: str, key: str, begin: int, end: int, max_results: int, matches) -> QueryResult:
        if not 0 < max_results <= MAX_QUERY_RESULTS:
            raise InvalidIdError(f"max must be between 1 and {MAX_QUERY_RESULTS}")
        if begin > end:
            raise InvalidIdError("the time window begins after it ends")
        found: list[StoredMessage] = []
        truncated = False
        with self._reading():
            # Index times are whole seconds after the file's begin: widen by one second, then
            # filter on each record's real store time.
            for phys in self.index.query(topic, key, max(0, begin - 1000), end):
                try:
                    msg = self.commitlog.read_apart(phys)
                except StoreError:
                    continue
                if msg.topic != topic or not matches(msg) or not begin <= msg.store_timestamp <= end:
                    continue
                if len(found) == max_results:
                    truncated = True
                    break
                found.append(msg)
        return QueryResult(found, truncated)

    def query_by_key(self, topic: str, key: str, begin: int = 0, end: int = FAR_FUTURE_MS,
                     max_results: int = DEFAULT_QUERY_MAX) -> QueryResult:
        """Messages of `topic` whose KEYS hold `key`, newest first (the index walk order)."""
        return self._query(topic, key, begin, end, max_results, lambda m: key in m.keys)

    def query_by_unique_key(self, topic: str, unique_key: str, begin: int = 0, end: int = FAR_FUTURE_MS,
                            max_results: int = DEFAULT_QUERY_MAX) -> QueryResult:
        """Messages of `topic` whose UNIQ_KEY equals `unique_key`, newest first."""
        return self._query(topic, unique_key, begin, end, max_results, lambda m: m.unique_key == unique_key)

    def timeline(self, id_or_key: str, max_events: int = MAX_QUERY_RESULTS) -> list[TraceEvent]:
        """The ordered lifecycle events of a message, given its unique key or the offset id of
        any of its copies (original, scheduled, retry, dead letter)."""
        if self._tracer.pending and not self.read_only:
            with self._writing():
                self._tracer.write()
        return trace_log.timeline(self._trace_records, self.read, id_or_key, max_events)

    def _trace_records(self, key: str, max_records: int) -> list[StoredMessage]:
        return self.query_by_key(topics.TRACE_TOPIC, key, max_results=max_records).messages

    def dead_letter_units(self, topic: str) -> list[DeadLetterUnits]:
        """The dead-letter index of a %DLQ% topic, per queue, with every dead letter appended so far."""
        with self._reading():
            self.catch_up()
            self.dead_letter_index.catch_up(self._queues, self.commitlog)
            return self.dead_letter_index.snapshot(topic)

    def topics(self) -> dict[str, list[tuple[int, int, int]]]:
        """topic -> [(queue_id, min_offset, max_offset)]"""
        with self._reading():
            return {
                topic: [(cq.queue_id, cq.min_offset, cq.max_offset) for cq in queues]
                for topic, queues in self.queues.topics().items()
            }

    def check(self):
        from store.projections.check import check_store

        with self._reading():
            return check_store(self)

    def check_against(self, rebuilt_root):
        """The check in bounded memory, against a rebuild of the projections (check_against)."""
        from store.projections.check_against import check_against

        with self._reading():
            return check_against(self, rebuilt_root)
