"""Producing messages: POST /api/topics/{topic}/messages."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from app.routes import error_responses
from app.schemas import ProduceBody, ProduceMessage, ProduceResponse, PutResultOut
from app.security import MESSAGING
from app.services import messages
from app.services.messages import MessageInput

router = APIRouter(tags=["messages"])


@router.post("/api/topics/{topic}/messages", response_model=ProduceResponse, dependencies=[MESSAGING],
             responses=error_responses(400, 403, 422, 429))
async def produce(topic: str, body: ProduceBody, request: Request) -> Response:
    """Put one message (a JSON object) or up to 1000 (a JSON list), all or none.

    The answer is always a list of results, in request order. A message with a delay level is
    stored in SCHEDULE_TOPIC_XXXX until it is due (its result names that topic). Sending to a
    system topic (retry, dead-letter, schedule, trace, rmq_sys_*) is refused with 403. When too
    many puts are in progress the answer is 429 with a Retry-After header."""
    items = [body] if isinstance(body, ProduceMessage) else body
    inputs = [MessageInput(**item.model_dump()) for item in items]
    batch = messages.new_messages(topic, inputs)
    with request.app.state.put_gate.slot():
        results = await request.app.state.put_batcher.put(batch)
    answer = ProduceResponse(results=[PutResultOut.model_validate(r, from_attributes=True) for r in results])
    return Response(answer.model_dump_json(), media_type="application/json")  # already the response model
