"""Failed sign-ins are rate-limited (the `limits` library, moving window): per user name, and
per client address at ten times the rate, so guessing one password or many names is slow."""

from __future__ import annotations

import math
import time

from limits import RateLimitItemPerMinute, storage, strategies


class LoginLimiter:
    def __init__(self, failures_per_minute: int):
        self._limiter = strategies.MovingWindowRateLimiter(storage.MemoryStorage())
        self._per_name = RateLimitItemPerMinute(failures_per_minute)
        self._per_client = RateLimitItemPerMinute(failures_per_minute * 10)

    def _buckets(self, name: str, client: str):
        return ((self._per_name, "name", name[:64].lower()), (self._per_client, "client", client))

    def retry_after_s(self, name: str, client: str) -> int:
        """0 when a sign-in may be tried now, else the seconds until it may."""
        wait = 0.0
        for item, kind, key in self._buckets(name, client):
            if not self._limiter.test(item, kind, key):
                reset_at = self._limiter.get_window_stats(item, kind, key).reset_time
                wait = max(wait, reset_at - time.time(), 1)
        return math.ceil(wait)

    def failed(self, name: str, client: str) -> None:
        for item, kind, key in self._buckets(name, client):
            self._limiter.hit(item, kind, key)
