"""The RocketMQ clients' own message trace of one message, read from this store's trace topic
(decoding: store.format.client_trace)."""

from __future__ import annotations

from typing import Any, Protocol

from store.format import topics
from store.format.client_trace import DEFAULT_MAX_RECORDS, ClientTraceContext, contexts_about


class TraceQueries(Protocol):
    """What client_trace_of needs of a store (MessageStore has it)."""

    def topics(self) -> dict[str, Any]: ...

    def query_by_key(self, topic: str, key: str, *, max_results: int) -> Any: ...


def client_trace_of(store: TraceQueries, msg_id: str, *, topic: str = topics.TRACE_TOPIC,
                    max_records: int = DEFAULT_MAX_RECORDS) -> list[ClientTraceContext]:
    """Every client trace context about the message with unique key `msg_id`, from the trace
    records the index finds under that key (at most `max_records` of them, the newest), ordered
    by their time stamp, then by where they are in the commit log; [] without a trace topic.
    `max_records` is bounded as the store bounds a query (MessageStore: 10,000)."""
    if not msg_id or topic not in store.topics():
        return []
    return contexts_about(store.query_by_key(topic, msg_id, max_results=max_records).messages, msg_id)
