"""The remoting calls one console request makes: bounded in number and in time, and a broker that
failed once is named once and not asked again within the request."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")
MAX_CONCURRENT_CALLS = 16  # calls one console request has in flight at once


class Calls:
    def __init__(self):
        self._slots = asyncio.Semaphore(MAX_CONCURRENT_CALLS)
        self._failures: dict[str, str] = {}

    async def call(self, broker: str | None, work: Awaitable[T]) -> T:
        async with self._slots:
            if broker is not None and broker in self._failures:
                work.close()  # never awaited: the broker already failed
                raise TimeoutError(self._failures[broker])
            return await work

    def is_down(self, broker: str) -> bool:
        return broker in self._failures

    def failed(self, what: str, exc: BaseException, address: str | None = None) -> None:
        where = f"broker {what} ({address})" if address else what
        self._failures.setdefault(what, f"{where} did not answer: {exc or type(exc).__name__}")

    def problems(self) -> list[str]:
        return sorted(self._failures.values())


async def within(work: Awaitable[T], deadline_s: float) -> T:
    return await asyncio.wait_for(work, deadline_s)
