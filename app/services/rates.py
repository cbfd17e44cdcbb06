"""Messages per second in and out, from two snapshots of the store's counters: the one taken
now and the oldest still inside the window (or the store's opening, before any was taken)."""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

from store.broker.stats import StatsSnapshot, StoreStats

DEFAULT_WINDOW_MS = 10_000
MIN_SPAN_MS = 1_000  # a shorter span says more about the moment of sampling than about traffic


@dataclass(frozen=True)
class Rates:
    put_per_s: float | None  # None: too little time has passed to tell
    delivered_per_s: float | None
    acked_per_s: float | None
    over_ms: int | None  # the span the rates average over


@dataclass(frozen=True)
class _Sample:
    at_ms: int
    counts: StatsSnapshot


class RateSampler:
    """Kept on app.state; every dashboard refresh adds a sample. Thread-safe."""

    def __init__(self, window_ms: int = DEFAULT_WINDOW_MS, min_span_ms: int = MIN_SPAN_MS):
        self.window_ms = window_ms
        self.min_span_ms = min_span_ms
        self._samples: deque[_Sample] = deque()
        self._lock = threading.Lock()

    def rates(self, stats: StoreStats, now_ms: int) -> Rates:
        """The rates up to now, and `now` remembered as a sample for the next call."""
        current = _Sample(now_ms, stats.snapshot())
        with self._lock:
            while len(self._samples) > 1 and self._samples[1].at_ms <= now_ms - self.window_ms:
                self._samples.popleft()
            base = self._samples[0] if self._samples else _Sample(stats.started_ms, StatsSnapshot())
            if not self._samples or current.at_ms > self._samples[-1].at_ms:
                self._samples.append(current)
        span_ms = now_ms - base.at_ms
        if span_ms < self.min_span_ms:
            return Rates(None, None, None, None)

        def per_second(now_count: int, then_count: int) -> float:
            return round(max(0, now_count - then_count) * 1000 / span_ms, 3)

        return Rates(per_second(current.counts.put, base.counts.put),
                     per_second(current.counts.delivered, base.counts.delivered),
                     per_second(current.counts.acked, base.counts.acked), span_ms)
