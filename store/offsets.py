"""Consumer offsets per topic@group and queue (config/consumerOffset.json, RocketMQ's form)."""

from __future__ import annotations

import threading
from pathlib import Path

from store.config_file import read_config, write_config
from store.errors import StoreError

OFFSETS_FILE = "consumerOffset.json"
KEY_SEPARATOR = "@"


class OffsetTableError(StoreError):
    """consumerOffset.json holds something other than topic@group -> {queue id: offset}."""


def offset_key(topic: str, group: str) -> str:
    return f"{topic}{KEY_SEPARATOR}{group}"


class ConsumerOffsets:
    """The next queue offset each group consumes from each queue. Commits are kept in memory and
    written by `persist` (the broker does so every few seconds and at shutdown)."""

    def __init__(self, config_dir: Path):
        self.path = Path(config_dir) / OFFSETS_FILE
        self._lock = threading.Lock()
        self._persist_lock = threading.Lock()  # one writer of the file at a time, in order
        self._table: dict[str, dict[int, int]] = {}
        self._dirty = False
        self._load()

    def _load(self) -> None:
        content = read_config(self.path)
        if content is None:
            return
        table = content.get("offsetTable") if isinstance(content, dict) else None
        if not isinstance(table, dict):
            raise OffsetTableError(f"{self.path} has no offsetTable object")
        for key, queues in table.items():
            if KEY_SEPARATOR not in key or not isinstance(queues, dict):
                raise OffsetTableError(f"{self.path}: bad entry {key!r}")
            try:
                self._table[key] = {int(q): int(o) for q, o in queues.items()}
            except (TypeError, ValueError):
                raise OffsetTableError(f"{self.path}: bad offsets under {key!r}") from None

    def get(self, topic: str, group: str, queue_id: int) -> int | None:
        """The committed offset, or None when the group never committed one for that queue."""
        with self._lock:
            return self._table.get(offset_key(topic, group), {}).get(queue_id)

    def commit(self, topic: str, group: str, queue_id: int, offset: int) -> None:
        if offset < 0 or queue_id < 0:
            raise ValueError("queue ids and offsets are not negative")
        with self._lock:
            self._table.setdefault(offset_key(topic, group), {})[queue_id] = offset
            self._dirty = True

    def of_group(self, group: str) -> dict[str, dict[int, int]]:
        """topic -> {queue id: offset} for one group."""
        with self._lock:
            return {key.rsplit(KEY_SEPARATOR, 1)[0]: dict(queues) for key, queues in self._table.items()
                    if key.rsplit(KEY_SEPARATOR, 1)[1] == group}

    def persist(self) -> None:
        with self._persist_lock:
            with self._lock:
                if not self._dirty:
                    return
                content = {"offsetTable": {key: {str(q): o for q, o in sorted(queues.items())}
                                           for key, queues in self._table.items()}}
                self._dirty = False
            try:
                write_config(self.path, content)
            except BaseException:
                self._dirty = True
                raise
