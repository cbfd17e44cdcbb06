"""Typed answers of the admin calls, read from fastjson bodies."""

from __future__ import annotations

from dataclasses import dataclass, field

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
            if not isinstance(key, ObjectKey):
                raise CodecError(f"offsetTable key is not a message queue: {key!r}")
            queue_id = key.get("queueId")
            if isinstance(queue_id, bool) or not isinstance(queue_id, int):
                raise CodecError(f"offsetTable key has no queue id: {key!r}")
            value = as_object(value, "offset wrapper")
            queues[(str(key.get("topic", "")), str(key.get("brokerName", "")), queue_id)] = QueueProgress(
                _int(value, "brokerOffset"), _int(value, "consumerOffset"), _int(value, "lastTimestamp"))
        tps = obj.get("consumeTps", 0.0)
        if isinstance(tps, bool) or not isinstance(tps, int | float):
            raise CodecError(f"consumeTps is not a number: {tps!r}")
        return cls(consume_tps=float(tps), queues=dict(sorted(queues.items())))
