"""Typed answers of the admin calls, read from fastjson bodies."""

from __future__ import annotations

from dataclasses import dataclass, field

from cluster.remoting.codes import version_name
from cluster.remoting.errors import CodecError
from cluster.remoting.fastjson import FastjsonError, ObjectKey, loads_fastjson

MASTER_ID = 0


def as_object(value, what: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise CodecError(f"{what} is not an object")
    return value


def _list(value, what: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise CodecError(f"{what} is not a list")
    return value


def _int(obj: dict, name: str, default: int = 0) -> int:
    value = obj.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise CodecError(f"field {name!r} is not an integer: {value!r}")
    return value


def _str(obj: dict, name: str, default: str = "") -> str:
    value = obj.get(name, default)
    if not isinstance(value, str):
        raise CodecError(f"field {name!r} is not a string: {value!r}")
    return value


def _bool(obj: dict, name: str, default: bool) -> bool:
    value = obj.get(name, default)
    if not isinstance(value, bool):
        raise CodecError(f"field {name!r} is not a boolean: {value!r}")
    return value


def _message_queue(key, table: str) -> tuple[str, str, int]:
    """A MessageQueue written as a map key ({"brokerName":…,"queueId":…,"topic":…}) -> (topic, broker, queue id)."""
    if not isinstance(key, ObjectKey):
        raise CodecError(f"{table} key is not a message queue: {key!r}")
    queue = key.as_dict()
    return _str(queue, "topic"), _str(queue, "brokerName"), _int(queue, "queueId", default=None)


def reset_offset_table(obj: dict) -> dict[tuple[str, str, int], int]:
    """ResetOffsetBody's offsetTable: message queue -> the offset the broker set."""
    table = {}
    for key, value in as_object(obj.get("offsetTable"), "offsetTable").items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise CodecError(f"offsetTable holds an offset that is not an integer: {value!r}")
        table[_message_queue(key, "offsetTable")] = value
    return table


def body_object(body: bytes, what: str) -> dict:
    """A response body that must hold a JSON object (fastjson's form)."""
    try:
        return as_object(loads_fastjson(body), what) if body else {}
    except FastjsonError as exc:
        raise CodecError(f"{what} unreadable: {exc}") from None


@dataclass(frozen=True)
class BrokerData:
    cluster: str
    broker_name: str
    addresses: dict[int, str]  # broker id (0: master) -> host:port

    @classmethod
    def from_json(cls, obj) -> BrokerData:
        obj = as_object(obj, "broker data")
        addrs = as_object(obj.get("brokerAddrs"), "brokerAddrs")
        try:
            addresses = {int(broker_id): str(addr) for broker_id, addr in addrs.items()}
        except (TypeError, ValueError):
            raise CodecError(f"brokerAddrs has a key that is not a broker id: {list(addrs)}") from None
        return cls(cluster=str(obj.get("cluster", "")), broker_name=str(obj.get("brokerName", "")),
                   addresses=dict(sorted(addresses.items())))

    @property
    def master_address(self) -> str | None:
        return self.addresses.get(MASTER_ID)

    def pick_address(self) -> str | None:
        """The master, else any slave (RocketMQ's BrokerData.selectBrokerAddr picks a random one)."""
        return self.master_address or next(iter(self.addresses.values()), None)


@dataclass(frozen=True)
class ClusterInfo:
    brokers: dict[str, BrokerData]  # broker name -> its data
    clusters: dict[str, list[str]]  # cluster name -> broker names (sorted)

    @classmethod
    def from_json(cls, obj) -> ClusterInfo:
        obj = as_object(obj, "cluster info")
        brokers = {str(name): BrokerData.from_json(data)
                   for name, data in as_object(obj.get("brokerAddrTable"), "brokerAddrTable").items()}
        clusters = {str(name): sorted(str(b) for b in _list(names, "cluster broker names"))
                    for name, names in as_object(obj.get("clusterAddrTable"), "clusterAddrTable").items()}
        return cls(brokers=brokers, clusters=clusters)


@dataclass(frozen=True)
class QueueData:
    broker_name: str
    read_queues: int
    write_queues: int
    perm: int
    topic_sys_flag: int = 0

    @classmethod
    def from_json(cls, obj) -> QueueData:
        obj = as_object(obj, "queue data")
        return cls(broker_name=str(obj.get("brokerName", "")), read_queues=_int(obj, "readQueueNums"),
                   write_queues=_int(obj, "writeQueueNums"), perm=_int(obj, "perm"),
                   topic_sys_flag=_int(obj, "topicSysFlag"))


@dataclass(frozen=True)
class TopicRoute:
    topic: str
    queues: list[QueueData]
    brokers: list[BrokerData]
    order_topic_conf: str | None = None

    @classmethod
    def from_json(cls, topic: str, obj) -> TopicRoute:
        obj = as_object(obj, "topic route")
        return cls(topic=topic,
                   queues=[QueueData.from_json(q) for q in _list(obj.get("queueDatas"), "queueDatas")],
                   brokers=[BrokerData.from_json(b) for b in _list(obj.get("brokerDatas"), "brokerDatas")],
                   order_topic_conf=obj.get("orderTopicConf"))


@dataclass(frozen=True)
class TopicConfig:
    name: str
    read_queues: int
    write_queues: int
    perm: int
    topic_sys_flag: int = 0
    order: bool = False

    @classmethod
    def from_json(cls, name: str, obj) -> TopicConfig:
        obj = as_object(obj, "topic config")
        return cls(name=str(obj.get("topicName", name)), read_queues=_int(obj, "readQueueNums"),
                   write_queues=_int(obj, "writeQueueNums"), perm=_int(obj, "perm"),
                   topic_sys_flag=_int(obj, "topicSysFlag"), order=bool(obj.get("order", False)))


@dataclass(frozen=True)
class QueryResult:
    """What one broker answered to QUERY_MESSAGE: the records it found (keys not yet re-checked)."""

    messages: list = field(default_factory=list)  # store.format.codec.StoredMessage
    index_last_update_ms: int = 0
    index_last_update_phys_offset: int = 0


@dataclass(frozen=True)
class QueueProgress:
    broker_offset: int
    consumer_offset: int
    last_timestamp_ms: int

    @property
    def lag(self) -> int:
        return max(0, self.broker_offset - self.consumer_offset)


@dataclass(frozen=True)
class ConsumeStats:
    """A group's progress on one broker (ConsumeStats), queues keyed by (topic, broker name, queue id)."""

    consume_tps: float
    queues: dict[tuple[str, str, int], QueueProgress]

    @classmethod
    def from_json(cls, obj) -> ConsumeStats:
        obj = as_object(obj, "consume stats")
        queues = {}
        for key, value in as_object(obj.get("offsetTable"), "offsetTable").items():
            value = as_object(value, "offset wrapper")
            queues[_message_queue(key, "offsetTable")] = QueueProgress(
                _int(value, "brokerOffset"), _int(value, "consumerOffset"), _int(value, "lastTimestamp"))
        tps = obj.get("consumeTps", 0.0)
        if isinstance(tps, bool) or not isinstance(tps, int | float):
            raise CodecError(f"consumeTps is not a number: {tps!r}")
        return cls(consume_tps=float(tps), queues=dict(sorted(queues.items())))


@dataclass(frozen=True)
class QueueStats:
    min_offset: int
    max_offset: int
    last_update_ms: int  # store time of the queue's last message; 0 for an empty queue

    @classmethod
    def from_json(cls, obj) -> QueueStats:
        obj = as_object(obj, "topic offset")
        return cls(_int(obj, "minOffset"), _int(obj, "maxOffset"), _int(obj, "lastUpdateTimestamp"))


@dataclass(frozen=True)
class TopicStats:
    """A topic's queues on one broker (TopicStatsTable), keyed by (topic, broker name, queue id)."""

    queues: dict[tuple[str, str, int], QueueStats]

    @classmethod
    def from_json(cls, obj) -> TopicStats:
        table = as_object(as_object(obj, "topic stats").get("offsetTable"), "offsetTable")
        return cls(queues=dict(sorted(
            (_message_queue(key, "offsetTable"), QueueStats.from_json(value)) for key, value in table.items())))


@dataclass(frozen=True)
class ConsumerClient:
    """One connection of a consumer group, as the broker saw its heartbeat."""

    client_id: str
    address: str
    language: str
    version: int  # MQVersion.Version ordinal

    @property
    def version_name(self) -> str:
        return version_name(self.version)

    @classmethod
    def from_json(cls, obj) -> ConsumerClient:
        obj = as_object(obj, "connection")
        return cls(client_id=_str(obj, "clientId"), address=_str(obj, "clientAddr"),
                   language=_str(obj, "language"), version=_int(obj, "version"))


@dataclass(frozen=True)
class Subscription:
    topic: str
    expression: str  # subString: "*", "TagA || TagB", or an SQL92 expression
    expression_type: str  # TAG or SQL92
    tags: list[str]  # sorted; empty for "*" and SQL92

    @classmethod
    def from_json(cls, obj) -> Subscription:
        obj = as_object(obj, "subscription")
        tags = _list(obj.get("tagsSet"), "tagsSet")
        if not all(isinstance(tag, str) for tag in tags):
            raise CodecError(f"tagsSet holds a value that is not a tag: {tags!r}")
        return cls(topic=_str(obj, "topic"), expression=_str(obj, "subString"),
                   expression_type=_str(obj, "expressionType", "TAG"), tags=sorted(tags))


@dataclass(frozen=True)
class ConsumerConnections:
    """The online consumers of a group on one broker (ConsumerConnection)."""

    clients: list[ConsumerClient]  # sorted by client id
    subscriptions: dict[str, Subscription]  # topic -> subscription, sorted
    consume_type: str  # CONSUME_PASSIVELY (push) or CONSUME_ACTIVELY (pull)
    message_model: str  # CLUSTERING or BROADCASTING
    consume_from_where: str

    @classmethod
    def from_json(cls, obj) -> ConsumerConnections:
        obj = as_object(obj, "consumer connection")
        clients = [ConsumerClient.from_json(c) for c in _list(obj.get("connectionSet"), "connectionSet")]
        subscriptions = {str(topic): Subscription.from_json(data) for topic, data in
                         as_object(obj.get("subscriptionTable"), "subscriptionTable").items()}
        return cls(clients=sorted(clients, key=lambda c: (c.client_id, c.address)),
                   subscriptions=dict(sorted(subscriptions.items())), consume_type=_str(obj, "consumeType"),
                   message_model=_str(obj, "messageModel"), consume_from_where=_str(obj, "consumeFromWhere"))


@dataclass(frozen=True)
class SubscriptionGroup:
    """A consumer group's settings on one broker (SubscriptionGroupConfig); defaults are RocketMQ's."""

    name: str
    consume_enable: bool
    broadcast_enable: bool
    retry_queues: int
    retry_max_times: int
    broker_id: int
    which_broker_when_slow: int

    @classmethod
    def from_json(cls, name: str, obj) -> SubscriptionGroup:
        obj = as_object(obj, "subscription group")
        return cls(name=_str(obj, "groupName", name), consume_enable=_bool(obj, "consumeEnable", True),
                   broadcast_enable=_bool(obj, "consumeBroadcastEnable", True),
                   retry_queues=_int(obj, "retryQueueNums", 1), retry_max_times=_int(obj, "retryMaxTimes", 16),
                   broker_id=_int(obj, "brokerId", MASTER_ID),
                   which_broker_when_slow=_int(obj, "whichBrokerWhenConsumeSlowly", 1))
