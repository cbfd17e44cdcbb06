"""Admin calls to one broker: runtime info, settings, topic configs and stats, queue offsets, consumer
groups (their settings, connections, offsets), messages by offset id, key or queue offset.

Message records come back as the broker stores them; mqlens's own store codec decodes them.
"""

from __future__ import annotations

from dataclasses import dataclass

from cluster.remoting.client import RemotingClient
from cluster.remoting.codes import PULL_FLAG_SUBSCRIPTION, UNIQUE_KEY_QUERY_FIELD, RequestCode, ResponseCode
from cluster.remoting.command import RemotingCommand, request
from cluster.remoting.errors import CodecError, ResponseError
from cluster.remoting.models import (
    ConsumerConnections,
    ConsumeStats,
    QueryResult,
    SubscriptionGroup,
    TopicConfig,
    TopicStats,
    as_object,
    body_object,
    reset_offset_table,
)
from store.errors import CorruptRecordError
from store.format import codec
from store.format.ids import decode_offset_msg_id


def decode_records(body: bytes, *, what: str = "broker answer") -> list[codec.StoredMessage]:
    """The message records laid end to end in a response body."""
    messages, pos = [], 0
    try:
        while pos < len(body):
            message = codec.decode(body, pos, path=what)
            messages.append(message)
            pos += message.size
    except CorruptRecordError as exc:
        raise CodecError(str(exc)) from None
    return messages


# The group mqlens's own pulls name; a broker with autoCreateSubscriptionGroup creates it on first use.
CONSOLE_GROUP = "mqlens_console"


# SEND_MESSAGE's defaults when the topic is new to the broker (TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC).
DEFAULT_TOPIC, DEFAULT_TOPIC_QUEUES = "TBW102", 4
STORED_CODES = (ResponseCode.SUCCESS, ResponseCode.FLUSH_DISK_TIMEOUT, ResponseCode.SLAVE_NOT_AVAILABLE,
                ResponseCode.FLUSH_SLAVE_TIMEOUT)


@dataclass(frozen=True)
class PulledBatch:
    messages: list[codec.StoredMessage]
    next_offset: int  # where a following pull would go on
    min_offset: int  # the queue's bounds as the broker answered them (-1: not said)
    max_offset: int


@dataclass(frozen=True)
class OutgoingMessage:
    topic: str
    queue_id: int
    body: bytes  # as it is stored: compressed when sys_flag says so
    properties: str  # the properties text (store.format.properties.format_properties)
    sys_flag: int = 0
    flag: int = 0
    born_timestamp: int = 0
    reconsume_times: int = 0
    max_reconsume_times: int | None = None


@dataclass(frozen=True)
class SendResult:
    offset_msg_id: str
    queue_id: int
    queue_offset: int
    status: str  # SUCCESS, or the flush or slave timeout it was stored with


class TopicNotOnBroker(ResponseError):
    """The broker has no config for the topic."""


def _offset_field(address: str, response: RemotingCommand) -> int:
    """The `offset` field of an answer's header (GET_MIN/MAX_OFFSET, SEARCH_OFFSET, QUERY_CONSUMER_OFFSET)."""
    text = response.ext_fields.get("offset")
    try:
        return int(text)
    except (TypeError, ValueError):
        raise CodecError(f"{address}: the answer has no readable offset: {text!r}") from None


class BrokerAdmin:
    def __init__(self, client: RemotingClient):
        self.client = client

    async def runtime_info(self, address: str) -> dict[str, str]:
        response = await self.client.invoke_ok(address, request(RequestCode.GET_BROKER_RUNTIME_INFO))
        table = as_object(body_object(response.body, "runtime info").get("table"), "runtime info table")
        return {str(key): str(value) for key, value in table.items()}

    async def topic_configs(self, address: str) -> dict[str, TopicConfig]:
        response = await self.client.invoke_ok(address, request(RequestCode.GET_ALL_TOPIC_CONFIG))
        table = as_object(body_object(response.body, "topic configs").get("topicConfigTable"), "topicConfigTable")
        return {str(name): TopicConfig.from_json(str(name), obj) for name, obj in table.items()}

    async def broker_config(self, address: str) -> dict[str, str]:
        """GET_BROKER_CONFIG: the broker's settings (its properties text, one key=value a line)."""
        response = await self.client.invoke_ok(address, request(RequestCode.GET_BROKER_CONFIG))
        try:
            text = response.body.decode("utf-8")
        except UnicodeDecodeError:
            raise CodecError(f"{address}: broker config is not UTF-8") from None
        return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)

    async def consume_stats(self, address: str, group: str, topic: str | None = None) -> ConsumeStats:
        """GET_CONSUME_STATS: the group's offsets on this broker, per queue (all its topics, or one)."""
        response = await self.client.invoke_ok(
            address, request(RequestCode.GET_CONSUME_STATS, {"consumerGroup": group, "topic": topic}))
        return ConsumeStats.from_json(body_object(response.body, "consume stats"))

    async def view_message(self, address: str, phys_offset: int) -> codec.StoredMessage:
        """VIEW_MESSAGE_BY_ID: the record at `phys_offset` of the broker's commit log."""
        response = await self.client.invoke_ok(
            address, request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": phys_offset}))
        records = decode_records(response.body, what=f"{address} offset {phys_offset}")
        if len(records) != 1:
            raise CodecError(f"{address}: {len(records)} records in the answer for offset {phys_offset}")
        return records[0]

    async def view_message_by_id(self, offset_msg_id: str) -> codec.StoredMessage:
        """The message an offset message id names, asked of the broker the id names."""
        host, phys_offset = decode_offset_msg_id(offset_msg_id)
        return await self.view_message(str(host), phys_offset)

    async def query_message(self, address: str, topic: str, key: str, *, max_num: int = 64,
                            begin_ms: int = 0, end_ms: int = 2**63 - 1, unique_key: bool = False) -> QueryResult:
        """QUERY_MESSAGE: records the broker's index holds for topic#key (hash collisions included)."""
        cmd = request(RequestCode.QUERY_MESSAGE, {
            "topic": topic, "key": key, "maxNum": max_num, "beginTimestamp": begin_ms, "endTimestamp": end_ms})
        if unique_key:
            cmd.ext_fields[UNIQUE_KEY_QUERY_FIELD] = "true"
        response = await self.client.invoke_ok(
            address, cmd, accept=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
        try:
            last_ms = int(response.ext_fields.get("indexLastUpdateTimestamp", 0))
            last_offset = int(response.ext_fields.get("indexLastUpdatePhyoffset", 0))
        except ValueError:
            raise ResponseError(address, cmd.code, response.code, "unreadable index fields") from None
        messages = decode_records(response.body, what=f"{address} query {topic}#{key}") \
            if response.code == ResponseCode.SUCCESS else []
        return QueryResult(messages=messages, index_last_update_ms=last_ms, index_last_update_phys_offset=last_offset)

    async def topic_stats(self, address: str, topic: str) -> TopicStats:
        """GET_TOPIC_STATS_INFO: min and max offset and last store time of each of the topic's write queues."""
        cmd = request(RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic})
        response = await self.client.invoke_ok(
            address, cmd, accept=(ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST))
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            raise TopicNotOnBroker(address, cmd.code, response.code, response.remark)
        return TopicStats.from_json(body_object(response.body, "topic stats"))

    async def consumer_connections(self, address: str, group: str) -> ConsumerConnections | None:
        """GET_CONSUMER_CONNECTION_LIST: the group's online consumers here; None when none is online."""
        response = await self.client.invoke_ok(
            address, request(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group}),
            accept=(ResponseCode.SUCCESS, ResponseCode.CONSUMER_NOT_ONLINE))
        if response.code == ResponseCode.CONSUMER_NOT_ONLINE:
            return None
        return ConsumerConnections.from_json(body_object(response.body, "consumer connection"))

    async def subscription_groups(self, address: str) -> dict[str, SubscriptionGroup]:
        """GET_ALL_SUBSCRIPTIONGROUP_CONFIG: every consumer group's settings on this broker, by name."""
        response = await self.client.invoke_ok(address, request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
        table = as_object(body_object(response.body, "subscription groups").get("subscriptionGroupTable"),
                          "subscriptionGroupTable")
        return {str(name): SubscriptionGroup.from_json(str(name), obj) for name, obj in sorted(table.items())}

    async def _queue_offset(self, address: str, code: int, fields: dict[str, object]) -> int:
        response = await self.client.invoke_ok(address, request(code, fields))
        return _offset_field(address, response)

    async def min_offset(self, address: str, topic: str, queue_id: int) -> int:
        """GET_MIN_OFFSET: the queue's first offset still stored."""
        return await self._queue_offset(address, RequestCode.GET_MIN_OFFSET, {"topic": topic, "queueId": queue_id})

    async def max_offset(self, address: str, topic: str, queue_id: int) -> int:
        """GET_MAX_OFFSET: the offset the queue's next message will get."""
        return await self._queue_offset(address, RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": queue_id})

    async def offset_by_time(self, address: str, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """SEARCH_OFFSET_BY_TIMESTAMP: the offset of the queue's first message stored at or after the time;
        the last message's offset when all are older, the min offset when all are newer."""
        return await self._queue_offset(address, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
                                        {"topic": topic, "queueId": queue_id, "timestamp": timestamp_ms})

    async def pull(self, address: str, topic: str, queue_id: int, queue_offset: int, max_messages: int, *,
                   group: str = CONSOLE_GROUP) -> PulledBatch:
        """PULL_MESSAGE for up to `max_messages` records of the queue from `queue_offset` on (the broker
        answers at most 32 and fewer when they are large). Nothing there (PULL_NOT_FOUND: not yet
        written; PULL_OFFSET_MOVED: before the min offset or far past the max) is an empty batch.

        The request carries its own subscription ("*") and neither the commit-offset nor the suspend flag,
        so it waits for nothing and moves no group's offset. The broker still creates `group`'s
        subscription group when it does not exist (autoCreateSubscriptionGroup) and counts the pull in
        that group's statistics."""
        cmd = request(RequestCode.PULL_MESSAGE, {
            "consumerGroup": group, "topic": topic, "queueId": queue_id, "queueOffset": queue_offset,
            "maxMsgNums": max_messages, "sysFlag": PULL_FLAG_SUBSCRIPTION, "commitOffset": 0,
            "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0, "expressionType": "TAG"})
        response = await self.client.invoke_ok(address, cmd, accept=(
            ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_OFFSET_MOVED))
        fields = response.ext_fields
        try:
            next_offset, low, high = (int(fields.get(name, -1)) for name in ("nextBeginOffset", "minOffset",
                                                                              "maxOffset"))
        except ValueError:
            raise CodecError(f"{address}: the pull of {topic}:{queue_id} has unreadable offsets: {fields}") from None
        if response.code != ResponseCode.SUCCESS:
            return PulledBatch([], next_offset, low, high)
        records = decode_records(response.body, what=f"{address} {topic}:{queue_id}@{queue_offset}")
        if not records:  # FOUND with nothing in it: no broker answers so
            raise CodecError(f"{address}: the pull of {topic}:{queue_id}@{queue_offset} found no record")
        if any((m.topic, m.queue_id) != (topic, queue_id) or m.queue_offset < queue_offset for m in records):
            raise CodecError(f"{address}: the pull of {topic}:{queue_id}@{queue_offset} answered "
                             f"{[(m.topic, m.queue_id, m.queue_offset) for m in records]}")
        return PulledBatch(records, next_offset, low, high)

    async def pull_one(self, address: str, topic: str, queue_id: int, queue_offset: int, *,
                       group: str = CONSOLE_GROUP) -> codec.StoredMessage | None:
        """The one message at `queue_offset` (see pull), or None when the queue has none there."""
        batch = await self.pull(address, topic, queue_id, queue_offset, 1, group=group)
        if not batch.messages:
            return None
        if len(batch.messages) != 1 or batch.messages[0].queue_offset != queue_offset:
            raise CodecError(f"{address}: the pull of {topic}:{queue_id}@{queue_offset} answered "
                             f"{[(m.topic, m.queue_id, m.queue_offset) for m in batch.messages]}")
        return batch.messages[0]

    async def send(self, address: str, message: OutgoingMessage, *, group: str = CONSOLE_GROUP) -> SendResult:
        """SEND_MESSAGE: store one message on this broker, in the queue it names. A flush or slave
        timeout still stored it, so it is a result too (its status says which)."""
        cmd = request(RequestCode.SEND_MESSAGE, {
            "producerGroup": group, "topic": message.topic, "defaultTopic": DEFAULT_TOPIC,
            "defaultTopicQueueNums": DEFAULT_TOPIC_QUEUES, "queueId": message.queue_id, "sysFlag": message.sys_flag,
            "bornTimestamp": message.born_timestamp, "flag": message.flag, "properties": message.properties,
            "reconsumeTimes": message.reconsume_times, "unitMode": False, "batch": False,
            "maxReconsumeTimes": message.max_reconsume_times}, body=message.body)
        response = await self.client.invoke_ok(address, cmd, accept=STORED_CODES)
        fields = response.ext_fields
        try:
            return SendResult(str(fields["msgId"]), int(fields["queueId"]), int(fields["queueOffset"]),
                              ResponseCode(response.code).name)
        except (KeyError, ValueError):
            raise CodecError(f"{address}: the send to {message.topic} answered unreadable fields: {fields}") from None

    async def topics_consumed_by(self, address: str, topic: str) -> list[str]:
        """QUERY_TOPIC_CONSUME_BY_WHO: groups online for the topic or holding an offset on it here, sorted."""
        response = await self.client.invoke_ok(
            address, request(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": topic}))
        groups = body_object(response.body, "group list").get("groupList")
        if groups is None:
            return []
        if not isinstance(groups, list) or not all(isinstance(group, str) for group in groups):
            raise CodecError(f"{address}: groupList is not a list of names: {groups!r}")
        return sorted(groups)

    async def consumer_offset(self, address: str, group: str, topic: str, queue_id: int) -> int | None:
        """QUERY_CONSUMER_OFFSET: the group's committed offset on the queue; None when the broker has none.
        A group that never committed on a queue whose first message is still in memory reads 0, not None:
        the broker answers so to let a new consumer start at the beginning."""
        response = await self.client.invoke_ok(
            address, request(RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic,
                                                                  "queueId": queue_id}),
            accept=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        return _offset_field(address, response)

    async def update_consumer_offset(self, address: str, group: str, topic: str, queue_id: int, offset: int) -> None:
        """UPDATE_CONSUMER_OFFSET: set the group's committed offset on one of this broker's queues, as a
        consumer's commit does (consumers online overwrite it with their own at their next commit)."""
        await self.client.invoke_ok(address, request(RequestCode.UPDATE_CONSUMER_OFFSET, {
            "consumerGroup": group, "topic": topic, "queueId": queue_id, "commitOffset": offset}))

    async def reset_offset_by_time(self, address: str, group: str, topic: str, timestamp_ms: int) -> dict[int, int]:
        """INVOKE_BROKER_TO_RESET_OFFSET, forced: the broker finds the offset of the time on each of its queues
        of the topic (timestamp -1: their max offsets) and tells the group's consumers online to go on from
        there. Answers queue id -> the offset set. The broker refuses (an error code) when no consumer of the
        group is online or the group has no offset on one of the queues."""
        response = await self.client.invoke_ok(address, request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, {
            "topic": topic, "group": group, "timestamp": timestamp_ms, "isForce": True}))
        return {queue_id: offset for (_, _, queue_id), offset in
                reset_offset_table(body_object(response.body, "reset offset")).items()}

    async def update_broker_config(self, address: str, settings: dict[str, str]) -> None:
        """UPDATE_BROKER_CONFIG: the body is java properties text; the broker records the values in its
        settings (and its config file). What it read at start-up only changes after a restart."""
        for key, value in settings.items():
            if not key.isidentifier() or any(c in value for c in "\\\r\n"):
                raise ValueError(f"a broker setting {key!r} = {value!r} cannot be written as a properties line")
        text = "".join(f"{key}={value}\n" for key, value in settings.items())
        await self.client.invoke_ok(address, request(RequestCode.UPDATE_BROKER_CONFIG, body=text.encode()))
