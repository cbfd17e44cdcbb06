"""Producing messages: POST /api/topics/{topic}/messages."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from app.deps import PutBatcherDep
from app.params import TopicPath
from app.routes import error_responses, link, with_links
from app.schemas import ProduceBody, ProduceMessage, ProduceResponse, PutResultOut
from app.security import Messenger
from app.services import client_scope, messages
from app.services.messages import MessageInput

router = APIRouter(tags=["messages"])

_FIRST = "$response.body#/results/0"
# Where the first message put can be looked up (the OpenAPI links clients and the fuzzer follow).
PRODUCED_LINKS = {
    "MessageById": link("/api/messages/by-id/{offset_msg_id}", "get",
                        parameters={"offset_msg_id": f"{_FIRST}/offset_msg_id"}),
    "RevealMessage": link("/api/messages/{offset_msg_id}/reveal", "post",
                          parameters={"offset_msg_id": f"{_FIRST}/offset_msg_id"}),
    "MessageTimeline": link("/api/messages/{message_id}/timeline", "get",
                            parameters={"message_id": f"{_FIRST}/unique_key"}),
    "CopiesByUniqueKey": link("/api/messages/by-unique-key/{unique_key}", "get",
                              parameters={"unique_key": f"{_FIRST}/unique_key"}),
    "MessageAtQueueOffset": link("/api/topics/{topic}/queues/{queue_id}/messages/{queue_offset}", "get",
                                 parameters={"topic": f"{_FIRST}/topic", "queue_id": f"{_FIRST}/queue_id",
                                             "queue_offset": f"{_FIRST}/queue_offset"}),
}


@router.post("/api/topics/{topic}/messages", response_model=ProduceResponse,
             responses=with_links(error_responses(400, 403, 413, 422, 429, 507), 200, **PRODUCED_LINKS))
async def produce(topic: TopicPath, body: ProduceBody, request: Request, actor: Messenger,
                  put_batcher: PutBatcherDep) -> Response:
    """Put one message (a JSON object) or up to 1000 (a JSON list), all or none.

    The answer is always a list of results, in request order. A message with a delay level is
    stored in SCHEDULE_TOPIC_XXXX until it is due (its result names that topic). Sending to a
    system topic (retry, dead-letter, schedule, trace, rmq_sys_*) is refused with 403, and so is
    a topic outside a client token's scope. When too
    many puts are in progress the answer is 429 with a Retry-After header, and when the disk is full
    507 with one. The bodies of a batch take at most 4 MiB together (413 beyond; configurable)."""
    client_scope.check_topic(actor, topic)
    items = [body] if isinstance(body, ProduceMessage) else body
    inputs = [MessageInput(**item.model_dump()) for item in items]
    batch = messages.new_messages(topic, inputs, request.app.state.settings.max_batch_bytes)
    with request.app.state.put_gate.slot():
        results = await put_batcher.put(batch)
    answer = ProduceResponse(results=[PutResultOut.model_validate(r, from_attributes=True) for r in results])
    return Response(answer.model_dump_json(), media_type="application/json")  # already the response model
