"""Password hashes are checked a few at a time, on threads of their own: an Argon2id check takes
64 MiB and a core for a good part of a second, so a burst of sign-ins must neither grow the
server's memory with each one nor take the request threads the pages need. A check that finds
every slot busy waits for one behind a short queue, for a short while; past either bound it is
refused at once (FlowControlError: 429 with Retry-After)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

import anyio
import anyio.to_thread

from store.errors import FlowControlError

T = TypeVar("T")
RETRY_AFTER_S = 1


class PasswordCheckPool:
    def __init__(self, size: int, max_waiting: int, max_wait_s: float = 2.0):
        self.size, self.max_waiting, self.max_wait_s = size, max_waiting, max_wait_s
        self._slots = anyio.CapacityLimiter(size)
        self._threads = anyio.CapacityLimiter(size)  # apart from the request threads' limiter
        self.waiting = 0

    def _busy(self) -> FlowControlError:
        return FlowControlError(f"too many sign-ins in progress (their passwords are checked {self.size} at a "
                                "time), retry", retry_after_s=RETRY_AFTER_S)

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """One of the pool's slots, held for the block; refused when the queue or the wait runs out."""
        if self._slots.available_tokens == 0 and self.waiting >= self.max_waiting:
            raise self._busy()
        self.waiting += 1
        acquired = False
        try:
            with anyio.move_on_after(self.max_wait_s):
                await self._slots.acquire()
                acquired = True
        finally:
            self.waiting -= 1
        if not acquired:
            raise self._busy()
        try:
            yield
        finally:
            self._slots.release()

    async def in_thread(self, check: Callable[..., T], *args: object) -> T:
        """`check(*args)` on one of the pool's threads (call it holding a slot)."""
        return await anyio.to_thread.run_sync(check, *args, limiter=self._threads)
