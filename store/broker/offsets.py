"""Consumer offsets per topic@group and queue (config/consumerOffset.json, RocketMQ's form)."""

from __future__ import annotations

from pathlib import Path

from store.errors import StoreError
from store.log.config_file import OffsetTableFile

OFFSETS_FILE = "consumerOffset.json"
KEY_SEPARATOR = "@"


class OffsetTableError(StoreError):
    """consumerOffset.json holds something other than topic@group -> {queue id: offset}."""


def offset_key(topic: str, group: str) -> str:
    return f"{topic}{KEY_SEPARATOR}{group}"


class ConsumerOffsets(OffsetTableFile):
    """The next queue offset each group consumes from each queue. Commits are kept in memory and
    written by `persist` (the broker does so every few seconds and at shutdown)."""

    def __init__(self, config_dir: Path):
        super().__init__(Path(config_dir) / OFFSETS_FILE, OffsetTableError)
        self._table: dict[str, dict[int, int]] = {}
        for key, queues in self.read_table().items():
            if KEY_SEPARATOR not in key or not isinstance(queues, dict):
                raise OffsetTableError(f"{self.path}: bad entry {key!r}")
            try:
                self._table[key] = {int(q): int(o) for q, o in queues.items()}
            except (TypeError, ValueError):
                raise OffsetTableError(f"{self.path}: bad offsets under {key!r}") from None

    def get(self, topic: str, group: str, queue_id: int) -> int | None:
        """The committed offset, or None when the group never committed one for that queue."""
        with self.lock:
            return self._table.get(offset_key(topic, group), {}).get(queue_id)

    def commit(self, topic: str, group: str, queue_id: int, offset: int) -> None:
        if offset < 0 or queue_id < 0:
            raise ValueError("queue ids and offsets are not negative")
        with self.lock:
            self._table.setdefault(offset_key(topic, group), {})[queue_id] = offset
            self.mark_changed()

    def of_group(self, group: str) -> dict[str, dict[int, int]]:
        """topic -> {queue id: offset} for one group."""
        with self.lock:
            return {key.rsplit(KEY_SEPARATOR, 1)[0]: dict(queues) for key, queues in self._table.items()
                    if key.rsplit(KEY_SEPARATOR, 1)[1] == group}

    def table_json(self) -> dict:
        return {key: {str(q): o for q, o in sorted(queues.items())} for key, queues in self._table.items()}
