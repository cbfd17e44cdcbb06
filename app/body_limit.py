"""Request bodies are bounded before anything reads them: a declared Content-Length over the
route's limit is refused at once (413), and a body sent without one is cut off when it passes
it. Large bodies in progress at once share a byte budget, so many callers together cannot make
the server hold more than it: a large body that finds the budget spent is refused (429)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

# Bodies up to this size are not counted against the budget: their number is bounded by the
# connections the server takes, and counting them would only slow the common request.
SMALL_BODY_BYTES = 256 * 1024
RETRY_AFTER_S = 1


class BodyTooLarge(BaseException):
    """Raised out of the app past every `except Exception` (a body parser would report a mere parse error)."""


class ByteBudget:
    """Bytes the large bodies in progress may take together; taken without waiting or not at all."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._free = capacity
        self._lock = threading.Lock()

    def try_take(self, size: int) -> bool:
        with self._lock:
            if size > self._free:
                return False
            self._free -= size
            return True

    def give_back(self, size: int) -> None:
        with self._lock:
            self._free += size


def declared_body(scope: Scope) -> tuple[bytes | None, bool]:
    """The request's Content-Length as sent (None without one), and whether it says it sends a
    body of unknown length (Transfer-Encoding)."""
    length, streamed = None, False
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            length = value
        elif name == b"transfer-encoding":
            streamed = True
    return length, streamed


def carries_body(scope: Scope) -> bool:
    length, streamed = declared_body(scope)
    return length.strip() != b"0" if length is not None else streamed


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, limit_for: Callable[[Scope], int], budget: ByteBudget,
                 refuse: Callable[[Scope, int, str, dict[str, str] | None], ASGIApp]):
        self.app, self.limit_for, self.budget, self.refuse = app, limit_for, budget, refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope)
        too_large = f"the request body is larger than {limit} bytes, the limit of {scope['path']}"
        declared, streamed = declared_body(scope)
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            await self.refuse(scope, 413, too_large, None)(scope, receive, send)
            return
        # A body of unknown length is charged the whole limit: it may be that long.
        size = int(declared) if declared is not None else (limit if streamed else 0)
        if size <= SMALL_BODY_BYTES:
            await self._limited(scope, receive, send, limit, too_large)
            return
        if not self.budget.try_take(size):
            busy = (f"too many large requests in progress (their bodies may take {self.budget.capacity} bytes "
                    "at once), retry")
            await self.refuse(scope, 429, busy, {"Retry-After": str(RETRY_AFTER_S)})(scope, receive, send)
            return
        try:
            await self._limited(scope, receive, send, limit, too_large)
        finally:
            self.budget.give_back(size)

    async def _limited(self, scope: Scope, receive: Receive, send: Send, limit: int, too_large: str) -> None:
        seen = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal seen
            event = await receive()
            if event["type"] == "http.request":
                seen += len(event.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge
            return event

        async def tracking_send(event: Message) -> None:
            nonlocal started
            started = started or event["type"] == "http.response.start"
            await send(event)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except BodyTooLarge:
            if not started:
                await self.refuse(scope, 413, too_large, None)(scope, receive, send)
