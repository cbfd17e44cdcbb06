"""Pop-style consuming: POST /api/groups/{group}/receive, ack, nack and change-invisible."""

from __future__ import annotations

from functools import partial

import anyio.to_thread
from fastapi import APIRouter

from app.deps import ReceiveGateDep, ReceiveThreadsDep, StoreDep
from app.errors import encodable
from app.params import ConsumerGroupPath
from app.presenters import received_dict
from app.routes import error_responses, link, with_links
from app.schemas import (
    AckRequest,
    AckResponse,
    AckResultOut,
    ChangeInvisibleRequest,
    ChangeInvisibleResponse,
    NackRequest,
    OkResponse,
    ReceiveRequest,
    ReceiveResponse,
)
from app.security import MESSAGING, Messenger
from app.services import client_scope
from app.services import receive as service

router = APIRouter(tags=["consuming"], dependencies=[MESSAGING])

_HANDLE = "$response.body#/messages/0/receipt_handle"
_SAME_GROUP = {"group": "$request.path.group"}
# What the first message received can be answered with (the OpenAPI links clients and the fuzzer follow).
RECEIVED_LINKS = {
    "Ack": link("/api/groups/{group}/ack", "post", parameters=_SAME_GROUP, request_body={"receipt_handle": _HANDLE}),
    "Nack": link("/api/groups/{group}/nack", "post", parameters=_SAME_GROUP, request_body={"receipt_handle": _HANDLE}),
    "ChangeInvisible": link("/api/groups/{group}/change-invisible", "post", parameters=_SAME_GROUP,
                            request_body={"receipt_handle": _HANDLE, "invisible_ms": 30_000}),
}


@router.post("/api/groups/{group}/receive", response_model=ReceiveResponse,
             responses=with_links(error_responses(400, 422, 429), 200, **RECEIVED_LINKS))
async def receive(group: ConsumerGroupPath, body: ReceiveRequest, store: StoreDep, gate: ReceiveGateDep,
                  threads: ReceiveThreadsDep, actor: Messenger) -> dict:
    """Up to `max` messages of the topic not yet handed out to the group, taken fairly from its
    queues. Each stays invisible to the group for `invisible_ms`; ack it with its receipt handle
    before then, or it is delivered again (attempt + 1) after the retry backoff. With `wait_ms`
    the request waits that long for messages when there are none (long polling).

    Dead-letter topics, SCHEDULE_TOPIC_XXXX and topics without read permission are refused (400).
    When too many receives are in progress the answer is 429 with a Retry-After header. A client
    token receives the topics and groups of its scope and its group's retry topics only (403:
    never the trace topic or another group's retry topic)."""
    client_scope.check_receive(actor, store, group, body.topic)
    call = partial(service.receive, store, group, body.topic, body.max, body.invisible_ms,
                   body.wait_ms, body.tags)
    with gate.slot():
        received = await anyio.to_thread.run_sync(call, limiter=threads)
    return {"ok": True, "messages": [received_dict(r) for r in received]}


@router.post("/api/groups/{group}/ack", response_model=AckResponse, response_model_exclude_none=True,
             responses=error_responses(400, 422))
def ack(group: ConsumerGroupPath, body: AckRequest, store: StoreDep, actor: Messenger) -> AckResponse:
    """Acknowledge received messages: the message is done for the group.

    `{"receipt_handle": h}` acknowledges one; a handle that is malformed, unknown, stale (a newer
    one replaced it), expired or already used is refused with 400. `{"receipt_handles": [...]}`
    acknowledges each on its own and answers a result per handle, in order (200 even when some
    are refused)."""
    client_scope.check_group(actor, group)
    if body.receipt_handle is not None:
        service.ack(store, group, body.receipt_handle)
        return AckResponse()
    outcomes = service.ack_many(store, group, body.receipt_handles or [])
    return AckResponse(results=[AckResultOut(receipt_handle=encodable(o.receipt_handle), ok=o.error is None,
                                             error=None if o.error is None else encodable(o.error))
                                for o in outcomes])


@router.post("/api/groups/{group}/nack", response_model=OkResponse, responses=error_responses(400, 422))
def nack(group: ConsumerGroupPath, body: NackRequest, store: StoreDep, actor: Messenger) -> OkResponse:
    """Report that the consumer failed the message: it is delivered again after the retry
    backoff, or moved to %DLQ%group once the group's max_reconsume_times is used up."""
    client_scope.check_group(actor, group)
    service.nack(store, group, body.receipt_handle, body.reason)
    return OkResponse()


@router.post("/api/groups/{group}/change-invisible", response_model=ChangeInvisibleResponse,
             responses=error_responses(400, 422))
def change_invisible(group: ConsumerGroupPath, body: ChangeInvisibleRequest, store: StoreDep,
                     actor: Messenger) -> ChangeInvisibleResponse:
    """Keep the message invisible for `invisible_ms` from now (same delivery attempt). The answer
    holds a new receipt handle; the old one is refused from then on."""
    client_scope.check_group(actor, group)
    handle = service.change_invisible(store, group, body.receipt_handle, body.invisible_ms)
    return ChangeInvisibleResponse(receipt_handle=handle)
