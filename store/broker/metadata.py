"""Topics and consumer groups: explicit metadata persisted in the store's config directory
(config/topics.json and config/subscriptionGroup.json, in RocketMQ's field names)."""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from store.errors import StoreError
from store.format import topics
from store.log.config_file import read_config, write_config

TOPICS_FILE = "topics.json"
GROUPS_FILE = "subscriptionGroup.json"
PERM_READ_WRITE = topics.PERM_READ | topics.PERM_WRITE
MAX_QUEUES = 1024
MAX_GROUP_BYTES = 255  # RocketMQ's own limit: a store it wrote may hold such groups
MAX_CONSUMING_GROUP_BYTES = topics.MAX_TOPIC_BYTES - len(topics.RETRY_PREFIX)
GROUP_NAME = re.compile(r"^[%|a-zA-Z0-9_-]+$")
DEFAULT_RETRY_MAX_TIMES = topics.DEFAULT_RETRY_MAX_TIMES
# Topics of the broker's own machinery RocketMQ creates with one queue (whatever the default).
SINGLE_QUEUE_TOPICS = frozenset({topics.TIMER_TOPIC, topics.TRANS_HALF_TOPIC, topics.TRANS_OP_HALF_TOPIC,
                                 topics.TRANS_CHECK_MAX_TIME_TOPIC})


class MetadataError(StoreError, ValueError):
    """A topic or group name or setting breaks a rule, or a topic that must exist does not."""


class TopicNotFoundError(MetadataError):
    """The topic does not exist and topics are not created on first send."""


@dataclass(frozen=True)
class TopicConfig:
    name: str
    queues: int = 4
    perm: int = PERM_READ_WRITE

    @property
    def readable(self) -> bool:
        return bool(self.perm & topics.PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & topics.PERM_WRITE)

    def to_json(self) -> dict:
        return {"topicName": self.name, "readQueueNums": self.queues, "writeQueueNums": self.queues,
                "perm": self.perm, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False}

    @classmethod
    def from_json(cls, data: dict) -> TopicConfig:
        return checked_topic(cls(name=data["topicName"], queues=int(data.get("writeQueueNums", 4)),
                                 perm=int(data.get("perm", PERM_READ_WRITE))))


@dataclass(frozen=True)
class GroupConfig:
    name: str
    max_reconsume_times: int = DEFAULT_RETRY_MAX_TIMES
    consume_mode: Literal["concurrent", "orderly"] = "concurrent"
    message_model: Literal["clustering", "broadcast"] = "clustering"
    retry_queues: int = 1
    consume_enable: bool = True
    # False: read from a file a RocketMQ broker wrote, which has no message model (its clients keep it)
    model_recorded: bool = field(default=True, compare=False)

    def to_json(self) -> dict:
        # RocketMQ's SubscriptionGroupConfig fields, plus mqlens's own (RocketMQ ignores unknown ones).
        return {"groupName": self.name, "consumeEnable": self.consume_enable, "consumeFromMinEnable": True,
                "consumeBroadcastEnable": True, "retryQueueNums": self.retry_queues,
                "retryMaxTimes": self.max_reconsume_times, "brokerId": 0, "whichBrokerWhenConsumeSlowly": 1,
                "notifyConsumerIdsChangedEnable": True, "consumeMode": self.consume_mode,
                "messageModel": self.message_model}

    @classmethod
    def from_json(cls, data: dict) -> GroupConfig:
        return checked_group(cls(
            name=data["groupName"], max_reconsume_times=int(data.get("retryMaxTimes", DEFAULT_RETRY_MAX_TIMES)),
            consume_mode=data.get("consumeMode", "concurrent"), message_model=data.get("messageModel", "clustering"),
            retry_queues=int(data.get("retryQueueNums", 1)), consume_enable=bool(data.get("consumeEnable", True)),
            model_recorded="messageModel" in data))


def checked_topic(config: TopicConfig) -> TopicConfig:
    topics.validate_topic(config.name)
    if not 1 <= config.queues <= MAX_QUEUES:
        raise MetadataError(f"topic {config.name}: queue count {config.queues} is not between 1 and {MAX_QUEUES}")
    if config.perm & ~(PERM_READ_WRITE | 1 | 8):
        raise MetadataError(f"topic {config.name}: unknown permission bits in {config.perm}")
    return config


def consuming_group(name: str) -> str:
    """A group name that can consume: checked like any group, and short enough that its
    %RETRY% and %DLQ% topics fit the topic length limit (a longer one could never retry or
    dead-letter). Raised where a group is created or first used, so the error reaches a person."""
    checked_group(GroupConfig(name))
    size = len(name.encode())
    if size > MAX_CONSUMING_GROUP_BYTES:
        raise MetadataError(f"group name {name[:24]!r}... is {size} bytes: a consumer group name is at most "
                            f"{MAX_CONSUMING_GROUP_BYTES} bytes, so that its retry topic {topics.RETRY_PREFIX}<group> "
                            f"and dead-letter topic {topics.DLQ_PREFIX}<group> fit the {topics.MAX_TOPIC_BYTES}-byte "
                            "topic limit")
    return name


def checked_group(config: GroupConfig) -> GroupConfig:
    name = config.name
    if not isinstance(name, str) or not GROUP_NAME.fullmatch(name) or len(name.encode()) > MAX_GROUP_BYTES:
        raise MetadataError(f"invalid group name {name!r}: use letters, digits, '%', '|', '_' or '-' "
                            f"(at most {MAX_GROUP_BYTES} bytes)")
    if not 0 <= config.max_reconsume_times <= 10_000:
        raise MetadataError("max reconsume times must be between 0 and 10000")
    if config.consume_mode not in ("concurrent", "orderly"):
        raise MetadataError("consume mode is 'concurrent' or 'orderly'")
    if config.message_model not in ("clustering", "broadcast"):
        raise MetadataError("message model is 'clustering' or 'broadcast'")
    if not 1 <= config.retry_queues <= MAX_QUEUES:
        raise MetadataError(f"retry queue count must be between 1 and {MAX_QUEUES}")
    return config


class Metadata:
    """Topic and group tables, persisted on every change (changes are rare)."""

    def __init__(self, config_dir: Path, *, auto_create_topics: bool = True, default_queues: int = 4,
                 schedule_queues: int = 18, writable: bool = True):
        self.topics_path = Path(config_dir) / TOPICS_FILE
        self.groups_path = Path(config_dir) / GROUPS_FILE
        self.auto_create_topics = auto_create_topics
        self.default_queues = default_queues
        self.schedule_queues = schedule_queues
        self.writable = writable
        self._lock = threading.RLock()
        self._topics: dict[str, TopicConfig] = {}
        self._groups: dict[str, GroupConfig] = {}
        self._load()

    def _load(self) -> None:
        try:
            content = read_config(self.topics_path) or {}
            for data in content.get("topicConfigTable", {}).values():
                topic = TopicConfig.from_json(data)
                self._topics[topic.name] = topic
            content = read_config(self.groups_path) or {}
            for data in content.get("subscriptionGroupTable", {}).values():
                group = GroupConfig.from_json(data)
                self._groups[group.name] = group
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise MetadataError(f"unreadable metadata in {self.topics_path.parent}: {exc}") from None

    # -- topics ------------------------------------------------------------------------------
    def topic(self, name: str) -> TopicConfig | None:
        return self._topics.get(name)

    def topics(self) -> list[TopicConfig]:
        with self._lock:
            return sorted(self._topics.values(), key=lambda t: t.name)

    def put_topic(self, config: TopicConfig) -> TopicConfig:
        checked_topic(config)
        with self._lock:
            self._save_topics({**self._topics, config.name: config})
            self._topics[config.name] = config
        return config

    def topic_for_send(self, name: str) -> TopicConfig:
        """The topic a producer sends to: created on first send when allowed. Retry, dead-letter
        and the broker's own topics get RocketMQ's queue counts, and are created even when
        topics are not."""
        found = self._topics.get(name)
        if found is not None:
            return found
        with self._lock:
            found = self._topics.get(name)
            if found is not None:
                return found
            if topics.is_dlq_topic(name):
                config = TopicConfig(name, queues=1)
            elif topics.is_retry_topic(name):
                group = self._groups.get(name[len(topics.RETRY_PREFIX):])
                config = TopicConfig(name, queues=group.retry_queues if group else 1)
            elif name == topics.SCHEDULE_TOPIC:
                config = TopicConfig(name, queues=self.schedule_queues)
            elif name in SINGLE_QUEUE_TOPICS:
                config = TopicConfig(name, queues=1)
            elif self.auto_create_topics:
                config = TopicConfig(name, queues=self.default_queues)
            else:
                checked_topic(TopicConfig(name))
                raise TopicNotFoundError(f"topic {name} does not exist (automatic creation is off)")
            return self.put_topic(config)

    def adopt(self, found: dict[str, int]) -> None:
        """Register topics that have consume queues on disk but no metadata (a store written
        without config files): `found` maps each to its highest queue id + 1."""
        with self._lock:
            missing = {name: TopicConfig(name, queues=min(MAX_QUEUES, max(queues, 1)))
                       for name, queues in found.items() if name not in self._topics}
            if missing:
                self._save_topics({**self._topics, **missing})
                self._topics.update(missing)

    def _save_topics(self, table: dict[str, TopicConfig]) -> None:
        """Write the topic table; the caller changes its memory only after this returns."""
        if self.writable:
            write_config(self.topics_path, {"topicConfigTable": {n: t.to_json() for n, t in table.items()}})

    # -- groups ------------------------------------------------------------------------------
    def group(self, name: str) -> GroupConfig:
        """The group's settings; a group nobody configured has the defaults."""
        found = self._groups.get(name)
        return found if found is not None else checked_group(GroupConfig(name))

    def groups(self) -> list[GroupConfig]:
        with self._lock:
            return sorted(self._groups.values(), key=lambda g: g.name)

    def put_group(self, config: GroupConfig) -> GroupConfig:
        checked_group(config)
        consuming_group(config.name)
        with self._lock:
            table = {**self._groups, config.name: config}
            if self.writable:
                write_config(self.groups_path, {"subscriptionGroupTable": {n: g.to_json() for n, g in table.items()}})
            self._groups[config.name] = config
        return config

    def update_group(self, name: str, **changes) -> GroupConfig:
        return self.put_group(replace(self.group(name), **changes))
