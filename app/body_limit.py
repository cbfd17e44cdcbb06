"""Request bodies are bounded before anything reads them: a declared Content-Length over the
limit is refused at once (413), and a body sent without one is cut off when it passes it."""

from __future__ import annotations

from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodyTooLarge(BaseException):
    """Raised out of the app past every `except Exception` (a body parser would report a mere parse error)."""


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_bytes: int, refuse: Callable[[Scope, str], ASGIApp]):
        self.app, self.max_bytes, self.refuse = app, max_bytes, refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        message = f"the request body is larger than {self.max_bytes} bytes"
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and (not value.isdigit() or int(value) > self.max_bytes):
                await self.refuse(scope, message)(scope, receive, send)
                return
        seen = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal seen
            event = await receive()
            if event["type"] == "http.request":
                seen += len(event.get("body", b""))
                if seen > self.max_bytes:
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
                await self.refuse(scope, message)(scope, receive, send)
