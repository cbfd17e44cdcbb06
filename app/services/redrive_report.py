"""What a redrive job's list says of each dead letter besides its id: its keys, the topic it
was consumed from, when it was born and why it failed, read from the store (blank once retention
has deleted it, or while its broker does not answer), so a person can tell the messages apart
before and after the job runs."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from app.services.dead_letter_inbox import embedded_store
from app.services.dead_letters import DeadLetterCache
from app.services.errors import ServiceError
from app.services.lookup import Source
from app.services.resend import find_dead_letter
from backend.protocol import BackendUnavailable
from store.errors import StoreError
from store.format import topics
from store.format.resend_plan import origin_topic


@dataclass(frozen=True)
class DeadLetterFacts:
    keys: list[str]
    topic: str | None  # the topic it was consumed from
    born_timestamp: int | None  # epoch ms
    reason: str

    @property
    def born_time_utc(self) -> str:
        """ISO 8601 UTC to the millisecond, for the CSV report ("" when unknown or out of range)."""
        if self.born_timestamp is None:
            return ""
        try:
            moment = dt.datetime.fromtimestamp(self.born_timestamp / 1000, tz=dt.UTC)
        except (OverflowError, OSError, ValueError):
            return ""
        return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


UNKNOWN = DeadLetterFacts([], None, None, "")


def facts(source: Source, cache: DeadLetterCache, group: str, dead_letter_id: str) -> DeadLetterFacts:
    try:
        dead = find_dead_letter(source, group, dead_letter_id)
    except (ServiceError, StoreError, BackendUnavailable):  # gone with retention, never there, or unreachable
        return UNKNOWN
    store = embedded_store(source)
    reason = cache.reason(store, dead) if store is not None else dead.properties.get(topics.DLQ_REASON, "")
    return DeadLetterFacts(list(dead.keys), origin_topic(dead), dead.born_timestamp, reason)
