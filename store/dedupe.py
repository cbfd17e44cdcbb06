"""Producer duplicate suppression: a message whose client-given unique key was stored within the
window is not stored again; the producer gets the first copy's result (safe client retries)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

DEFAULT_WINDOW_MS = 10 * 60 * 1000
MAX_REMEMBERED = 1_000_000


class RecentUniqueKeys:
    """Results of recent puts by unique key, forgotten after `window_ms` or beyond `limit` keys."""

    def __init__(self, window_ms: int = DEFAULT_WINDOW_MS, limit: int = MAX_REMEMBERED):
        self.window_ms = window_ms
        self.limit = limit
        self._seen: OrderedDict[str, tuple[int, Any]] = OrderedDict()

    def get(self, unique_key: str, now_ms: int) -> Any | None:
        found = self._seen.get(unique_key)
        if found is None or found[0] < now_ms - self.window_ms:
            return None
        return found[1]

    def remember(self, unique_key: str, result: Any, now_ms: int) -> None:
        self._seen[unique_key] = (now_ms, result)
        self._seen.move_to_end(unique_key)
        self._expire(now_ms)

    def _expire(self, now_ms: int) -> None:
        horizon = now_ms - self.window_ms
        seen = self._seen
        while seen and (len(seen) > self.limit or next(iter(seen.values()))[0] < horizon):
            seen.popitem(last=False)
