"""The numbers of RocketMQ's remoting protocol (RequestCode, ResponseCode, LanguageCode, SerializeType).

Only the request codes mqlens uses or is about to use are listed; the values are RocketMQ 4.9.8's.
"""

from __future__ import annotations

from enum import IntEnum

# MQVersion.Version.V4_9_8.ordinal(): the version mqlens announces. From V4_9_4 on, the name server
# writes route data with string map keys (standard JSON).
VERSION_V4_9_8 = 409

# MixAll.UNIQUE_MSG_QUERY_FLAG: the extField that makes QUERY_MESSAGE a unique-key lookup.
UNIQUE_KEY_QUERY_FIELD = "_UNIQUE_KEY_QUERY"

# PullSysFlag: the request carries its own subscription (so no consumer of the group need be online).
PULL_FLAG_SUBSCRIPTION = 0x4

# MQVersion.Version: from V4_0_0_SNAPSHOT (212) to V5_9_9 (611) each release x.y.z is preceded by its
# snapshot, z and y running 0..9; the 3.x names before it follow no such rule.
_FIRST_4X_ORDINAL = 212
_LAST_5X_ORDINAL = 611


def version_name(ordinal: int) -> str:
    """A client's version ordinal as RocketMQ names it ("V4_9_8"); other ordinals as their number."""
    if not _FIRST_4X_ORDINAL <= ordinal <= _LAST_5X_ORDINAL:
        return str(ordinal)
    step = ordinal - _FIRST_4X_ORDINAL
    major, minor, patch = 4 + step // 200, step % 200 // 20, step % 20 // 2
    return f"V{major}_{minor}_{patch}" + ("_SNAPSHOT" if step % 2 == 0 else "")


class SerializeType(IntEnum):
    """How the header is encoded; the high byte of the frame's header-length word."""

    JSON = 0
    ROCKETMQ = 1


class LanguageCode(IntEnum):
    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12


class RequestCode(IntEnum):
    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    GET_ALL_TOPIC_CONFIG = 21
    GET_BROKER_CONFIG = 26
    UPDATE_BROKER_CONFIG = 25
    GET_BROKER_RUNTIME_INFO = 28
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    VIEW_MESSAGE_BY_ID = 33
    HEART_BEAT = 34
    CONSUMER_SEND_MSG_BACK = 36
    GET_CONSUMER_LIST_BY_GROUP = 38
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    GET_ALL_CONSUMER_OFFSET = 43
    GET_ALL_DELAY_OFFSET = 45
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201
    GET_TOPIC_STATS_INFO = 202
    GET_CONSUMER_CONNECTION_LIST = 203
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    GET_CONSUME_STATS = 208
    RESET_CONSUMER_OFFSET_IN_BROKER = 212
    INVOKE_BROKER_TO_RESET_OFFSET = 222
    GET_TOPICS_BY_CLUSTER = 224
    QUERY_TOPIC_CONSUME_BY_WHO = 300
    GET_CONSUMER_RUNNING_INFO = 307
    SEND_MESSAGE_V2 = 310
    QUERY_CONSUME_QUEUE = 321


class ResponseCode(IntEnum):
    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    SERVICE_NOT_AVAILABLE = 14
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    CONSUMER_NOT_ONLINE = 206
    NO_MESSAGE = 208
