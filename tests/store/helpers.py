"""Small builders shared by the store tests."""

from __future__ import annotations

from store.message_store import MessageStore, NewMessage, StoreConfig
from tests.conftest import GOLDEN_GEOMETRY


def small_config(**overrides) -> StoreConfig:
    """Golden geometry, sync flush, and no lifecycle trace records unless a test asks for them."""
    values = {"geometry": GOLDEN_GEOMETRY, "flush": "sync", "trace": False}
    values.update(overrides)
    return StoreConfig(**values)


def sample_message(i: int, topic: str = "TopicA", body_size: int = 100) -> NewMessage:
    body = (f"message {i} ".encode() * (body_size // 10 + 1))[:body_size]
    return NewMessage(topic=topic, body=body, tags=f"Tag{i % 3}", keys=[f"key-{i}", f"group-{i // 10}"],
                      queue_id=i % 4, born_timestamp=1_700_000_000_000 + i, born_host="192.168.0.1:5000")


def fill(store: MessageStore, count: int, **kwargs):
    return [store.put(sample_message(i, **kwargs)) for i in range(count)]
