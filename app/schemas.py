"""Request and response bodies of the REST API (pydantic), shown in the OpenAPI document."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

StrictInt = Annotated[int, Field(strict=True)]


class Strict(BaseModel):
    """A request body: unknown fields are errors, so a typo never goes unnoticed."""

    model_config = ConfigDict(extra="forbid")


# -- messages ----------------------------------------------------------------------------------
class ProduceMessage(Strict):
    """One message to put. Give exactly one of `body` (text, stored as UTF-8) and `body_base64`."""

    body: str | None = Field(None, description="Message body as text (stored as UTF-8).")
    body_base64: str | None = Field(None, description="Message body as standard base64 (binary bodies).")
    tags: str | None = Field(None, description="The message's tag (one string, used for filtering).")
    keys: list[str] = Field(default_factory=list, description="Business keys, each indexed for lookups.")
    properties: dict[str, str] = Field(default_factory=dict, description="User properties.")
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
    Annotated[ProduceMessage, Tag("one")] | Annotated[list[ProduceMessage], Tag("many")],
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
class QueueOffsetsOut(BaseModel):
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


class TopicUpdate(Strict):
    """Unset fields keep their current value (a new topic: 4 queues, read-write)."""

    queues: StrictInt | None = Field(None, description="Queue count, 1 to 1024.")
    perm: StrictInt | None = Field(None, description="Permission bits: 4 read, 2 write (6 = read-write).")


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


class GroupsResponse(BaseModel):
    ok: Literal[True] = True
    groups: list[GroupOut]


class GroupResponse(BaseModel):
    ok: Literal[True] = True
    group: GroupOut


class GroupUpdate(Strict):
    """Unset fields keep their current value. Bad values are refused with 400."""

    max_reconsume_times: StrictInt | None = Field(None, description="0 to 10000; past it a message goes to the DLQ.")
    consume_mode: str | None = Field(None, json_schema_extra={"enum": ["concurrent", "orderly"]})
    message_model: str | None = Field(None, json_schema_extra={"enum": ["clustering", "broadcast"]})
    retry_queues: StrictInt | None = Field(None, description="Queues of the group's retry topic, 1 to 1024.")
    consume_enable: Annotated[bool, Field(strict=True)] | None = None


# -- configuration -----------------------------------------------------------------------------
class DelayLevelsOut(BaseModel):
    ok: Literal[True] = True
    levels: str = Field(description="Space-separated delays, level 1 first, e.g. '1s 5s 10s 30s 1m'.")
    version: int = Field(description="0: the built-in table, never changed here.")


class DelayLevelsUpdate(Strict):
    levels: str = Field(description="Space-separated positive numbers with a unit s, m, h or d.")


class HealthResponse(BaseModel):
    ok: Literal[True] = True
    store: Literal["open"] = "open"


class ErrorResponse(BaseModel):
    """The body of every error response."""

    ok: Literal[False] = False
    error: str
    status: int
