"""Password hashes are checked a few at a time, on threads of their own: an Argon2id check takes
64 MiB and a core for a good part of a second, so a burst of sign-ins must neither grow the
server's memory with each one nor take the request threads the pages need. A check that finds
every slot busy waits for one behind a short queue, for a short while; past either bound it is
refused at once (FlowControlError: 429 with Retry-After). The checking threads run at a lower
priority than the request threads (Linux keeps a nice value per thread, and Argon2's own
threads inherit it), so on a busy machine the pages go first and the sign-ins wait."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import TypeVar

import anyio

from store.errors import FlowControlError

T = TypeVar("T")
RETRY_AFTER_S = 1
CHECKING_NICENESS = 10


def _lower_this_threads_priority() -> None:
    # not Linux, or not allowed: the same priority as the rest
    with contextlib.suppress(AttributeError, OSError):
        thread = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, thread, min(19, os.getpriority(os.PRIO_PROCESS, thread) + CHECKING_NICENESS))


class PasswordCheckPool:
    def __init__(self, size: int, max_waiting: int, max_wait_s: float = 2.0):
        self.size, self.max_waiting, self.max_wait_s = size, max_waiting, max_wait_s
        self._slots = anyio.CapacityLimiter(size)
        self.waiting = 0
        self._threads: ThreadPoolExecutor | None = None  # made at the first check

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
        if self._threads is None:
            self._threads = ThreadPoolExecutor(self.size, thread_name_prefix="password-check",
                                               initializer=_lower_this_threads_priority)
        return await asyncio.get_running_loop().run_in_executor(self._threads, functools.partial(check, *args))

    def close(self) -> None:
        if self._threads is not None:
            self._threads.shutdown(wait=True)
            self._threads = None
