"""Producer duplicate suppression: a message whose client-given unique key was stored within the
window is not stored again; the producer gets the first copy's result (safe client retries).

Checking the index for every send would cost more than the send itself, so a compact filter of
the index hashes (topic#unique key) stored within the window answers first: "certainly new" for
nearly every message, "maybe" for a repeat and for a small share of false alarms, which the index
then settles."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from store.format.recordio import dedupe_screen, filter_add, filter_has

DEFAULT_WINDOW_MS = 10 * 60 * 1000
GENERATION_BYTES = 2 << 20  # 16 bits per key at the capacity below: about 0.5 % false alarms
GENERATION_KEYS = 1 << 20
MAX_GENERATIONS = 16  # at most 32 MiB; past it the newest generation fills on (more false alarms)


@dataclass
class _Generation:
    started_ms: int
    newest_ms: int
    keys: int = 0
    bitmap: bytearray = field(default_factory=lambda: bytearray(GENERATION_BYTES))


class RecentKeyFilter:
    """Index hashes added within the last `window_ms`, in generations of bitmaps: a generation
    takes keys until it holds its capacity or spans the window, and is dropped once its newest
    key is older than the window. A key is never dropped while inside the window."""

    def __init__(self, window_ms: int = DEFAULT_WINDOW_MS, generation_keys: int = GENERATION_KEYS,
                 max_generations: int = MAX_GENERATIONS):
        self.window_ms = window_ms
        self.generation_keys = generation_keys
        self.max_generations = max_generations
        self._generations: list[_Generation] = []
        self._bitmaps: list[bytearray] = []

    def might_hold(self, key_hash: int) -> bool:
        return filter_has(self._bitmaps, key_hash)

    def screen(self, messages: list) -> tuple[np.ndarray, list[int]]:
        """Sort out a batch of NewMessages in one compiled pass: the index hashes of the keyed
        messages that are certainly new (to add once stored), and the indices of those that need
        the full check (a possible repeat, in the window or within the batch, or an unusual shape)."""
        hashes, attention = dedupe_screen(messages, self._bitmaps)
        return np.frombuffer(hashes, dtype=np.int64), attention

    def add(self, key_hash: int, now_ms: int) -> None:
        self._insert(key_hash, 1, now_ms)

    def add_many(self, key_hashes: np.ndarray, now_ms: int) -> None:
        self._insert(np.ascontiguousarray(key_hashes, dtype=np.int64), len(key_hashes), now_ms)

    def _insert(self, hashes: int | np.ndarray, count: int, now_ms: int) -> None:
        gen = self._current(now_ms)
        filter_add(gen.bitmap, hashes)
        gen.keys += count
        gen.newest_ms = max(gen.newest_ms, now_ms)

    def _current(self, now_ms: int) -> _Generation:
        """The generation taking keys now, after dropping those gone out of the window."""
        gens = self._generations
        horizon = now_ms - self.window_ms
        changed = False
        while gens and gens[0].newest_ms < horizon:
            gens.pop(0)
            changed = True
        last = gens[-1] if gens else None
        full = last is None or last.keys >= self.generation_keys or now_ms - last.started_ms >= self.window_ms
        if full and (last is None or len(gens) < self.max_generations):
            last = _Generation(now_ms, now_ms)
            gens.append(last)
            changed = True
        if changed:
            self._bitmaps = [g.bitmap for g in gens]
        return last

    @property
    def generations(self) -> int:
        return len(self._generations)
