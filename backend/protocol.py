"""The seam between the console and what it shows: the embedded store or a live RocketMQ cluster.

Services ask a `Backend`; `create_app` picks one at start-up. A feature a backend does not
serve is named by `Backend.unsupported`, so pages and REST say so instead of failing.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Literal, Protocol

from store.broker.trace import TraceEvent
from store.errors import MessageNotFoundError
from store.format.client_trace import ClientTraceContext
from store.format.codec import StoredMessage
from store.format.delay_levels import DelayLevels

BackendKind = Literal["embedded", "cluster"]


class BackendUnavailable(Exception):
    """Nothing of the answer could be read: no name server answered, or not in time."""


class BrokerGone(MessageNotFoundError):
    """An offset message id names a broker the cluster does not list now: not there, or down."""


class BackendRefused(ValueError):
    """The request cannot be answered as asked on this backend (it names no single broker, say)."""


@dataclass(frozen=True)
class BrokerView:
    cluster: str
    name: str
    broker_id: int  # 0: the master
    address: str | None  # host:port; None for the embedded store
    version: str | None = None
    put_tps: float | None = None
    get_tps: float | None = None
    commitlog_max_offset: int | None = None
    earliest_message_ms: int | None = None
    error: str | None = None  # it did not answer: why

    @property
    def role(self) -> str:
        return "master" if self.broker_id == 0 else "slave"

    @property
    def answered(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class ClusterView:
    name: str
    brokers: list[BrokerView]


@dataclass(frozen=True)
class BackendView:
    """What the console is attached to, as it was seen just now."""

    kind: BackendKind
    name_servers: list[str] = field(default_factory=list)
    clusters: list[ClusterView] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # what could not be seen, and why

    @property
    def complete(self) -> bool:
        return not self.problems and all(b.answered for c in self.clusters for b in c.brokers)


@dataclass(frozen=True)
class QueueOffsets:
    queue_id: int
    min_offset: int
    max_offset: int
    broker: str | None = None  # the broker that holds the queue; None: the embedded store
    last_update_ms: int | None = None  # a live cluster's broker says when its last message was stored


@dataclass(frozen=True)
class TopicView:
    name: str
    queues: int  # write queues, over every broker of the topic
    perm: int
    readable: bool
    writable: bool
    kind: str  # original, scheduled, retry, dead_letter, trace
    system: bool
    queue_offsets: list[QueueOffsets]


@dataclass(frozen=True)
class QueueActivity:
    newest_ms: int | None  # when its last message was stored; None: empty or unknown
    stored_since: int | None  # messages stored at or after the time asked; None: not asked or unknown


@dataclass(frozen=True)
class TopicList:
    topics: list[TopicView]
    problems: list[str] = field(default_factory=list)  # brokers or topics that could not be read, and why


@dataclass(frozen=True)
class GroupView:
    name: str
    max_reconsume_times: int
    consume_mode: str
    message_model: str
    retry_queues: int
    consume_enable: bool
    configured: bool
    message_model_recorded: bool = True  # False: a RocketMQ broker's settings, which do not keep it

    @property
    def version(self) -> str:
        """Names these settings: an edit made from other settings is refused."""
        text = json.dumps({k: v for k, v in asdict(self).items() if k != "name"}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class QueueLag:
    topic: str
    queue_id: int
    committed: int
    min_offset: int
    max_offset: int
    lag: int  # messages still there to consume: max offset - max(committed, min offset)
    expired: bool  # the committed offset points at messages retention already deleted


@dataclass(frozen=True)
class BrokerQueueLag(QueueLag):
    """A live cluster's queue, on one of its brokers."""

    broker: str = ""


@dataclass(frozen=True)
class GroupProgress:
    queues: list[QueueLag]
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class GroupSummary:
    name: str
    configured: bool
    queues: int  # queues it committed an offset on
    lag: int
    retry_messages: int  # held in its %RETRY% topic
    dead_letters: int  # held in its %DLQ% topic


@dataclass(frozen=True)
class GroupList:
    groups: list[GroupSummary]
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ConsumerClientView:
    client_id: str
    address: str
    language: str
    version: str


@dataclass(frozen=True)
class GroupConnections:
    """A live cluster's consumers of a group online now, as the brokers know them."""

    clients: list[ConsumerClientView]
    subscriptions: dict[str, str]  # topic -> its filter expression
    consume_type: str
    message_model: str
    consume_from_where: str
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class KeyMatches:
    messages: list[StoredMessage]  # newest first
    truncated: bool = False  # more may match: a cap, a deadline or an index walk stopped it
    searched_topics: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # brokers or topics that did not answer, and why


# -- dead letters
@dataclass(frozen=True)
class DeadLetterWindow:
    """Which dead letters a page reads: stored in [begin_ms, end_ms], with this tag, whose keys or
    unique key are this key."""

    begin_ms: int = 0
    end_ms: int | None = None
    tag: str | None = None
    key: str | None = None


@dataclass(frozen=True)
class DeadLetterPage:
    messages: list[StoredMessage]  # newest first: by store time, then commit log offset
    next_position: tuple[int, int] | None  # (store time, commit log offset) the next page reads below
    held: int  # dead letters in the topics read, before the window (with a key: the matches found)
    problems: list[str] = field(default_factory=list)  # brokers that did not answer, and why
    whole: bool = False  # every dead letter of the window from `before` on is in this page


# -- timeline
@dataclass(frozen=True)
class ClientTrace:
    contexts: list[ClientTraceContext]  # by time stamp
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class InFlight:
    """A message a group received (pop) and has not acknowledged yet."""

    attempt: int
    due_ms: int  # invisible until (handed out) or next attempt (waiting)
    handed_out: bool
    last_failure: str | None


@dataclass(frozen=True)
class ReceiveState:
    """A group's receive (pop) progress on a topic."""

    cursors: dict[int, int]  # queue id -> next offset to hand out
    in_flight: dict[tuple[int, int], InFlight]  # (queue id, queue offset) -> the entry


@dataclass(frozen=True)
class RecordedProgress:
    """What the backend records of the groups' progress."""

    offsets: dict[tuple[str, str], dict[int, int]]  # (topic, group) -> queue id -> committed consumer offset
    receive: dict[tuple[str, str], ReceiveState] = field(default_factory=dict)  # (group, topic) -> its state
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class DelayTables:
    levels: DelayLevels  # the delay levels scheduled copies wait by
    problems: list[str] = field(default_factory=list)


class Backend(Protocol):
    kind: BackendKind

    def describe(self) -> BackendView:
        """The clusters, brokers, versions and roles the console sees."""
        ...

    def list_topics(self) -> TopicList:
        """Every topic, system topics too, by name, with each queue's offsets."""
        ...

    def get_topic(self, name: str) -> TopicView | None:
        ...

    def queue_activity(self, topic: TopicView, since_ms: int | None) -> list[QueueActivity]:
        """Per queue of `topic` (in its order): its newest message's store time and, when
        `since_ms` is given, how many messages were stored from then on."""
        ...

    def list_groups(self) -> list[GroupView]:
        """The groups set up (on a cluster: every master broker's subscription groups, merged)."""
        ...

    def get_group(self, name: str) -> GroupView:
        """A group's settings; one nobody set up has the defaults (configured: false)."""
        ...

    def group_progress(self, group: str) -> GroupProgress:
        """The group's committed offset, the queue's bounds and the lag on every queue it
        committed an offset on, its own topics first."""
        ...

    def group_summaries(self) -> GroupList:
        """Every group known, with its lag, retry messages and dead letters, by name."""
        ...

    def group_connections(self, group: str) -> GroupConnections | None:
        """The group's consumers online now as the brokers know them; None where the backend
        has no such view (the embedded store's clients are the gRPC front's sessions)."""
        ...

    def close(self) -> None:
        ...

    # -- lookups
    def topic_names(self) -> list[str]:
        """The name of every topic, system topics too."""
        ...

    def read_by_offset_id(self, offset_msg_id: str) -> StoredMessage:
        """The message a well-formed offset message id names; MessageNotFoundError when nothing is there."""
        ...

    def query_key(self, key: str, topic_names: list[str], begin_ms: int, end_ms: int, max_results: int,
                  unique: bool) -> KeyMatches:
        """Messages of these topics stored in the window whose KEYS hold `key` (or whose UNIQ_KEY is
        `key`), newest first, at most `max_results`."""
        ...

    def read_at(self, topic: str, queue_id: int, queue_offset: int, broker: str | None = None) -> StoredMessage:
        """The message at one queue offset (of `broker`'s queue on a cluster); MessageNotFoundError
        when none is there, BackendRefused when the queue is on several brokers and none was named."""
        ...

    # -- dead letters
    def dead_letter_page(self, group: str | None, window: DeadLetterWindow, before: tuple[int, int] | None,
                         limit: int) -> DeadLetterPage:
        """The dead letters of the group's %DLQ% topic (every group's when None) in the window and older
        than `before`, newest first, at most `limit`, read without moving any group's offset. The
        embedded store's inbox reads its dead-letter index instead (app.services.dead_letters)."""
        ...

    def resend_dead_letter(self, dead: StoredMessage, actor: str | None, *, topic: str,
                           marks: dict[str, str] | None = None, unique_key: str | None = None,
                           body: bytes | None = None, property_changes: dict[str, str | None] | None = None) -> str:
        """Put the dead letter's fresh copy (store.format.resend_plan) on `topic`; the copy's offset
        message id. InvalidMessageError when it cannot go there; BackendUnavailable when it is not
        known whether it went."""
        ...

    def retry_route(self, group: str, origin: str | None) -> str:
        """The retry topic a message of `origin` takes back to `group` only."""
        ...

    def new_unique_key(self) -> str:
        """A fresh unique key in RocketMQ's client form, for a dead letter that has none."""
        ...

    def copy_state(self, group: str, offset_msg_id: str) -> str:
        """What became of a resent copy for its group: consumed, pending or unknown (gone)."""
        ...

    # -- operator settings
    def plan_offset_reset(self, group: str, topic: str, target: ResetTarget,
                          queue_id: int | None = None) -> OffsetResetPlan:
        """The group's committed offset on each queue of the topic (one queue, or all) and the offset
        `target` names there; nothing is changed."""
        ...

    def apply_offset_reset(self, plan: OffsetResetPlan) -> OffsetResetDone:
        """Move the group's offsets as `plan` says (on a cluster: through its consumers online, else
        broker by broker); what could not be done is named in `problems`."""
        ...

    def broker_setting(self, key: str) -> BrokerSetting:
        """One setting as each broker has it now."""
        ...

    def update_broker_setting(self, key: str, value: str) -> BrokerSetting:
        """Write one setting on every broker; answers what each broker has after the write."""
        ...


    # -- broker settings
    def broker_settings(self, name: str, broker_id: int) -> BrokerSettings | None:
        """Every setting of the broker `name` with this id (0: its master); None when there is none."""
        ...

    # -- timeline
    def recorded_events(self, unique_key: str) -> list[TraceEvent]:
        """mqlens's own trace events of the message, oldest first (none on a cluster)."""
        ...

    def client_trace(self, unique_key: str) -> ClientTrace:
        """The RocketMQ clients' trace contexts about the message (RMQ_SYS_TRACE_TOPIC)."""
        ...

    def delay_tables(self, copies: list[StoredMessage]) -> DelayTables:
        """The delay levels in force where these copies were stored."""
        ...

    def consumer_progress(self, topic_names: list[str]) -> RecordedProgress:
        """The groups' committed offsets and receive state, at least on these topics and on every
        topic of the groups consuming them."""
        ...

    def settled_half_offsets(self) -> tuple[set[int], bool] | None:
        """The transaction half messages' queue offsets an end settles, and whether every end was
        read; None where the backend cannot tell."""
        ...


# -- operator settings: what the operator settings of a backend answer
DELAY_LEVEL_SETTING = "messageDelayLevel"  # RocketMQ's broker setting of the delay level table


@dataclass(frozen=True)
class ResetTarget:
    kind: Literal["earliest", "latest", "time", "offset"]
    value: int | None = None  # epoch ms for "time", the offset for "offset"


@dataclass(frozen=True)
class BrokerQueueReset:
    broker: str
    queue_id: int
    min_offset: int
    max_offset: int
    before: int | None  # committed now; None: never committed
    after: int
    lag_before: int
    lag_after: int


def queue_reset(broker: str, queue_id: int, min_offset: int, max_offset: int, before: int | None,
                wanted: int) -> BrokerQueueReset:
    """A queue's reset to `wanted`, kept within the queue's offsets, with the lag before and after."""
    after = min(max(wanted, min_offset), max_offset)
    start = max(before if before is not None else min_offset, min_offset)
    return BrokerQueueReset(broker, queue_id, min_offset, max_offset, before, after, max_offset - start,
                            max_offset - after)


@dataclass(frozen=True)
class OffsetResetPlan:
    group: str
    topic: str
    target: ResetTarget
    queue_id: int | None
    queues: list[BrokerQueueReset]
    consumers_online: bool = False  # consumers of the group subscribed to the topic are online now
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class OffsetResetDone:
    queues: list[BrokerQueueReset]  # the queues moved, `after` as the broker set it
    through: Literal["offsets", "consumers"]  # the committed offsets written, or the consumers online told
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class BrokerSettingValue:
    broker: str  # its name; a slave's with its id
    address: str | None
    value: str | None  # None: not read (error says why) or the broker has no such setting
    error: str | None = None


@dataclass(frozen=True)
class BrokerSetting:
    key: str
    brokers: list[BrokerSettingValue]
    problems: list[str] = field(default_factory=list)

    @property
    def values(self) -> list[str]:
        """The distinct values read, in broker order."""
        return list(dict.fromkeys(b.value for b in self.brokers if b.value is not None))

    @property
    def differ(self) -> bool:
        return len(self.values) > 1


# -- broker settings
@dataclass(frozen=True)
class BrokerSettings:
    """Every setting of one broker, as it answers them now (RocketMQ's broker config; the embedded
    store's own configuration)."""

    name: str
    broker_id: int
    address: str | None
    settings: dict[str, str]  # by key
    problems: list[str] = field(default_factory=list)  # it did not answer: why


# -- broker faults
class SendUnanswered(BackendUnavailable):
    """A send got no answer: the copy may be stored on `broker`, so only that broker can tell."""

    def __init__(self, message: str, broker: str):
        super().__init__(message)
        self.broker = broker
