"""Pop-style consuming over the REST API: receive with an invisible time, then ack, nack or
change the invisible time with the receipt handle (store/pop.py has the rules)."""

from __future__ import annotations

from dataclasses import dataclass

from store.broker.pop import Received
from store.message_store import MessageStore


@dataclass(frozen=True)
class AckOutcome:
    receipt_handle: str
    error: str | None  # None: acknowledged


def receive(store: MessageStore, group: str, topic: str, max_messages: int, invisible_ms: int, wait_ms: int = 0,
            tags: str | None = None) -> list[Received]:
    """Blocks up to `wait_ms` when nothing is there: call it on a worker thread."""
    return store.receive(group, topic, max_messages, invisible_ms, tags=tags, wait_ms=wait_ms)


def ack(store: MessageStore, group: str, receipt_handle: str) -> None:
    store.ack(group, receipt_handle)


def ack_many(store: MessageStore, group: str, receipt_handles: list[str]) -> list[AckOutcome]:
    """Each handle on its own: a refused one does not stop the others."""
    refusals = store.ack_many(group, receipt_handles)
    return [AckOutcome(handle, None if refused is None else str(refused))
            for handle, refused in zip(receipt_handles, refusals, strict=True)]


def nack(store: MessageStore, group: str, receipt_handle: str, reason: str | None = None) -> None:
    store.nack(group, receipt_handle, reason)


def change_invisible(store: MessageStore, group: str, receipt_handle: str, invisible_ms: int) -> str:
    return store.change_invisible(group, receipt_handle, invisible_ms)
