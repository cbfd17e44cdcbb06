"""Request and response bodies of the REST API (pydantic), shown in the OpenAPI document."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_serializer, model_validator

from app.params import (
    ACCOUNT_NAME_PATTERN,
    BASE64_PATTERN,
    DELAY_LEVELS_PATTERN,
    MIN_PASSWORD_CHARS,
    DeadLetterRef,
    EditPropertyName,
    EditPropertyValue,
    GroupField,
    MessageKey,
    MessageTag,
    PropertyName,
    PropertyValue,
    TopicField,
    exactly_one_of,
    names_declared,
    not_both,
)
from app.services import content_search
from app.services.messages import MAX_MESSAGES_PER_REQUEST
from pipeline.jobs import JOBS
from store.broker.metadata import MAX_QUEUES
from store.broker.pop import MAX_INVISIBLE_MS, MAX_MESSAGES, MAX_WAIT_MS, MIN_INVISIBLE_MS

StrictInt = Annotated[int, Field(strict=True)]
MAX_SQL_INTEGER = 2**63 - 1  # the largest number the database holds
# Standard base64 as b64decode(validate=True) takes it; checked by the service (400), declared here.
Base64 = Annotated[str, Field(json_schema_extra={"pattern": BASE64_PATTERN})]
Reason = Annotated[str | None, Field(max_length=2000, description="Why (a sentence or a ticket), for the audit log.")]


class Strict(BaseModel):
    """A request body: unknown fields are errors, so a typo never goes unnoticed."""

    model_config = ConfigDict(extra="forbid")


# -- messages ----------------------------------------------------------------------------------
class ProduceMessage(Strict):
    """One message to put. Give exactly one of `body` (text, stored as UTF-8) and `body_base64`."""

    model_config = ConfigDict(json_schema_extra={
        **exactly_one_of("body", "body_base64", types=("string", "string")),
        **not_both("delay_level", "deliver_at_ms", types=("integer", "integer"))})

    body: str | None = Field(None, description="Message body as text (stored as UTF-8).")
    body_base64: Base64 | None = Field(None, description="Message body as standard base64 (binary bodies).")
    tags: MessageTag | None = Field(None, description="The message's tag (one string, used for filtering; an "
                                    "empty string is no tag).")
    keys: list[MessageKey] = Field(default_factory=list, description="Business keys, each indexed for lookups "
                                   "(a key longer than 512 characters is stored but cannot be looked up).")
    properties: dict[PropertyName, PropertyValue] = Field(
        default_factory=dict, json_schema_extra=names_declared,
        description="User properties: names and values are not empty; names the broker sets (KEYS, TAGS, "
        "UNIQ_KEY, DELAY...) are reserved. Keys, tag and properties take at most 32767 bytes together.")
    delay_level: StrictInt | None = Field(None, ge=0, description="RocketMQ delay level (1 = first entry of the "
                                          "delay table); the message waits in SCHEDULE_TOPIC_XXXX.")
    deliver_at_ms: StrictInt | None = Field(None, ge=0, description="Deliver at this time (epoch ms); "
                                            "stored as the TIMER_DELIVER_MS property.")
    queue_id: StrictInt | None = Field(None, ge=0, description="Queue to put to; default: round robin.")

    @model_validator(mode="after")
    def _one_body(self) -> ProduceMessage:
        if (self.body is None) == (self.body_base64 is None):
            raise ValueError("give exactly one of 'body' and 'body_base64'")
        return self


def _produce_shape(value: object) -> str:
    return "many" if isinstance(value, list) else "one"


ProduceBody = Annotated[
    Annotated[ProduceMessage, Tag("one")]
    | Annotated[list[ProduceMessage], Field(json_schema_extra={"minItems": 1, "maxItems": MAX_MESSAGES_PER_REQUEST}),
                Tag("many")],
    Discriminator(_produce_shape),
]


class PutResultOut(BaseModel):
    offset_msg_id: str
    unique_key: str | None
    topic: str = Field(description="Where the record went: SCHEDULE_TOPIC_XXXX for a delayed message.")
    queue_id: int
    queue_offset: int
    phys_offset: int
    store_timestamp: int


class ProduceResponse(BaseModel):
    ok: Literal[True] = True
    results: list[PutResultOut] = Field(description="One result per message, in request order "
                                        "(a list even when one object was sent).")


# -- topics ------------------------------------------------------------------------------------
class BrokerNamed(BaseModel):
    """A queue of a live cluster names its broker; on the embedded store the field is left out."""

    broker: str | None = Field(None, description="The broker holding the queue; only on a live cluster.")

    @model_serializer(mode="wrap")
    def _without_empty_broker(self, serialize):
        data = serialize(self)
        if data.get("broker") is None:
            data.pop("broker", None)
        return data


class QueueOffsetsOut(BrokerNamed):
    queue_id: int
    min_offset: int
    max_offset: int


class TopicOut(BaseModel):
    name: str
    queues: int
    perm: int
    readable: bool
    writable: bool
    kind: Literal["original", "scheduled", "retry", "dead_letter", "trace"]
    system: bool
    queue_offsets: list[QueueOffsetsOut]


class TopicsResponse(BaseModel):
    ok: Literal[True] = True
    topics: list[TopicOut]
    complete: bool = Field(True, description="False: part of the answer is missing (see problems).")
    problems: list[str] = Field(default_factory=list, description="Brokers that did not answer in time, and why.")


class TopicUpdate(Strict):
    """Unset fields keep their current value (a new topic: 4 queues, read-write)."""

    queues: StrictInt | None = Field(None, description=f"Queue count, 1 to {MAX_QUEUES}.",
                                     json_schema_extra={"minimum": 1, "maximum": MAX_QUEUES})
    perm: StrictInt | None = Field(None, description="Permission bits: 4 read, 2 write (6 = read-write).",
                                   json_schema_extra={"minimum": 0, "maximum": 15})
    reason: Reason = None


class TopicResponse(BaseModel):
    ok: Literal[True] = True
    created: bool
    topic: TopicOut


# -- groups ------------------------------------------------------------------------------------
class GroupOut(BaseModel):
    name: str
    max_reconsume_times: int
    consume_mode: Literal["concurrent", "orderly"]
    message_model: Literal["clustering", "broadcast"]
    retry_queues: int
    consume_enable: bool
    configured: bool = Field(description="False: nobody set this group up; these are the defaults.")
    message_model_recorded: bool = Field(True, description="False: the settings come from a RocketMQ broker's "
                                         "subscriptionGroup.json, which does not keep the message model (the "
                                         "clients do); message_model is then RocketMQ's default, not a fact.")
    version: str = Field(description="Names these settings: send it back (expected_version or If-Match) to change "
                         "them only if nobody else has meanwhile.")


class GroupsResponse(BaseModel):
    ok: Literal[True] = True
    groups: list[GroupOut]


class ClientOut(BaseModel):
    """A RocketMQ 5 client connected through the gRPC front."""

    client_id: str = Field(description="The id the client sends with every call (x-mq-client-id).")
    state: Literal["online", "gone"] = Field(description="gone: it shut down, or has not called for a while.")
    kind: str | None = Field(description="producer, push_consumer or simple_consumer; null until it tells.")
    group: str | None = Field(description="A consumer's group.")
    topics: list[str] = Field(description="A producer's topics.")
    subscriptions: dict[str, str] = Field(description="A consumer's topics and their filter expressions.")
    language: str | None
    version: str | None = Field(description="The client library's version.")
    address: str | None = Field(description="Where its calls come from (host:port).")
    first_seen_ms: int
    last_seen_ms: int = Field(description="Its last call of any kind.")
    last_heartbeat_ms: int | None
    settings_at_ms: int | None = Field(description="When it last sent its settings.")
    in_flight_receives: int
    gone_at_ms: int | None
    gone_why: Literal["terminated", "silent"] | None


class ClientCountsOut(BaseModel):
    online: int
    producers: int = Field(description="Online producers.")
    consumers: int = Field(description="Online push and simple consumers.")
    others: int = Field(description="Online clients that have not told what they are yet.")
    gone: int


class ClientsResponse(BaseModel):
    ok: Literal[True] = True
    clients: list[ClientOut]
    counts: ClientCountsOut = Field(description="Of every client known, whatever the filter.")
    grpc_endpoint: str | None = Field(description="Where RocketMQ 5 clients connect; null when the gRPC front is off.")


class GroupResponse(BaseModel):
    ok: Literal[True] = True
    group: GroupOut


class QueueProgressOut(BrokerNamed):
    topic: str
    queue_id: int
    committed: int = Field(description="The group's committed consume offset on this queue.")
    min_offset: int
    max_offset: int
    lag: int = Field(description="Messages still to consume: max_offset - max(committed, min_offset).")
    expired: bool = Field(description="The committed offset points at messages retention already deleted.")


class GroupStateResponse(GroupResponse):
    queues: list[QueueProgressOut] = Field(description="Every queue the group committed an offset on, "
                                           "its own topics first, then its retry topic.")
    lag: int = Field(description="The lag of all its queues together.")
    complete: bool = Field(True, description="False: part of the answer is missing (see problems).")
    problems: list[str] = Field(default_factory=list, description="Brokers that did not answer in time, and why.")


class GroupUpdate(Strict):
    """Unset fields keep their current value. Bad values are refused with 400."""

    max_reconsume_times: StrictInt | None = Field(None, description="0 to 10000; past it a message goes to the DLQ.",
                                                  json_schema_extra={"minimum": 0, "maximum": 10_000})
    consume_mode: str | None = Field(None, json_schema_extra={"enum": ["concurrent", "orderly"]})
    message_model: str | None = Field(None, json_schema_extra={"enum": ["clustering", "broadcast"]})
    retry_queues: StrictInt | None = Field(None, description=f"Queues of the group's retry topic, 1 to {MAX_QUEUES}.",
                                           json_schema_extra={"minimum": 1, "maximum": MAX_QUEUES})
    consume_enable: Annotated[bool, Field(strict=True)] | None = None
    reason: Reason = None
    expected_version: str | None = Field(None, max_length=32, description="The settings version this edit was "
                                         "made from; changed since: 409.")


# -- messages as stored ------------------------------------------------------------------------
class MessageOut(BaseModel):
    """A stored message (app.presenters.message_dict)."""

    topic: str
    queue_id: int
    queue_offset: int
    phys_offset: int
    size: int
    offset_msg_id: str
    unique_key: str | None
    keys: list[str]
    tags: str | None
    properties: dict[str, str]
    born_timestamp: int
    store_timestamp: int
    born_host: str
    store_host: str
    reconsume_times: int
    sys_flag: int
    flag: int
    body_crc: int
    compressed: bool
    copy_kind: Literal["original", "scheduled", "retry", "dead_letter", "trace", "resent", "transaction_half",
                       "transaction_op"] = Field(
        alias="copy", description="Which copy of the message this record is (resent: a dead letter's copy put "
        "back by an operator; transaction_half: a transaction's half message, held until its end or discarded "
        "after too many checks; transaction_op: the broker's record that a half message was settled).")
    body_masked: bool = Field(False, description="True: the caller's role sees bodies masked (viewer); "
                              "POST /api/messages/{offset_msg_id}/reveal shows it, audited.")
    body_base64: str | None = Field(description="The body as base64; null when masked.")
    body_text: str | None = Field(None, description="The body as text; null when it is not UTF-8 or masked.")


# -- receiving (pop) ---------------------------------------------------------------------------
class ReceiveRequest(Strict):
    topic: TopicField
    max: StrictInt = Field(16, ge=1, le=MAX_MESSAGES, description=f"Messages at most, 1 to {MAX_MESSAGES}.")
    invisible_ms: StrictInt = Field(30_000, ge=MIN_INVISIBLE_MS, le=MAX_INVISIBLE_MS,
                                    description="How long the messages stay invisible to the group "
                                                f"({MIN_INVISIBLE_MS} to {MAX_INVISIBLE_MS} ms).")
    wait_ms: StrictInt = Field(0, ge=0, le=MAX_WAIT_MS, description="Long poll: wait up to this long for "
                               f"messages when there are none (0 to {MAX_WAIT_MS} ms).")
    tags: str | None = Field(None, description="Tag subscription: '*' (default) or 'TagA || TagB'.")


class ReceivedMessageOut(MessageOut):
    receipt_handle: str = Field(description="Give it to ack, nack or change-invisible.")
    delivery_attempt: int = Field(description="1 for the first delivery to the group.")
    invisible_until_ms: int = Field(description="Epoch ms; after it the handle expires and the message "
                                                "is delivered again.")


class ReceiveResponse(BaseModel):
    ok: Literal[True] = True
    messages: list[ReceivedMessageOut]


class AckRequest(Strict):
    """Exactly one of `receipt_handle` (one message) and `receipt_handles` (a batch)."""

    model_config = ConfigDict(json_schema_extra=exactly_one_of("receipt_handle", "receipt_handles",
                                                               types=("string", "array")))

    receipt_handle: str | None = None
    receipt_handles: list[str] | None = Field(None, min_length=1, max_length=MAX_MESSAGES)

    @model_validator(mode="after")
    def _one_form(self) -> AckRequest:
        if (self.receipt_handle is None) == (self.receipt_handles is None):
            raise ValueError("give exactly one of 'receipt_handle' and 'receipt_handles'")
        return self


class AckResultOut(BaseModel):
    receipt_handle: str
    ok: bool
    error: str | None = Field(None, description="Why the handle was refused (only when ok is false).")


class AckResponse(BaseModel):
    ok: Literal[True] = True
    results: list[AckResultOut] | None = Field(None, description="Batch form only: one result per handle, "
                                               "in request order.")


class NackRequest(Strict):
    receipt_handle: str
    reason: str | None = Field(None, description="Why the consumer failed (kept in the trace, at most "
                                                  "1024 characters).")


class ChangeInvisibleRequest(Strict):
    receipt_handle: str
    invisible_ms: StrictInt = Field(ge=MIN_INVISIBLE_MS, le=MAX_INVISIBLE_MS,
                                    description="Invisible for this long from now, same delivery attempt.")


class OkResponse(BaseModel):
    ok: Literal[True] = True


class ChangeInvisibleResponse(BaseModel):
    ok: Literal[True] = True
    receipt_handle: str = Field(description="The new handle; the old one is refused from now on.")


# -- pulling by queue offset -------------------------------------------------------------------
class QueueMessagesResponse(BaseModel):
    ok: Literal[True] = True
    topic: str
    queue_id: int
    offset: int = Field(description="Where the read started (clamped into the queue).")
    next_offset: int = Field(description="Where the next read of this queue starts.")
    min_offset: int
    max_offset: int
    messages: list[MessageOut]


class OffsetUpdate(Strict):
    topic: TopicField
    queue_id: StrictInt = Field(ge=0)
    offset: StrictInt = Field(ge=0, description="The next offset the group consumes (0 to the queue's max offset).")
    reason: Reason = None


class OffsetResponse(BaseModel):
    ok: Literal[True] = True
    group: str
    topic: str
    queue_id: int
    offset: int
    previous: int | None = Field(description="The offset committed before; null if none was.")


# -- timelines and dead letters ----------------------------------------------------------------
class TraceEventOut(BaseModel):
    """One lifecycle event; unset fields are left out."""

    kind: Literal["stored", "scheduled", "released", "delivered", "acked", "failed", "invisible_timeout", "retry",
                  "dead_letter", "resent", "duplicate", "committed", "rolled_back", "checked", "discarded",
                  "invisible_changed"]
    unique_key: str
    at_ms: int
    topic: str | None = None
    queue_id: int | None = None
    queue_offset: int | None = None
    offset_msg_id: str | None = None
    group: str | None = None
    attempt: int | None = None
    reconsume_times: int | None = None
    due_ms: int | None = None
    reason: str | None = None
    real_topic: str | None = None
    client: str | None = Field(None, description="The RocketMQ 5 client (its client id) that sent, received, "
                               "acknowledged, failed or postponed it; unset for REST callers.")
    derived: bool = Field(description="True: no event was recorded; this one is made from the stored record.")


class HopOut(BaseModel):
    """One hop of a message's life; unset fields are left out."""

    kind: Literal["produced", "scheduled", "released", "delivered", "consumed", "failed", "retry_scheduled",
                  "redelivered", "dead_lettered", "resent", "duplicate", "sent", "transaction", "invisible_changed"]
    label: str = Field(description="The kind in words, e.g. 'retry scheduled'.")
    time_ms: int
    detail: str = Field(description="What happened, in words.")
    derived: bool = Field(description="True: reconstructed from a copy's properties, not recorded when it happened.")
    group: str | None = None
    attempt: int | None = Field(None, description="1-based delivery attempt.")
    topic: str | None = Field(None, description="Where the copy involved is.")
    queue_id: int | None = None
    queue_offset: int | None = None
    offset_msg_id: str | None = None
    reconsume_times: int | None = None
    delay_level: int | None = None
    due_ms: int | None = Field(None, description="When the scheduled copy or the next attempt is due.")
    reason: str | None = None
    client: str | None = Field(None, description="The RocketMQ 5 client (its client id) the hop names.")


class VerdictOut(BaseModel):
    group: str
    state: Literal["consumed", "retry_pending", "dead_lettered", "pending", "unknown"]
    detail: str
    next_attempt_ms: int | None = Field(None, description="retry_pending: when the next attempt is due.")
    attempts: int | None = Field(None, description="Delivery attempts known so far.")


class TransactionOut(BaseModel):
    state: Literal["committed", "rolled_back", "discarded", "waiting"] = Field(
        description="waiting: neither committed nor rolled back yet (the broker asks the producer again); "
                    "discarded: checked too often without an answer, never delivered.")
    detail: str
    half_offset_msg_id: str = Field(description="The newest half message in RMQ_SYS_TRANS_HALF_TOPIC.")


class TimelineResponse(BaseModel):
    ok: Literal[True] = True
    id: str
    events: list[TraceEventOut]
    traced: bool = Field(description="True: hops from recorded trace events (mqlens's own, or the RocketMQ clients' "
                         "message trace in RMQ_SYS_TRACE_TOPIC); false: reconstructed from the copies.")
    hops: list[HopOut] = Field(description="Every hop in time order.")
    verdicts: list[VerdictOut] = Field(description="Where the message stands for each consumer group.")
    transaction: TransactionOut | None = Field(None, description="A message sent in a transaction: where it stands.")
    complete: bool = Field(True, description="False: a broker did not answer in time (see problems); what it "
                           "holds is missing.")
    problems: list[str] = Field(default_factory=list, description="On a live cluster: what did not answer, and why.")


class TopicDestination(Strict):
    topic: TopicField = Field(description="Resend to this topic: every group subscribed to it gets it.")


Destination = Literal["group", "topic"] | TopicDestination
DESTINATION_HELP = ('"group" (default): back to the failed group only, through its retry topic (%RETRY%group, or '
                    '%RETRY%group_topic for a group that receives by pop); "topic": back to the original topic, '
                    'every subscribed group gets it again; {"topic": "T"}: to topic T.')


class SingleResendRequest(Strict):
    destination: Destination = Field("group", description=DESTINATION_HELP)
    reason: Reason = None
    force: bool = Field(False, description="Resend a dead letter that was resent already (needs a reason).")


class ResendResponse(BaseModel):
    ok: Literal[True] = True
    action_id: int = Field(description="The audit entry of the resend: GET /api/audit?target=...")
    dead_letter: str = Field(description="Offset message id of the dead letter that was resent.")
    destination: str = Field(description="The topic the copy went to.")
    result: PutResultOut = Field(description="The new copy.")
    replayed: bool = Field(description="True: an earlier request with the same Idempotency-Key did the resend.")


class ResendEdit(Strict):
    """An operator's changes before a resend (one dead letter; the operator role)."""

    model_config = ConfigDict(json_schema_extra=not_both("body", "body_base64", types=("string", "string")))

    body: str | None = Field(None, max_length=4 * 1024 * 1024, description="A new body as text (UTF-8).")
    body_base64: Base64 | None = Field(None, max_length=6 * 1024 * 1024, description="A new body as base64.")
    properties: dict[EditPropertyName, EditPropertyValue | None] = Field(
        default_factory=dict, max_length=64, json_schema_extra=names_declared,
        description="User properties to set; null removes one. Not those the broker sets or reads (KEYS, "
        "DELAY, DLQ_..., MQLENS_...).")

    @model_validator(mode="after")
    def _one_body(self) -> ResendEdit:
        if self.body is not None and self.body_base64 is not None:
            raise ValueError("give at most one of 'body' and 'body_base64'")
        return self


class DlqResendRequest(Strict):
    message_ids: list[DeadLetterRef] = Field(
        min_length=1, max_length=1000, description="Dead letters by offset message id or unique key.")
    destination: Destination = Field("group", description=DESTINATION_HELP)
    dry_run: bool = Field(False, description="Only say what would be resent where; nothing is sent or recorded.")
    reason: Reason = None
    force: bool = Field(False, description="Also resend dead letters that were resent already (needs a reason).")
    edit: ResendEdit | None = Field(None, description="Change the body or properties first (one dead letter, "
                                    "operator role); the changes are in the answer and the audit log.")


class ResendResultOut(BaseModel):
    message_id: str = Field(description="As asked for: an offset message id or a unique key.")
    dead_letter_id: str | None
    status: Literal["would_resend", "ok", "failed", "not_found", "pending"]
    new_offset_msg_id: str | None
    destination: str | None
    error: str | None


class DlqResendResponse(BaseModel):
    ok: bool = Field(description="Every id was resent (or, for a dry run, would be); false when some were not "
                     "(see each result).")
    action_id: int | None = Field(description="The audit entry of the resend; null for a dry run or when none "
                                  "of the ids named a dead letter.")
    dry_run: bool
    replayed: bool
    results: list[ResendResultOut]
    edit: dict | None = Field(None, description="What the edit changes: properties before and after, a body diff.")


# -- configuration -----------------------------------------------------------------------------
class DelayLevelsOut(BaseModel):
    ok: Literal[True] = True
    levels: str = Field(description="Space-separated delays, level 1 first, e.g. '1s 5s 10s 30s 1m'.")
    version: int = Field(description="0: the store's table, never changed here.")
    source: str | None = Field(None, description="For version 0, where the table came from: the store's own "
                               "file, given at start, inferred from the store's scheduled messages (a store "
                               "another broker wrote), or RocketMQ's default.")
    brokers: list[BrokerDelayLevelOut] | None = Field(None, description="On a live cluster: each broker's table.")
    differ: bool | None = Field(None, description="On a live cluster: the brokers do not all have the same table "
                                "(`levels` is the first broker's).")
    complete: bool | None = Field(None, description="On a live cluster: false when some brokers did not answer.")
    problems: list[str] | None = None
    applies_after_restart: bool | None = Field(None, description="On a live cluster, true: RocketMQ 4.x reads the "
                                               "table when a broker starts, so a change applies after its restart.")


class BrokerDelayLevelOut(BaseModel):
    broker: str = Field(description="The broker's name; a slave's carries its id.")
    address: str | None
    levels: str | None = Field(description="Its messageDelayLevel; null when it did not answer.")
    error: str | None = None


class DelayLevelsUpdate(Strict):
    levels: str = Field(max_length=4000, json_schema_extra={"pattern": DELAY_LEVELS_PATTERN},
                        description="Space-separated positive numbers with a unit s, m, h or d, each at most 40 "
                        "days; at most 1024 levels.")
    reason: Reason = None
    expected_version: StrictInt | None = Field(None, ge=0, description="The version this edit was made from "
                                               "(or send If-Match); a table changed since is refused with 409.")
    allow_dropped_levels: bool = Field(False, description="Accept a table without levels the store has used.")


class DelayLevelsRollback(Strict):
    # Bounded like the ids of paths (a number past SQLite's INTEGER cannot even be looked up).
    version: StrictInt = Field(ge=0, le=2**31, description="The version whose table becomes current again "
                               "(0: the store's table before any change).")
    reason: Reason = None
    expected_version: StrictInt | None = Field(None, ge=0)
    allow_dropped_levels: bool = False


class DelayLevelVersionOut(BaseModel):
    version: int = Field(description="0: the store's table before the first change (no time, no actor).")
    levels: str
    created_at_ms: int | None
    actor: str
    reason: str | None
    changes: list[str]


class DelayLevelVersionsResponse(BaseModel):
    ok: Literal[True] = True
    current: int
    versions: list[DelayLevelVersionOut]


class HealthResponse(BaseModel):
    ok: Literal[True] = True
    store: Literal["open"] = "open"


class ErrorResponse(BaseModel):
    """The body of every error response."""

    ok: Literal[False] = False
    error: str
    status: int


# -- finding messages --------------------------------------------------------------------------
class MessageResponse(BaseModel):
    ok: Literal[True] = True
    message: MessageOut


class FoundResponse(BaseModel):
    ok: Literal[True] = True
    messages: list[MessageOut] = Field(description="Newest first.")
    truncated: bool = Field(description="More messages matched than were returned (raise max or narrow the "
                                        "time window): the list is incomplete.")
    searched_topics: list[str] = Field(description="The topics looked in (all of them when none was given).")
    recognised_as: str | None = Field(None, description="What the search box took the query for.")
    next_cursor: str | None = Field(None, description="GET /api/search only: the cursor of the next page.")
    complete: bool = Field(True, description="False: a broker or topic did not answer in time (see problems); "
                                             "on the embedded store always true.")
    problems: list[str] = Field(default_factory=list, description="Brokers that did not answer in time, and why.")


# -- accounts ----------------------------------------------------------------------------------
RoleName = Literal["viewer", "support", "operator", "admin", "client"]


class RevealRequest(Strict):
    reason: Reason = None


class JobControlRequest(Strict):
    reason: Reason = None


class MeResponse(BaseModel):
    ok: Literal[True] = True
    name: str
    role: RoleName | None = Field(description="null: anonymous without the viewer role.")
    kind: Literal["user", "token", "anonymous", "system"]
    permissions: list[str]
    topics: list[str] | None = Field(None, description="A client token's topics (null: any).")
    groups: list[str] | None = Field(None, description="A client token's consumer groups (null: any).")


class UserOut(BaseModel):
    name: str
    role: RoleName
    created_at_ms: int
    disabled: bool


class UsersResponse(BaseModel):
    ok: Literal[True] = True
    users: list[UserOut]


class UserResponse(BaseModel):
    ok: Literal[True] = True
    user: UserOut


class UserCreate(Strict):
    name: str = Field(max_length=64, json_schema_extra={"pattern": ACCOUNT_NAME_PATTERN},
                      description="1 to 64 letters, digits or . _ @ -, starting with a letter or digit.")
    password: str = Field(max_length=256, json_schema_extra={"minLength": MIN_PASSWORD_CHARS},
                          description="10 to 256 characters.")
    role: RoleName


class UserUpdate(Strict):
    """Unset fields keep their value; a new password or disabling ends the user's sessions."""

    role: RoleName | None = None
    password: str | None = Field(None, max_length=256, json_schema_extra={"minLength": MIN_PASSWORD_CHARS},
                                 description="10 to 256 characters.")
    disabled: Annotated[bool, Field(strict=True)] | None = None


class TokenOut(BaseModel):
    id: int
    name: str
    role: RoleName
    created_at_ms: int
    created_by: str
    expires_at_ms: int | None
    revoked_at_ms: int | None
    topics: list[str] | None = Field(None, description="A client token's topics (null: any).")
    groups: list[str] | None = Field(None, description="A client token's consumer groups (null: any).")


class TokensResponse(BaseModel):
    ok: Literal[True] = True
    tokens: list[TokenOut]


class TokenCreate(Strict):
    name: str = Field(max_length=64, json_schema_extra={"pattern": ACCOUNT_NAME_PATTERN},
                      description="Recorded as the actor of what the token does: 1 to 64 letters, digits or . _ "
                      "@ -, starting with a letter or digit.")
    role: RoleName
    expires_at_ms: StrictInt | None = Field(None, ge=0, le=MAX_SQL_INTEGER, description="Epoch ms; none: never "
                                            "expires.")
    topics: list[TopicField] | None = Field(None, max_length=100, description="A client token only: the topics it "
                                            "may produce to and receive (and their retries); default: any.")
    groups: list[GroupField] | None = Field(None, max_length=100, description="A client token only: the consumer "
                                            "groups it may receive, ack and nack as; default: any.")


class TokenCreated(BaseModel):
    ok: Literal[True] = True
    token: TokenOut
    value: str = Field(description="The token itself: shown this once, never again.")


class TokenResponse(BaseModel):
    ok: Literal[True] = True
    token: TokenOut


# -- client credentials (gRPC) ----------------------------------------------------------------
ClientRoleName = Literal["producer", "consumer", "both"]


class ClientCredentialOut(BaseModel):
    access_key: str = Field(description="What the client gives as Credentials(access_key, ...).")
    role: ClientRoleName
    topics: list[str] | None = Field(description="The topics it may produce to or consume (null: any).")
    groups: list[str] | None = Field(description="The consumer groups it may consume as (null: any).")
    description: str | None
    created_at_ms: int
    created_by: str
    revoked_at_ms: int | None
    last_used_at_ms: int | None = Field(description="When a call last passed with it, to the minute.")


class ClientCredentialsResponse(BaseModel):
    ok: Literal[True] = True
    credentials: list[ClientCredentialOut]


class ClientCredentialCreate(Strict):
    role: ClientRoleName = Field(description="producer: sends messages; consumer: receives them; both.")
    topics: list[TopicField] | None = Field(None, max_length=100, description="The topics it may produce to and "
                                            "consume; default: any.")
    groups: list[GroupField] | None = Field(None, max_length=100, description="The consumer groups it may consume "
                                            "as (consumer and both only); default: any.")
    description: str | None = Field(None, max_length=200, description="Whose it is, for the admins (one line).")


class ClientCredentialCreated(BaseModel):
    ok: Literal[True] = True
    credential: ClientCredentialOut
    secret: str = Field(description="The secret the client signs its calls with: shown this once, never again.")


class ClientCredentialResponse(BaseModel):
    ok: Literal[True] = True
    credential: ClientCredentialOut


# -- dead-letter inbox -------------------------------------------------------------------------
class ResendFacts(BaseModel):
    at_ms: int
    actor: str
    action_id: int
    destination: str
    new_offset_msg_id: str | None
    copy_state: Literal["consumed", "pending", "failed_again", "unknown"]


class DeadLetterOut(BaseModel):
    offset_msg_id: str
    unique_key: str | None
    group: str
    topic: str
    original_topic: str | None
    keys: list[str]
    tags: str | None
    reason: str = Field(description="Why the last delivery failed (from the trace; empty when unknown).")
    reconsume_times: int
    store_timestamp: int
    age_ms: int
    expires_at: int | None = Field(description="When retention deletes it (epoch ms).")
    state: Literal["waiting", "resent", "failed_again"]
    resent_after: str | None = Field(description="This dead letter is a resent copy of that dead letter, failed again.")
    resend: ResendFacts | None = Field(description="The last resend of this dead letter.")
    dead_again: str | None = Field(description="failed_again: the newer dead letter of the resent copy.")


class DeadLettersResponse(BaseModel):
    ok: Literal[True] = True
    group: str | None
    messages: list[DeadLetterOut]
    next_cursor: str | None
    total: int = Field(description="Dead letters matching the filter.")
    counts: dict[str, int] = Field(description="Per state, among those matching the other filters.")
    oldest_waiting_ms: int | None
    truncated: bool = Field(description="True: the store holds more dead letters than one request looks at "
                            "(on a live cluster: total counts every dead letter held, not only those the filter "
                            "matches).")
    complete: bool = Field(True, description="False: some broker of a live cluster did not answer (problems).")
    problems: list[str] = Field(default_factory=list, description="Brokers that did not answer, and why.")


# -- redrive jobs ------------------------------------------------------------------------------
class RedriveFilter(Strict):
    begin: StrictInt | None = Field(None, ge=0, description="Stored at or after (epoch ms).")
    end: StrictInt | None = Field(None, ge=0, description="Stored at or before (epoch ms).")
    key: str | None = Field(None, max_length=255)
    tag: str | None = Field(None, max_length=255)
    reason: str | None = Field(None, max_length=255, description="Text the failure reason contains.")
    state: Literal["waiting", "resent", "failed_again"] | None = Field(
        "waiting", description="Default: waiting (dead letters not resent yet).")


class RedriveJobCreate(Strict):
    group: GroupField
    filter: RedriveFilter = Field(default_factory=RedriveFilter)
    destination: Destination = Field("group", description=DESTINATION_HELP)
    rate_per_s: StrictInt = Field(100, ge=1, le=10_000, description="Messages resent per second at most.")
    dry_run: bool = Field(False, description="Only list what a run would send, and where (the job is planned; "
                          "resume starts it).")
    reason: Reason = None
    max_dead_share: float = Field(0.5, gt=0, le=1, description="The job pauses itself when more than this share "
                                  "of what it resent has come back dead.")


class RedriveJobOut(BaseModel):
    id: int
    action_id: int
    group: str
    filter: dict
    destination: object
    rate_per_s: int
    max_dead_share: float
    state: Literal["planned", "running", "paused", "cancelled", "done"]
    state_reason: str | None
    reason: str | None
    created_by: str
    created_at_ms: int
    started_at_ms: int | None
    finished_at_ms: int | None
    total: int
    counts: dict[str, int] = Field(description="Items per status: queued, pending, ok, failed, skipped.")
    dead_again: int = Field(description="Resent copies counted back in the dead-letter topic.")
    progress: float = Field(description="Share of the items done (ok, failed or skipped), 0 to 1.")
    report_url: str


class RedriveJobResponse(BaseModel):
    ok: Literal[True] = True
    job: RedriveJobOut


class RedriveJobsResponse(BaseModel):
    ok: Literal[True] = True
    jobs: list[RedriveJobOut]


class RedriveItemOut(BaseModel):
    dead_letter_id: str
    status: Literal["queued", "pending", "ok", "failed", "skipped"]
    destination: str
    new_offset_msg_id: str | None
    error: str | None


class RedriveItemsResponse(BaseModel):
    ok: Literal[True] = True
    items: list[RedriveItemOut]
    next_cursor: str | None = None  # the cursor of the next page; null on the last


class OffsetResetRequest(Strict):
    topic: TopicField
    to: Literal["earliest", "latest"] | Annotated[dict[Literal["time", "offset"], StrictInt], Field(
        json_schema_extra={"minProperties": 1, "maxProperties": 1})] = Field(
        description='"earliest", "latest", {"time": epoch ms} or {"offset": n}.')
    queue_id: StrictInt | None = Field(None, ge=0, description="One queue; default: every queue of the topic.")
    dry_run: bool = Field(False, description="Only show the offsets and lag before and after.")
    reason: Reason = None


class QueueResetOut(BaseModel):
    broker: str | None = Field(None, description="On a live cluster: the broker that holds the queue.")
    queue_id: int
    min_offset: int
    max_offset: int
    before: int | None
    after: int
    lag_before: int
    lag_after: int


class OffsetResetResponse(BaseModel):
    ok: Literal[True] = True
    applied: bool
    queues: list[QueueResetOut]
    complete: bool = Field(True, description="False: some brokers did not answer; `problems` names them.")
    problems: list[str] = []
    consumers_online: bool | None = Field(None, description="On a live cluster: consumers of the group on the "
                                          "topic are online, so the brokers reset through them.")
    through: Literal["consumers", "offsets"] | None = Field(
        None, description="On a live cluster, once applied: the brokers told the consumers online (every queue "
        "to a time) or wrote the committed offsets.")


# -- pipeline runs -----------------------------------------------------------------------------
class PipelineRunCreate(Strict):
    job: str = Field(max_length=64, json_schema_extra={"enum": list(JOBS)}, description="The job: "
                     + ", ".join(JOBS) + ".")
    master: str | None = Field(None, max_length=255, description="Spark master: local[1], local[2], local[*] or "
                               "the configured one (MQLENS_PIPELINE_MASTER, the default).")
    reason: Reason = None


class PipelineRunOut(BaseModel):
    id: int
    action_id: int = Field(description="The audit entry of the start.")
    job: str
    store: str = Field(description="The store directory the job reads (the console's own).")
    master: str
    state: Literal["queued", "running", "succeeded", "failed", "cancelled"]
    reason: str | None
    requested_by: str
    requested_at_ms: int
    started_at_ms: int | None
    finished_at_ms: int | None
    duration_ms: int | None
    output_path: str
    stage: str | None = Field(description="What the job is doing, in words.")
    tasks_done: int = Field(description="Spark tasks done so far (more stages may add tasks).")
    tasks_total: int
    records: int = Field(description="Commit log records read so far.")
    skipped_ranges: int = Field(description="Corrupt ranges of the commit log skipped.")
    counts: dict[str, int] = Field(description="What the job made, on success.")
    summary: str | None = Field(description="The job's one-line summary, on success.")
    error: str | None = Field(description="Why it failed, in words (Spark's error, or its process's end).")
    pid: int | None
    exit_code: int | None
    cancelled_by: str | None
    results_url: str


class PipelineRunResponse(BaseModel):
    ok: Literal[True] = True
    run: PipelineRunOut


class PipelineRunsResponse(BaseModel):
    ok: Literal[True] = True
    runs: list[PipelineRunOut]


class PipelineTableOut(BaseModel):
    name: str
    columns: list[str]
    rows: list[dict] = Field(description="The first rows, in the order the console shows them.")
    total_rows: int


class PipelineResultsResponse(BaseModel):
    ok: Literal[True] = True
    run: PipelineRunOut
    tables: dict[str, PipelineTableOut] = Field(description="dlq-report: summary, daily, retries, ttd_histogram, "
                                                "top_keys, top_tags, top_reasons; trace, timelines, key-index: the "
                                                "first rows of each table; projections: none.")
    problem: str | None = Field(description="Why the output cannot be read (moved, deleted, damaged), in words.")


# -- clusters ------------------------------------------------------------------------------------
class BrokerOut(BaseModel):
    cluster: str
    name: str
    broker_id: int = Field(description="0: the master; others: slaves.")
    role: Literal["master", "slave"]
    address: str | None = Field(description="host:port; null for the embedded store.")
    answered: bool
    version: str | None
    put_tps: float | None = Field(description="Messages put per second over the last 10 s.")
    get_tps: float | None = Field(description="Messages consumers got per second over the last 10 s.")
    commitlog_max_offset: int | None
    earliest_message_ms: int | None
    error: str | None = Field(description="Why it did not answer.")


class ClusterOut(BaseModel):
    name: str
    brokers: list[BrokerOut]


class BrokerSettingsResponse(BaseModel):
    ok: Literal[True] = True
    name: str
    broker_id: int = Field(description="0: the master.")
    address: str | None = Field(description="host:port; null for the embedded store.")
    settings: dict[str, str] = Field(description="Every setting by key, as the broker answers them (RocketMQ's "
                                     "broker config; the embedded store's own configuration).")
    complete: bool = Field(description="False: the broker did not answer (see problems).")
    problems: list[str]


class ClustersResponse(BaseModel):
    ok: Literal[True] = True
    backend: Literal["embedded", "cluster"]
    name_servers: list[str]
    complete: bool = Field(description="False: a name server or broker did not answer (see problems).")
    problems: list[str]
    clusters: list[ClusterOut]


# -- content search ----------------------------------------------------------------------------
class ContentSearchCreate(Strict):
    text: str = Field(min_length=1, max_length=content_search.MAX_TEXT,
                      description="The text to find (exact bytes of its UTF-8, case counts), or a regular "
                                  "expression (Python's syntax) when `regex`.")
    regex: bool = Field(False, description="`text` is a regular expression.")
    in_body: bool = Field(True, description="Look in message bodies (a compressed body is decompressed first).")
    in_properties: bool = Field(True, description="Look in property values (tags, keys and user properties).")
    topics: list[Annotated[str, Field(min_length=1, max_length=255)]] = Field(
        default_factory=list, max_length=content_search.MAX_SEARCH_TOPICS,
        description="Only these topics (none: every topic, system topics too).")
    begin: int | None = Field(None, ge=0, description="Stored at or after (epoch ms).")
    end: int | None = Field(None, ge=0, description="Stored at or before (epoch ms).")
    max_hits: int = Field(content_search.DEFAULT_HITS, ge=1, le=content_search.MAX_HITS,
                          description="The search stops after this many messages found.")
    max_seconds: int = Field(content_search.DEFAULT_SECONDS, ge=1, le=content_search.MAX_SECONDS,
                             description="The search stops (timed out) after this long, whatever it found by then.")


class ContentHitOut(BaseModel):
    offset_msg_id: str
    message_url: str = Field(description="The message's page in the console.")
    topic: str
    queue_id: int
    queue_offset: int
    phys_offset: int
    size: int
    store_timestamp: int
    born_timestamp: int
    keys: list[str]
    tags: str | None
    unique_key: str | None
    where: Literal["body", "property"] = Field(description="Where the text was found.")
    property_name: str | None = Field(description="The property whose value holds it.")
    snippet_masked: bool = Field(description="True: the caller's role sees bodies masked, so a body's snippet "
                                             "is null (reveal the body on the message page).")
    snippet: str | None = Field(description="The text around the match (60 characters each side).")
    snippet_at: int | None = Field(description="Where the match starts in the snippet (null when masked).")
    match_len: int


class ContentSearchOut(BaseModel):
    id: str
    url: str = Field(description="This search's page in the console.")
    state: Literal["running", "finished", "cancelled", "timed out", "failed"]
    text: str
    regex: bool
    in_body: bool
    in_properties: bool
    topics: list[str]
    begin_ms: int | None
    end_ms: int | None
    max_hits: int
    max_seconds: int
    started_at_ms: int
    finished_at_ms: int | None
    elapsed_ms: int
    scanned_bytes: int = Field(description="Bytes of commit log records walked so far.")
    window_bytes: int = Field(description="Bytes of the segments the time window needs, up to the log's end when "
                                          "the search started.")
    records: int = Field(description="Records walked so far.")
    reached_ms: int | None = Field(description="Store time of the next record to walk.")
    progress: float = Field(description="scanned_bytes / window_bytes; 1 once the search has finished.")
    mb_per_s: float = Field(description="Megabytes (10^6) of records walked per second.")
    hits: list[ContentHitOut] = Field(description="The messages found, in commit log order.")
    problems: list[str] = Field(description="What was skipped and why (a corrupt record, a deleted segment), or "
                                            "why the search stopped early.")
    error: str | None = Field(description="Why the search failed or timed out.")


class ContentSearchResponse(BaseModel):
    ok: Literal[True] = True
    search: ContentSearchOut
