"""Flow control: a bound on the requests of one kind in progress at once, taken without waiting."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from store.errors import FlowControlError


class PutGate:
    """At most `capacity` holders at once; one more is refused with FlowControlError (429)."""

    def __init__(self, capacity: int, retry_after_s: int = 1, activity: str = "puts"):
        if capacity < 0:
            raise ValueError("capacity must not be negative")
        self.capacity = capacity
        self.retry_after_s = retry_after_s
        self.activity = activity
        self._in_use = 0
        self._lock = threading.Lock()

    @property
    def in_use(self) -> int:
        return self._in_use

    def try_acquire(self) -> bool:
        with self._lock:
            if self._in_use >= self.capacity:
                return False
            self._in_use += 1
            return True

    def release(self) -> None:
        with self._lock:
            if self._in_use == 0:
                raise RuntimeError("PutGate released more often than acquired")
            self._in_use -= 1

    @contextmanager
    def slot(self) -> Iterator[None]:
        if not self.try_acquire():
            raise FlowControlError(f"too many {self.activity} in progress (at most {self.capacity}), retry later",
                                   retry_after_s=self.retry_after_s)
        try:
            yield
        finally:
            self.release()
