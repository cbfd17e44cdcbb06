"""Every on-disk name of a store directory."""

from __future__ import annotations

import time
from pathlib import Path

COMMITLOG_DIR = "commitlog"
CONSUMEQUEUE_DIR = "consumequeue"
INDEX_DIR = "index"
DEAD_LETTER_DIR = "deadletters"  # mqlens only: the dead-letter inbox's index (store.projections.dead_letters)
DEAD_LETTER_UNITS_FILE = "units"
DEAD_LETTER_REASONS_FILE = "reasons"
DEAD_LETTER_HOSTS_FILE = "hosts"
DEAD_LETTER_AGAIN_FILE = "again"
CONFIG_DIR = "config"
CHECKPOINT_FILE = "checkpoint"
ABORT_FILE = "abort"
LOCK_FILE = "lock"
LOCK_CONTENT = b"lock"
OFFSET_NAME_DIGITS = 20
INDEX_NAME_DIGITS = 17


def offset_to_name(offset: int) -> str:
    """UtilAll.offset2FileName: the decimal offset, zero-padded to 20 digits."""
    return f"{offset:0{OFFSET_NAME_DIGITS}d}"


def is_offset_name(name: str) -> bool:
    return len(name) == OFFSET_NAME_DIGITS and name.isdigit()


def is_index_name(name: str) -> bool:
    return len(name) == INDEX_NAME_DIGITS and name.isdigit()


def index_name_for(ms: int) -> str:
    """yyyyMMddHHmmssSSS in local time, as RocketMQ's timeMillisToHumanString."""
    t = time.localtime(ms // 1000)
    return time.strftime("%Y%m%d%H%M%S", t) + f"{ms % 1000:03d}"


class StorePaths:
    def __init__(self, root: Path):
        self.root = Path(root)

    @property
    def commitlog(self) -> Path:
        return self.root / COMMITLOG_DIR

    @property
    def consumequeue(self) -> Path:
        return self.root / CONSUMEQUEUE_DIR

    def queue_dir(self, topic: str, queue_id: int) -> Path:
        return self.consumequeue / topic / str(queue_id)

    @property
    def index(self) -> Path:
        return self.root / INDEX_DIR

    def dead_letter_dir(self, topic: str, queue_id: int) -> Path:
        return self.root / DEAD_LETTER_DIR / topic / str(queue_id)

    @property
    def config(self) -> Path:
        return self.root / CONFIG_DIR

    @property
    def checkpoint(self) -> Path:
        return self.root / CHECKPOINT_FILE

    @property
    def abort(self) -> Path:
        return self.root / ABORT_FILE

    @property
    def lock(self) -> Path:
        return self.root / LOCK_FILE
