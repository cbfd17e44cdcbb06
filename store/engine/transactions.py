"""Transactional messages (store.broker.transactions): a producer's half message, the end of its
transaction, the broker's checks of those left open, and the open ones found again on open."""

from __future__ import annotations

from store.broker.record_builder import NewMessage
from store.broker.trace_events import (
    checked_event,
    discarded_event,
    duplicate_event,
    half_stored_event,
    transaction_end_event,
)
from store.broker.transactions import (
    DEFAULT_MAX_CHECKS,
    DISCARD_QUEUE_ID,
    HALF_QUEUE_ID,
    MAX_HALVES_PER_CHECK,
    OP_QUEUE_ID,
    OpenHalf,
    OpenHalves,
    TransactionCheck,
    check_times,
    checked_record,
    commit_record,
    discarded_record,
    ended_offsets,
    lineage_of,
    op_record,
)
from store.engine.results import PutResult
from store.errors import (
    InvalidConfigError,
    InvalidIdError,
    InvalidMessageError,
    InvalidTransactionIdError,
    NotAHalfMessageError,
    StoreError,
    TransactionEndedError,
    TransactionNotFoundError,
)
from store.format import ids, topics
from store.format.codec import StoredMessage
from store.format.recordio import index_key_hash

HALF_TOPIC = topics.TRANS_HALF_TOPIC
OP_TOPIC = topics.TRANS_OP_HALF_TOPIC


class Transactions:
    _open_halves: OpenHalves | None  # None in a read-only store

    def put_half(self, message: NewMessage, producer_group: str | None = None) -> PutResult:
        """Store the half message of a transaction `producer_group` sends (RocketMQ 4.9's form:
        store.broker.transactions). Its offset message id is the transaction id. A resend of a
        unique key stored within the dedupe window is not stored again: the result is the
        half already stored (as the broker's check last put it back). Raises
        InvalidMessageError for a message the store refuses (a delay level among them: a
        transactional message takes a delivery time, applied once committed)."""
        with self._writing(self.config.put_wait_ms, caught_up=False):
            self._disk_guard.check()
            now = self.clock.now_ms()
            key = self._dedupe_key(message)
            if key is not None:
                earlier = self._recent_copy([HALF_TOPIC], key, now)
                if earlier is not None:
                    self._trace([duplicate_event(key, earlier, now)], now)
                    return earlier
            planned = self._builder.build(message, now, half=True, producer_group=producer_group)
            result = self._append_one(planned, now)
            born_ms = planned[0][5]
            self._open_halves.add(OpenHalf(result.queue_offset, result.phys_offset, (result.unique_key, born_ms), now))
            if key is not None:
                self._recent.add(index_key_hash(HALF_TOPIC, key), now)
            self._trace([half_stored_event(result, message.topic, now)], now)
            self.stats.count_put(1)
            return result

    def end_transaction(self, transaction_id: str, commit: bool, *, from_check: bool = False,
                        producer_group: str | None = None) -> PutResult | None:
        """Commit or roll back the transaction of the half message `transaction_id` (its offset
        message id; an id a check has since replaced names the same transaction). A commit
        puts the message to its real topic and queue and returns where; both write the op
        record that ends the half. `from_check`: the producer answers the broker's check.
        With `producer_group`, a half message another group sent is refused.

        Raises InvalidTransactionIdError (a malformed id, one of another broker or another
        producer group), NotAHalfMessageError (it names a record that is not a half message),
        TransactionNotFoundError (no record there) or TransactionEndedError (already ended)."""
        if type(commit) is not bool:
            raise TypeError("commit is True or False")
        with self._writing(self.config.put_wait_ms, caught_up=False):
            self._disk_guard.check()
            half = self._half_named(transaction_id)
            sender = half.properties.get(topics.PRODUCER_GROUP)
            if producer_group is not None and sender is not None and sender != producer_group:
                raise InvalidTransactionIdError(f"transaction {transaction_id} belongs to another producer group")
            current = self._open_halves.current(lineage_of(half))
            if current is None:
                raise TransactionEndedError(f"the transaction of half message {transaction_id} has already ended: "
                                            "committed, rolled back, or discarded after too many checks")
            if current.phys_offset != half.phys_offset:
                half = self.commitlog.read(current.phys_offset)
            now = self.clock.now_ms()
            planned = [commit_record(self._builder, half, now)] if commit else []
            planned.append(op_record(self._builder, half, now))
            *committed, ended = self._append_planned(planned, now)
            self._open_halves.drop(current.lineage)
            self._open_halves.noted_op(ended.queue_offset, half.queue_offset)
            result = committed[0] if committed else None
            if result is not None:
                if self._recent is not None and result.unique_key:
                    self._recent.add(index_key_hash(result.topic, result.unique_key), now)
                self.stats.count_put(1)
            self._trace([transaction_end_event(half, result, from_check, now)], now)
            return result

    def _half_named(self, transaction_id: str) -> StoredMessage:
        """The half message record an offset message id names in this store."""
        if type(transaction_id) is not str:
            raise InvalidTransactionIdError("a transaction id is an offset message id")
        try:
            host, phys = ids.decode_offset_msg_id(transaction_id)
        except InvalidIdError as exc:
            raise InvalidTransactionIdError(f"malformed transaction id {transaction_id[:64]!r}: {exc}") from None
        if host != self.store_host:
            raise InvalidTransactionIdError(f"transaction id {transaction_id} names another broker ({host})")
        try:
            half = self.commitlog.read(phys)
        except StoreError:
            raise TransactionNotFoundError(f"no half message at transaction id {transaction_id} (nothing at commit "
                                           f"log offset {phys}; it may have expired)") from None
        if half.topic != HALF_TOPIC:
            raise NotAHalfMessageError(f"{transaction_id} names a message of {half.topic[:128]}, not a half message")
        cq = self.queues.get(HALF_TOPIC, HALF_QUEUE_ID)  # a record's bytes inside another's body are no record
        unit = cq.get(half.queue_offset) if cq is not None else None
        if unit is None or unit.phys_offset != phys:
            raise NotAHalfMessageError(f"{transaction_id} names no half message of {HALF_TOPIC}")
        return half

    def open_transactions_to_check(self, timeout_ms: int, max_checks: int = DEFAULT_MAX_CHECKS
                                   ) -> list[TransactionCheck]:
        """The open transactions whose half message was stored, or last checked, `timeout_ms`
        or longer ago, oldest first (at most MAX_HALVES_PER_CHECK halves a call): each is put
        back with TRANSACTION_CHECK_TIMES one higher, counting the check, and is returned to
        ask its producer about, under its new transaction id. As RocketMQ 4.9.8 does, a half
        already checked `max_checks` times, or born longer ago than the file reserved time,
        is discarded instead: moved to TRANS_CHECK_MAX_TIME_TOPIC, never delivered."""
        if type(timeout_ms) is not int or timeout_ms < 0:
            raise InvalidConfigError(f"the check timeout is milliseconds, 0 or more, got {timeout_ms!r}")
        if type(max_checks) is not int or max_checks < 1:
            raise InvalidConfigError(f"max_checks is 1 or more, got {max_checks!r}")
        with self._writing(caught_up=False):
            self._disk_guard.check()
            now = self.clock.now_ms()
            checks = []
            for entry in self._open_halves.due(now - timeout_ms, MAX_HALVES_PER_CHECK):
                try:
                    half = self.commitlog.read(entry.phys_offset)
                except StoreError:  # expired by retention
                    self._open_halves.drop(entry.lineage)
                    continue
                checked = self._check_once(entry, half, max_checks, now)
                if checked is not None:
                    checks.append(checked)
            return checks

    def _check_once(self, entry: OpenHalf, half: StoredMessage, max_checks: int, now: int) -> TransactionCheck | None:
        times = check_times(half)
        if times >= max_checks:
            return self._discard(entry, discarded_record(self._builder, half), times,
                                 f"checked {times} times without an answer", now)
        if now - half.born_timestamp > self._reserved_ms:
            return self._discard(entry, discarded_record(self._builder, half, times + 1), times + 1,
                                 f"born more than the file reserved time ({self.config.file_reserved_hours:g} h) ago",
                                 now)
        try:
            planned = checked_record(self._builder, half, times + 1)
        except InvalidMessageError as exc:  # one property more does not fit: asking again is impossible
            return self._discard(entry, discarded_record(self._builder, half), times, f"not put back: {exc}", now)
        again = self._append_one(planned, now)
        self._open_halves.add(OpenHalf(again.queue_offset, again.phys_offset, entry.lineage, now))
        self._trace([checked_event(again, times + 1, now)], now)
        put_back = self.commitlog.read(again.phys_offset)
        return TransactionCheck(again.offset_msg_id, put_back.properties.get(topics.PRODUCER_GROUP), times + 1,
                                put_back)

    def _discard(self, entry: OpenHalf, planned, times: int, why: str, now: int) -> None:
        moved = self._append_one(planned, now)
        self._open_halves.drop(entry.lineage)
        self._trace([discarded_event(moved, times, why, now)], now)

    # -- open and flush ----------------------------------------------------------------------
    def _find_open_halves(self) -> OpenHalves:
        """(opening) The transactions still open, from the check's progress on: the newest copy
        of each half message, unless an op record ended one of its copies or it was discarded."""
        half_cq = self._queues.get(HALF_TOPIC, HALF_QUEUE_ID)
        op_cq = self._queues.get(OP_TOPIC, OP_QUEUE_ID)
        found = OpenHalves(half_cq.max_offset if half_cq else 0, op_cq.max_offset if op_cq else 0)
        if half_cq is None:
            return found
        lineages = {}
        for offset, half in self._records_from(half_cq, HALF_TOPIC):
            lineages[offset] = lineage_of(half)
            found.add(OpenHalf(offset, half.phys_offset, lineages[offset], half.store_timestamp))
        if op_cq is not None:
            for op_offset, op in self._records_from(op_cq, OP_TOPIC):
                for ended in ended_offsets(op.body):
                    found.noted_op(op_offset, ended)
                    if ended in lineages:
                        found.drop(lineages[ended])
        discard_cq = self._queues.get(topics.TRANS_CHECK_MAX_TIME_TOPIC, DISCARD_QUEUE_ID)
        oldest = found.oldest()
        if discard_cq is not None and oldest is not None:
            since = discard_cq.offset_by_time(oldest.last_ms, lambda phys: self.commitlog.read(phys).store_timestamp)
            for _, moved in self._records_from(discard_cq, topics.TRANS_CHECK_MAX_TIME_TOPIC, since):
                found.drop(lineage_of(moved))
        return found

    def _records_from(self, cq, topic: str, start: int | None = None):
        """(offset, record) of a queue from the check's progress (or `start`) to its end,
        skipping units whose record is gone."""
        if start is None:
            start = self.offsets.get(topic, topics.TRANS_CHECK_GROUP, cq.queue_id) or 0
        for offset in range(max(start, cq.min_offset), cq.max_offset):
            unit = cq.get(offset)
            try:
                record = self.commitlog.read(unit.phys_offset) if unit is not None else None
            except StoreError:
                continue
            if record is not None:
                yield offset, record

    def _note_transaction_progress(self) -> None:
        """(store lock held, flushing) The check's progress, for the offsets file the flush writes."""
        if self._open_halves is None or not self._open_halves.used:
            return
        for (topic, queue_id), offset in zip(((HALF_TOPIC, HALF_QUEUE_ID), (OP_TOPIC, OP_QUEUE_ID)),
                                             self._open_halves.progress(), strict=True):
            if self.offsets.get(topic, topics.TRANS_CHECK_GROUP, queue_id) != offset:  # unchanged: no file write
                self.offsets.commit(topic, topics.TRANS_CHECK_GROUP, queue_id, offset)
