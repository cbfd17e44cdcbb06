"""Receipt handles that no longer work, remembered so that a refusal can say why (acknowledged,
nacked, expired, replaced). The last `capacity` of them are kept in a ring taken in full at the
start, so the memory does not grow with each delivery; only a refused handle searches it."""

from __future__ import annotations

import numpy as np


class RetiredHandles:
    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        # A handle's hash, not its text: two handles sharing one could only swap the explanations
        # of their refusals.
        self._hashes = np.zeros(capacity, dtype=np.int64)
        self._why: list[str | None] = [None] * capacity
        self._added = 0

    def add(self, handle: str, why: str) -> None:
        slot = self._added % len(self._why)
        self._hashes[slot] = hash(handle)
        self._why[slot] = why
        self._added += 1

    def why(self, handle: str) -> str | None:
        """Why the handle was retired (the latest time, if more than once), or None if it is not
        among the remembered ones."""
        capacity = len(self._why)
        filled = min(self._added, capacity)
        hits = np.flatnonzero(self._hashes[:filled] == hash(handle))
        if not len(hits):
            return None
        newest = max(hits.tolist(), key=lambda slot: (slot - self._added) % capacity)
        return self._why[newest]
