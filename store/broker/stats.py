"""Running counts of the store's traffic since it was opened: messages producers put, messages
handed to consumers (pulls that record a delivery, pop-style receives) and acknowledgements.
Rates are the readers' business: they compare two snapshots."""

from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class StatsSnapshot:
    put: int = 0
    delivered: int = 0
    acked: int = 0


class StoreStats:
    def __init__(self, started_ms: int):
        self.started_ms = started_ms
        self._lock = threading.Lock()
        self._put = 0
        self._delivered = 0
        self._acked = 0

    def count_put(self, messages: int) -> None:
        with self._lock:
            self._put += messages

    def count_delivered(self, messages: int) -> None:
        with self._lock:
            self._delivered += messages

    def count_acked(self, messages: int) -> None:
        with self._lock:
            self._acked += messages

    def snapshot(self) -> StatsSnapshot:
        with self._lock:
            return StatsSnapshot(self._put, self._delivered, self._acked)
