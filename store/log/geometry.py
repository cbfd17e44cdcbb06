"""Store geometry: sizes RocketMQ keeps in configuration, not in the files."""

from __future__ import annotations

from dataclasses import dataclass

from store.format.layouts import CQ_UNIT, INDEX_ENTRY, INDEX_HEADER, INDEX_SLOT

DEFAULT_COMMITLOG_FILE_SIZE = 1024 * 1024 * 1024
DEFAULT_CQ_FILE_SIZE = 300_000 * CQ_UNIT.size
DEFAULT_INDEX_SLOTS = 5_000_000
DEFAULT_INDEX_ENTRIES = 20_000_000


@dataclass(frozen=True)
class StoreGeometry:
    commitlog_file_size: int = DEFAULT_COMMITLOG_FILE_SIZE
    cq_file_size: int = DEFAULT_CQ_FILE_SIZE
    index_slots: int = DEFAULT_INDEX_SLOTS
    index_entries: int = DEFAULT_INDEX_ENTRIES

    def __post_init__(self) -> None:
        for name in ("commitlog_file_size", "cq_file_size", "index_slots", "index_entries"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.commitlog_file_size < 4096:
            raise ValueError("commitlog_file_size must be at least 4096 bytes")
        if self.index_entries < 2:
            raise ValueError("index_entries must be at least 2 (entry 0 is never used)")
        # RocketMQ rounds the consume queue file size up to whole units.
        units = -(-self.cq_file_size // CQ_UNIT.size)
        object.__setattr__(self, "cq_file_size", units * CQ_UNIT.size)

    @property
    def index_file_size(self) -> int:
        return INDEX_HEADER.size + self.index_slots * INDEX_SLOT.size + self.index_entries * INDEX_ENTRY.size
