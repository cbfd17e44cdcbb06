"""Consumer groups: their settings, and creating or changing one."""

from __future__ import annotations

from dataclasses import dataclass

from store.message_store import MessageStore
from store.metadata import GroupConfig


@dataclass(frozen=True)
class GroupView:
    name: str
    max_reconsume_times: int
    consume_mode: str
    message_model: str
    retry_queues: int
    consume_enable: bool
    configured: bool


def _view(config: GroupConfig, configured: bool) -> GroupView:
    return GroupView(config.name, config.max_reconsume_times, config.consume_mode, config.message_model,
                     config.retry_queues, config.consume_enable, configured)


def list_groups(store: MessageStore) -> list[GroupView]:
    return [_view(g, True) for g in store.metadata.groups()]


def get_group(store: MessageStore, name: str) -> GroupView:
    """A group's settings; one nobody configured has the defaults (configured: false)."""
    config = store.metadata.group(name)  # checks the name
    return _view(config, any(g.name == name for g in store.metadata.groups()))


def put_group(store: MessageStore, name: str, **changes) -> GroupView:
    """Create or change a group: unset (None) settings keep their value."""
    config = store.metadata.update_group(name, **{k: v for k, v in changes.items() if v is not None})
    return _view(config, True)
