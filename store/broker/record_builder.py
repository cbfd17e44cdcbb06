"""What a producer's message becomes in the commit log, as RocketMQ 4.9's broker writes it.

The record keeps the client's properties plus CLUSTER, in java.util.HashMap order, without WAIT;
a delayed message goes to SCHEDULE_TOPIC_XXXX, one with a later delivery time to the timer topic,
and a transaction's half message to RMQ_SYS_TRANS_HALF_TOPIC, with its real topic and queue in
properties."""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from operator import itemgetter
from typing import NamedTuple

from store.broker.metadata import GROUP_NAME, MAX_GROUP_BYTES, TopicConfig
from store.errors import InvalidMessageError
from store.format import codec, ids, topics
from store.format.codec import StoredMessage
from store.format.delay_levels import DelayLevels
from store.format.delivery_time import requested_deliver_ms
from store.format.hosts import HostAddress
from store.format.layouts import MAGIC_V1, MAGIC_V2, PROPERTIES_LEN, TOPIC_LEN_V1, TOPIC_LEN_V2
from store.format.properties import (
    MAX_PROPERTIES_BYTES,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    check_property,
    java_hashmap_order,
)
from store.format.recordio import build_items

HOST_CACHE_LIMIT = 4096
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
# Property names of the compiled builder's messages, by its numbering.
FAST_PATH_PROPERTIES = (topics.KEYS, topics.UNIQ_KEY, topics.TAGS, topics.CLUSTER)


def is_valid_key(key: str) -> bool:
    """A key KEYS can hold: KEYS is the keys joined by spaces."""
    return bool(key) and " " not in key


@dataclass
class NewMessage:
    """A message handed to `put`, as a producer sends it."""

    topic: str
    body: bytes
    tags: str | None = None
    keys: list[str] = field(default_factory=list)
    properties: dict[str, str] = field(default_factory=dict)
    queue_id: int | None = None
    born_timestamp: int | None = None
    born_host: str | None = None
    flag: int = 0
    delay_level: int = 0
    unique_key: str | None = None
    reconsume_times: int = 0
    compress: bool = False
    client: str | None = None  # who sends it (a RocketMQ 5 client's id): named in its trace event, not in the record


class _TopicForm(NamedTuple):
    encoded: bytes
    magic: int
    overhead: int  # topic length field + topic + properties length field
    queues: int


@dataclass(frozen=True)
class _PropertiesForm:
    """How to write the properties of one set of names: values in HashMap order into a template."""

    values: Callable[[dict[str, str]], tuple[str, ...]]
    template: str  # printf-style, one %s per value


def _check_queue_id(topic: str, form: _TopicForm, queue_id) -> None:
    if type(queue_id) is not int or not 0 <= queue_id < form.queues:
        raise InvalidMessageError(f"invalid queue id {queue_id!r}: topic {topic} has queues 0 to {form.queues - 1}")


def _positive_level(text: str | None) -> int:
    return int(text) if text is not None and text.isdigit() and 0 < int(text) <= INT32_MAX else 0


def _check_int32(name: str, value) -> None:
    if type(value) is not int or not -INT32_MAX - 1 <= value <= INT32_MAX:
        raise InvalidMessageError(f"{name} must be a 32-bit integer, got {value!r}")


def _has_separator(text: str) -> bool:
    return NAME_VALUE_SEPARATOR in text or PROPERTY_SEPARATOR in text


def _check_producer_group(group) -> None:
    if type(group) is not str or not GROUP_NAME.fullmatch(group) or len(group.encode("utf-8")) > MAX_GROUP_BYTES:
        raise InvalidMessageError(f"invalid producer group {str(group)[:64]!r}: 1 to {MAX_GROUP_BYTES} letters, "
                                  "digits, '%', '|', '_' or '-'")


class RecordBuilder:
    """Turns NewMessages into record items for CommitLog.append_records:
    (size, topic bytes, queue id, flag, sys flag, born time, born address, born port,
    reconsume times, stored body, properties bytes, magic)."""

    def __init__(self, store_host: HostAddress, cluster: str, delay_levels: DelayLevels,
                 topic_for_send: Callable[[str], TopicConfig], max_message_bytes: int, max_record_size: int,
                 unique_keys: ids.UniqueKeyFactory):
        if not cluster or _has_separator(cluster):
            raise ValueError(f"invalid cluster name {cluster!r}")
        self.store_host = store_host
        self.cluster = cluster
        self.delay_levels = delay_levels
        self.topic_for_send = topic_for_send
        self.max_message_bytes = max_message_bytes
        self.max_record_size = max_record_size
        self.unique_keys = unique_keys
        self._store_sys_flag = codec.STOREHOST_V6_FLAG if store_host.is_ipv6 else 0
        self._fixed_size = {
            v6: codec.encoded_size(0, 0, 0, v6, store_host.is_ipv6) - TOPIC_LEN_V1.size - PROPERTIES_LEN.size
            for v6 in (False, True)
        }
        self._topics: dict[str, _TopicForm] = {}
        self._forms: dict[tuple[str, ...], _PropertiesForm] = {}
        self._hosts: dict[str, HostAddress] = {}
        self._round_robin: dict[str, Iterator[int]] = {}
        self._plan: tuple | None = None
        # Delivery times up to here go straight to their topic: the timer has delivered that far.
        self.timer_floor_ms = 0

    def build_many(self, messages: list[NewMessage], now: int) -> list[tuple[tuple, str, str]]:
        """`build` of each message: the compiled builder takes the common shape, Python the rest."""
        built, fallbacks = build_items(messages, now, self._compiled_plan())
        for i in fallbacks:
            built[i] = self.build(messages[i], now)
        return built

    def build_one(self, message: NewMessage, now: int) -> tuple[tuple, str, str]:
        """build_many of one message."""
        return build_items([message], now, self._compiled_plan())[0][0] or self.build(message, now)

    def _compiled_plan(self) -> tuple:
        if self._plan is None:
            orders = []
            for has_keys in (False, True):
                for has_tags in (False, True):
                    names = [topics.KEYS] if has_keys else []
                    names.append(topics.UNIQ_KEY)
                    if has_tags:
                        names.append(topics.TAGS)
                    names.append(topics.CLUSTER)
                    orders.append(tuple(FAST_PATH_PROPERTIES.index(n) for n in java_hashmap_order(names)))
            host = self.store_host
            sys_flag = self._store_sys_flag | (codec.BORNHOST_V6_FLAG if host.is_ipv6 else 0)
            self._plan = (self._topics, tuple(orders), self.cluster.encode("utf-8"), host.address, host.port,
                          sys_flag, self._fixed_size[host.is_ipv6], self.max_message_bytes, self.max_record_size,
                          MAX_PROPERTIES_BYTES, self.unique_keys.create, self._next_queue_id)
        return self._plan

    def build(self, m: NewMessage, now: int, *, half: bool = False,
              producer_group: str | None = None) -> tuple[tuple, str, str]:
        """The record item of `m`, its topic and its unique key. Raises InvalidMessageError.
        With `half`, the half message of a transaction `producer_group` sends: it waits in
        RMQ_SYS_TRANS_HALF_TOPIC, delivery time and all, until the transaction ends."""
        topic = m.topic
        form = self._topics.get(topic) or self._topic_form(topic)
        body = m.body
        if type(body) is not bytes:
            if not isinstance(body, bytes | bytearray):
                raise InvalidMessageError("the body must be bytes")
            body = bytes(body)
        if len(body) > self.max_message_bytes:
            raise InvalidMessageError(f"body of {len(body)} bytes exceeds {self.max_message_bytes}")
        queue_id = self._next_queue_id(topic, form.queues) if m.queue_id is None else m.queue_id
        _check_queue_id(topic, form, queue_id)
        _check_int32("flag", m.flag)
        _check_int32("reconsume_times", m.reconsume_times)
        props = self._client_properties(m.properties) if m.properties else {}
        keys = m.keys
        if keys:
            if isinstance(keys, str) or not all(type(k) is str for k in keys):
                raise InvalidMessageError("keys must be a list of strings")
            bad = next((k for k in keys if not is_valid_key(k)), None)
            if bad is not None:
                raise InvalidMessageError(f"invalid key {bad!r}: keys are non-empty and have no spaces")
            props[topics.KEYS] = " ".join(keys)
        unique_key = m.unique_key or props.get(topics.UNIQ_KEY) or self.unique_keys.create()
        if type(unique_key) is not str:
            raise InvalidMessageError("the unique key must be a string")
        props[topics.UNIQ_KEY] = unique_key
        if m.tags:
            if type(m.tags) is not str:
                raise InvalidMessageError("tags must be a string")
            props[topics.TAGS] = m.tags
        sys_flag = self._store_sys_flag
        if m.compress:
            body = zlib.compress(body, 5)
            sys_flag |= codec.COMPRESSED_FLAG
        if half:
            self._hold_as_half(m, props, topic, queue_id, producer_group, now)
            topic, queue_id = topics.TRANS_HALF_TOPIC, 0
            form = self._topics.get(topic) or self._topic_form(topic)
        elif m.delay_level and m.delay_level > 0:
            props.pop(topics.TIMER_DELIVER_MS, None)  # a delay level wins, as in RocketMQ 5
            delay = self.delay_levels.clamp(m.delay_level)
            props[topics.DELAY] = str(delay)
            props[topics.REAL_TOPIC] = topic
            props[topics.REAL_QID] = str(queue_id)
            props[topics.WAIT] = "true"
            topic, queue_id = topics.SCHEDULE_TOPIC, delay - 1
            form = self._topics.get(topic) or self._topic_form(topic)
        elif topics.TIMER_DELIVER_MS in props:
            deliver_ms = requested_deliver_ms(props, now)
            if deliver_ms > max(now, self.timer_floor_ms):
                props[topics.REAL_TOPIC] = topic
                props[topics.REAL_QID] = str(queue_id)
                topic, queue_id = topics.TIMER_TOPIC, 0
                form = self._topics.get(topic) or self._topic_form(topic)
        props[topics.CLUSTER] = self.cluster
        props_bytes = self._properties_bytes(props)
        born_host = self._host(m.born_host) if m.born_host else self.store_host
        born_v6 = len(born_host.address) == 16
        if born_v6:
            sys_flag |= codec.BORNHOST_V6_FLAG
        size = self._fixed_size[born_v6] + len(body) + form.overhead + len(props_bytes)
        if size > self.max_record_size:
            raise InvalidMessageError(f"a record of {size} bytes does not fit in a commit log segment")
        born_ts = now if m.born_timestamp is None else m.born_timestamp
        if type(born_ts) is not int or not -INT64_MAX - 1 <= born_ts <= INT64_MAX:
            raise InvalidMessageError(f"invalid born timestamp {born_ts!r}")
        item = (size, form.encoded, queue_id, m.flag, sys_flag, born_ts, born_host.address, born_host.port,
                m.reconsume_times, body, props_bytes, form.magic)
        return item, topic, unique_key

    def _hold_as_half(self, m: NewMessage, props: dict[str, str], topic: str, queue_id: int,
                      producer_group: str | None, now: int) -> None:
        """The properties RocketMQ 4.9's producer and broker give a half message, in the order
        they put them into its HashMap: TRAN_MSG, PGROUP and WAIT (the client), CLUSTER, then
        REAL_TOPIC and REAL_QID (the broker)."""
        if topics.holds_for_later(topic) or topic == topics.TRANS_CHECK_MAX_TIME_TOPIC:
            raise InvalidMessageError(f"topic {topic} does not take transactional messages")
        if (m.delay_level and m.delay_level > 0) or topics.DELAY in props:
            raise InvalidMessageError("a transactional message has no delay level: give it a delivery time "
                                      f"({topics.TIMER_DELIVER_MS}), which applies once it is committed")
        requested_deliver_ms(props, now)  # a malformed time is refused now, not at the commit
        props[topics.TRAN_MSG] = "true"
        if producer_group is not None:
            _check_producer_group(producer_group)
            props[topics.PRODUCER_GROUP] = producer_group
        props[topics.WAIT] = "true"
        props[topics.CLUSTER] = self.cluster
        props[topics.REAL_TOPIC] = topic
        props[topics.REAL_QID] = str(queue_id)

    def build_copy(self, source: StoredMessage, topic: str, queue_id: int, reconsume_times: int,
                   properties: dict[str, str] | None = None) -> tuple[tuple, str, str]:
        """The item of a broker-made copy of `source` (send-back, scheduled delivery): the same
        stored body, flag, sys flag, born time and born host. `properties`, in the order their
        names went into RocketMQ's HashMap, are laid out in that map's order, after the delay
        rewrite to SCHEDULE_TOPIC_XXXX when they hold a positive DELAY; without them the source's
        properties string is copied as it is."""
        if properties is not None:
            delay = _positive_level(properties.get(topics.DELAY))
            if delay:
                delay = self.delay_levels.clamp(delay)
                properties = {**properties, topics.DELAY: str(delay), topics.REAL_TOPIC: topic,
                              topics.REAL_QID: str(queue_id)}
                topic, queue_id = topics.SCHEDULE_TOPIC, delay - 1
        return self.copy_item(source, topic, queue_id, reconsume_times, properties), topic, source.unique_key

    def copy_item(self, source: StoredMessage, topic: str, queue_id: int, reconsume_times: int,
                  properties: dict[str, str] | None = None, *, transaction_type: int | None = None,
                  prepared_offset: int = 0) -> tuple:
        """The item of a copy of `source` in `topic` and `queue_id`, as build_copy makes it but
        never rescheduled; with `transaction_type` in its sys flag and, when not 0, the commit
        log offset of its transaction's half message."""
        if properties is None:
            props_bytes = source.properties_text().encode("utf-8")
        else:
            props_bytes = self._properties_bytes({name: properties[name] for name in java_hashmap_order(properties)})
        born = source.born_host
        sys_flag = source.sys_flag & ~(codec.BORNHOST_V6_FLAG | codec.STOREHOST_V6_FLAG)
        if transaction_type is not None:
            sys_flag = (sys_flag & ~codec.TRANSACTION_TYPE_MASK) | transaction_type
        item = self._item(topic, queue_id, source.flag, sys_flag, source.born_timestamp, born, reconsume_times,
                          source.stored_body, props_bytes)
        return item + (prepared_offset,) if prepared_offset else item

    def build_broker_record(self, topic: str, queue_id: int, body: bytes, properties: dict[str, str],
                            now: int) -> tuple[tuple, str, None]:
        """A record the broker writes for itself (a transaction's op record): exactly these
        properties, put into the HashMap in this order, born at the store host now."""
        props_bytes = self._properties_bytes({name: properties[name] for name in java_hashmap_order(properties)})
        item = self._item(topic, queue_id, 0, 0, now, self.store_host, 0, body, props_bytes)
        return item, topic, None

    def _item(self, topic: str, queue_id: int, flag: int, sys_flag: int, born_ts: int, born: HostAddress,
              reconsume_times: int, body: bytes, props_bytes: bytes) -> tuple:
        """A record item from its fields; the host flags of `sys_flag` are set here."""
        form = self._topics.get(topic) or self._topic_form(topic)
        _check_queue_id(topic, form, queue_id)
        sys_flag |= self._store_sys_flag
        if born.is_ipv6:
            sys_flag |= codec.BORNHOST_V6_FLAG
        size = self._fixed_size[born.is_ipv6] + len(body) + form.overhead + len(props_bytes)
        if size > self.max_record_size:
            raise InvalidMessageError(f"a record of {size} bytes does not fit in a commit log segment")
        return (size, form.encoded, queue_id, flag, sys_flag, born_ts, born.address, born.port, reconsume_times,
                body, props_bytes, form.magic)

    def _client_properties(self, given: dict[str, str]) -> dict[str, str]:
        props = {}
        for name, value in given.items():
            value = str(value)
            try:
                check_property(name, value)
            except ValueError as exc:
                raise InvalidMessageError(str(exc)) from None
            props[name] = value
        return props

    def _properties_bytes(self, props: dict[str, str]) -> bytes:
        names = tuple(props)
        form = self._forms.get(names) or self._properties_form(names)
        text = form.template % form.values(props)
        # Each name and value sits between separators, so a stray separator changes the counts.
        if text.count(NAME_VALUE_SEPARATOR) != len(names) or text.count(PROPERTY_SEPARATOR) != len(names) - 1:
            bad = next(name for name, value in props.items() if _has_separator(name) or _has_separator(value))
            raise InvalidMessageError(f"property {bad!r} contains a reserved separator character")
        try:
            encoded = text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidMessageError(f"properties are not valid text: {exc.reason}") from None
        if len(encoded) > MAX_PROPERTIES_BYTES:
            raise InvalidMessageError(f"properties take {len(encoded)} bytes; the limit is {MAX_PROPERTIES_BYTES}")
        return encoded

    def _properties_form(self, names: tuple[str, ...]) -> _PropertiesForm:
        ordered = java_hashmap_order(names)
        escaped = [name.replace("%", "%%") for name in ordered]
        template = PROPERTY_SEPARATOR.join(f"{name}{NAME_VALUE_SEPARATOR}%s" for name in escaped)
        getter = itemgetter(*ordered)
        values = getter if len(ordered) > 1 else (lambda props: (getter(props),))
        form = self._forms[names] = _PropertiesForm(values, template)
        return form

    def _topic_form(self, topic: str) -> _TopicForm:
        topics.validate_topic(topic)
        config = self.topic_for_send(topic)
        if not config.writable:
            raise InvalidMessageError(f"topic {topic} does not accept messages (permission {config.perm})")
        encoded = topic.encode("utf-8")
        magic = MAGIC_V1 if len(encoded) <= codec.MAX_TOPIC_BYTES_V1 else MAGIC_V2
        length_field = TOPIC_LEN_V1.size if magic == MAGIC_V1 else TOPIC_LEN_V2.size
        form = self._topics[topic] = _TopicForm(encoded, magic, length_field + len(encoded) + PROPERTIES_LEN.size,
                                                config.queues)
        return form

    def forget_topic(self, topic: str) -> None:
        """Drop what was cached of a topic whose settings changed."""
        self._topics.pop(topic, None)
        self._round_robin.pop(topic, None)

    def _next_queue_id(self, topic: str, queues: int) -> int:
        rr = self._round_robin.get(topic)
        if rr is None:
            rr = self._round_robin[topic] = itertools.cycle(range(queues))
        return next(rr)

    def _host(self, text: str) -> HostAddress:
        host = self._hosts.get(text)
        if host is None:
            try:
                host = HostAddress.parse(text)
            except ValueError as exc:
                raise InvalidMessageError(str(exc)) from None
            if len(self._hosts) < HOST_CACHE_LIMIT:
                self._hosts[text] = host
        return host
