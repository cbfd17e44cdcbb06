"""The 4096-byte checkpoint file: flush timestamps of the commit log, queues and index."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from store.format.layouts import CHECKPOINT, CHECKPOINT_SIZE


@dataclass
class Checkpoint:
    physic_timestamp: int = 0
    logics_timestamp: int = 0
    index_timestamp: int = 0

    @classmethod
    def read(cls, path: Path) -> Checkpoint:
        try:
            data = Path(path).read_bytes()
        except FileNotFoundError:
            return cls()
        if len(data) < CHECKPOINT.size:
            return cls()
        return cls(*CHECKPOINT.unpack_from(data, 0))

    def write(self, path: Path) -> None:
        page = bytearray(CHECKPOINT_SIZE)
        CHECKPOINT.pack_into(page, 0, self.physic_timestamp, self.logics_timestamp, self.index_timestamp)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, bytes(page), 0)
            os.fsync(fd)
        finally:
            os.close(fd)
