"""The embedded store as a backend: one broker, in this process."""

from __future__ import annotations

import dataclasses

from backend.embedded_groups import group_rows, lags, queue_bounds
from backend.protocol import (
    DELAY_LEVEL_SETTING,
    BackendRefused,
    BackendView,
    BrokerSetting,
    BrokerSettings,
    BrokerSettingValue,
    BrokerView,
    ClientTrace,
    ClusterView,
    DeadLetterPage,
    DeadLetterWindow,
    DelayTables,
    GroupList,
    GroupProgress,
    GroupSummary,
    GroupView,
    InFlight,
    KeyMatches,
    OffsetResetDone,
    OffsetResetPlan,
    QueueActivity,
    QueueOffsets,
    ReceiveState,
    RecordedProgress,
    ResetTarget,
    TopicList,
    TopicView,
    queue_reset,
)
from store.broker.client_trace import client_trace_of
from store.broker.metadata import GroupConfig, TopicConfig
from store.broker.offsets import KEY_SEPARATOR
from store.broker.trace import TraceEvent
from store.broker.transactions import ended_offsets
from store.errors import MessageNotFoundError, StoreError
from store.format import ids, topics
from store.format.codec import StoredMessage
from store.message_store import MessageStore

EMBEDDED_CLUSTER = "mqlens"
EMBEDDED_BROKER = "mqlens"  # the broker name the gRPC front's routes give too
MAX_TRANSACTION_ENDS_READ = 100_000  # the newest op records read to tell whether a half message ended


class EmbeddedBackend:
    kind = "embedded"

    def __init__(self, store: MessageStore, version: str = ""):
        self.store = store
        self.version = version

    def describe(self) -> BackendView:
        broker = BrokerView(cluster=EMBEDDED_CLUSTER, name=EMBEDDED_BROKER, broker_id=0, address=None,
                            version=f"mqlens {self.version}", commitlog_max_offset=self.store.commitlog.end)
        return BackendView(kind="embedded", clusters=[ClusterView(EMBEDDED_CLUSTER, [broker])])

    def list_topics(self) -> TopicList:
        offsets = self.store.topics()
        configs = {t.name: t for t in self.store.metadata.topics()}
        for name, queues in offsets.items():  # a queue on disk with no metadata (should not happen)
            configs.setdefault(name, TopicConfig(name, queues=max(q for q, _, _ in queues) + 1))
        return TopicList([_view(configs[name], offsets.get(name, [])) for name in sorted(configs)])

    def get_topic(self, name: str) -> TopicView | None:
        config = self.store.metadata.topic(name)
        return None if config is None else _view(config, self.store.topics().get(name, []))

    def queue_activity(self, topic: TopicView, since_ms: int | None) -> list[QueueActivity]:
        return [QueueActivity(self._newest_store_time(topic.name, q),
                              None if since_ms is None else self._stored_since(topic.name, q, since_ms))
                for q in topic.queue_offsets]

    def _newest_store_time(self, topic: str, q: QueueOffsets) -> int | None:
        if q.max_offset <= q.min_offset:
            return None
        try:
            return self.store.get_by_queue_offset(topic, q.queue_id, q.max_offset - 1).store_timestamp
        except StoreError:  # its last unit is not a message
            return None

    def _stored_since(self, topic: str, q: QueueOffsets, since_ms: int) -> int | None:
        if q.max_offset <= q.min_offset:
            return 0
        try:
            return q.max_offset - self.store.queue_offset_by_time(topic, q.queue_id, since_ms)
        except StoreError:
            return None

    def list_groups(self) -> list[GroupView]:
        return [_group_view(g, True) for g in self.store.metadata.groups()]

    def get_group(self, name: str) -> GroupView:
        config = self.store.metadata.group(name)  # checks the name
        return _group_view(config, any(g.name == name for g in self.store.metadata.groups()))

    def group_progress(self, group: str) -> GroupProgress:
        return GroupProgress(lags(self.store.offsets.of_group(group), queue_bounds(self.store)))

    def group_summaries(self) -> GroupList:
        return GroupList([GroupSummary(**row) for row in group_rows(self.store)])

    def group_connections(self, group: str) -> None:
        return None

    def close(self) -> None:
        """The store is closed by whoever opened it."""

    # -- lookups
    def topic_names(self) -> list[str]:
        return sorted(set(self.store.topics()) | {t.name for t in self.store.metadata.topics()})

    def read_by_offset_id(self, offset_msg_id: str) -> StoredMessage:
        _, phys_offset = ids.decode_offset_msg_id(offset_msg_id)
        try:
            msg = self.store.read(phys_offset)
        except MessageNotFoundError:
            raise MessageNotFoundError(f"no message with offset id {offset_msg_id} (nothing at commit log offset "
                                       f"{phys_offset}; it may have expired)") from None
        if msg.offset_msg_id != offset_msg_id.upper():
            raise MessageNotFoundError(f"no message with offset id {offset_msg_id} (it names another broker or "
                                       f"offset)")
        return msg

    def query_key(self, key: str, topic_names: list[str], begin_ms: int, end_ms: int, max_results: int,
                  unique: bool) -> KeyMatches:
        query = self.store.query_by_unique_key if unique else self.store.query_by_key
        found: list[StoredMessage] = []
        truncated = False
        for name in topic_names:
            result = query(name, key, begin_ms, end_ms, max_results)
            found.extend(result.messages)
            truncated |= result.truncated
        found.sort(key=lambda m: (m.store_timestamp, m.phys_offset), reverse=True)
        if len(found) > max_results:
            found, truncated = found[:max_results], True
        return KeyMatches(found, truncated, list(topic_names))

    def read_at(self, topic: str, queue_id: int, queue_offset: int, broker: str | None = None) -> StoredMessage:
        if broker not in (None, EMBEDDED_BROKER):
            raise MessageNotFoundError(f"no broker {broker}: the embedded store is broker {EMBEDDED_BROKER}")
        return self.store.get_by_queue_offset(topic, queue_id, queue_offset)

    # -- operator settings
    def plan_offset_reset(self, group: str, topic: str, target: ResetTarget,
                          queue_id: int | None = None) -> OffsetResetPlan:
        committed = self.store.offsets.of_group(group).get(topic, {})
        rows = [queue_reset(EMBEDDED_BROKER, q, lo, hi, committed.get(q), self._reset_offset(topic, q, lo, hi, target))
                for q, lo, hi in sorted(self.store.topics().get(topic, [])) if queue_id in (None, q)]
        return OffsetResetPlan(group, topic, target, queue_id, rows)

    def _reset_offset(self, topic: str, queue_id: int, low: int, high: int, target: ResetTarget) -> int:
        if target.kind == "earliest":
            return low
        if target.kind == "latest":
            return high
        if target.kind == "time":
            return self.store.queue_offset_by_time(topic, queue_id, target.value or 0)
        return target.value or 0

    def apply_offset_reset(self, plan: OffsetResetPlan) -> OffsetResetDone:
        self.store.reset_consumer_offset(plan.group, plan.topic, {row.queue_id: row.after for row in plan.queues})
        return OffsetResetDone(plan.queues, "offsets")

    def broker_setting(self, key: str) -> BrokerSetting:
        if key != DELAY_LEVEL_SETTING:
            return BrokerSetting(key, [BrokerSettingValue(EMBEDDED_BROKER, None, None,
                                                          f"the embedded store keeps no setting {key}")])
        return BrokerSetting(key, [BrokerSettingValue(EMBEDDED_BROKER, None, self.store.delay_levels.spec)])

    def update_broker_setting(self, key: str, value: str) -> BrokerSetting:
        if key != DELAY_LEVEL_SETTING:
            raise BackendRefused(f"the embedded store keeps no setting {key}")
        self.store.set_delay_levels(value)
        return self.broker_setting(key)


    # -- dead letters
    def dead_letter_page(self, group: str | None, window: DeadLetterWindow, before: tuple[int, int] | None,
                         limit: int) -> DeadLetterPage:
        raise BackendRefused("the embedded store's inbox reads its dead-letter index (app.services.dead_letters)")

    def resend_dead_letter(self, dead: StoredMessage, actor: str | None, *, topic: str,
                           marks: dict[str, str] | None = None, unique_key: str | None = None,
                           body: bytes | None = None, property_changes: dict[str, str | None] | None = None) -> str:
        return self.store.resend_dead_letter(dead.phys_offset, actor, topic=topic, marks=marks, unique_key=unique_key,
                                             body=body, property_changes=property_changes).offset_msg_id

    def retry_route(self, group: str, origin: str | None) -> str:
        """The pop retry topic for a group that receives the topic by pop, else the group's %RETRY% topic."""
        if origin and self.store.pops(group, origin):
            return topics.pop_retry_topic(group, origin)
        return topics.retry_topic(group)

    def new_unique_key(self) -> str:
        return self.store.new_unique_key()

    def copy_state(self, group: str, offset_msg_id: str) -> str:
        try:
            copy = self.store.get_by_offset_id(offset_msg_id)
        except StoreError:
            return "unknown"
        committed = self.store.offsets.get(copy.topic, group, copy.queue_id)
        return "consumed" if committed is not None and committed > copy.queue_offset else "pending"

    # -- timeline
    def recorded_events(self, unique_key: str) -> list[TraceEvent]:
        return self.store.timeline(unique_key)

    def client_trace(self, unique_key: str) -> ClientTrace:
        return ClientTrace(client_trace_of(self.store, unique_key))

    def delay_tables(self, copies: list[StoredMessage]) -> DelayTables:
        return DelayTables(self.store.delay_levels)

    def consumer_progress(self, topic_names: list[str]) -> RecordedProgress:
        with self.store.offsets.lock:
            table = self.store.offsets.table_json()
        offsets = {tuple(key.rsplit(KEY_SEPARATOR, 1)): {int(q): o for q, o in queues.items()}
                   for key, queues in table.items()}
        receive = {(sub.group, sub.topic): ReceiveState(
            dict(sub.cursors), {key: InFlight(e.attempt, e.due_ms, e.handed_out, e.last_failure)
                                for key, e in list(sub.entries.items())}) for sub in list(self.store.pop.state)}
        return RecordedProgress(offsets, receive)

    def settled_half_offsets(self) -> tuple[set[int], bool]:
        settled: set[int] = set()
        complete = True
        for queue_id, low, high in self.store.topics().get(topics.TRANS_OP_HALF_TOPIC, []):
            first = max(low, high - MAX_TRANSACTION_ENDS_READ)
            complete = complete and first == low
            for offset in range(first, high):
                try:
                    body = self.store.get_by_queue_offset(topics.TRANS_OP_HALF_TOPIC, queue_id, offset).body
                except StoreError:
                    continue
                settled.update(ended_offsets(body))
        return settled, complete


    # -- broker settings
    def broker_settings(self, name: str, broker_id: int) -> BrokerSettings | None:
        if (name, broker_id) != (EMBEDDED_BROKER, 0):
            return None
        config = dataclasses.asdict(self.store.config)
        geometry = config.pop("geometry")
        found = {**config, **geometry, "delay_levels": self.store.delay_levels.spec}
        return BrokerSettings(name, broker_id, None, {key: "" if value is None else str(value)
                                                      for key, value in sorted(found.items())})


def _group_view(config: GroupConfig, configured: bool) -> GroupView:
    return GroupView(config.name, config.max_reconsume_times, config.consume_mode, config.message_model,
                     config.retry_queues, config.consume_enable, configured, config.model_recorded)


def _view(config: TopicConfig, found: list[tuple[int, int, int]]) -> TopicView:
    by_queue = {queue_id: QueueOffsets(queue_id, lo, hi) for queue_id, lo, hi in found}
    queue_ids = sorted(set(range(config.queues)) | by_queue.keys())
    return TopicView(config.name, config.queues, config.perm, config.readable, config.writable,
                     topics.copy_kind(config.name), topics.is_system_topic(config.name),
                     [by_queue.get(q, QueueOffsets(q, 0, 0)) for q in queue_ids])
