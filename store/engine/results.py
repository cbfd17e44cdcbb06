"""What puts and queries answer, and the bounds of a query."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from store.format import ids
from store.format.codec import StoredMessage
from store.format.hosts import HostAddress

MAX_QUERY_RESULTS = 10_000
DEFAULT_QUERY_MAX = 32
FAR_FUTURE_MS = 2**63 - 1


class PutResult(NamedTuple):
    topic: str
    queue_id: int
    queue_offset: int
    phys_offset: int
    size: int
    unique_key: str | None
    store_timestamp: int
    store_host: HostAddress

    @property
    def offset_msg_id(self) -> str:
        return ids.create_offset_msg_id(self.store_host, self.phys_offset)


@dataclass
class QueryResult:
    messages: list[StoredMessage]
    truncated: bool
