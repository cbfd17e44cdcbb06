"""Admin calls to one broker: runtime info, settings, topic configs, consume stats, messages by offset id or key.

Message records come back as the broker stores them; mqlens's own store codec decodes them.
"""

from __future__ import annotations

from cluster.remoting.client import RemotingClient
from cluster.remoting.codes import UNIQUE_KEY_QUERY_FIELD, RequestCode, ResponseCode
from cluster.remoting.command import request
from cluster.remoting.errors import CodecError, ResponseError
from cluster.remoting.models import ConsumeStats, QueryResult, TopicConfig, as_object, body_object
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
