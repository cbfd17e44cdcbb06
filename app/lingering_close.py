"""An answer given before the request's body is all in (a 413 on its declared length, a 429, a
401...) is followed by a read of the rest of that body, bounded in bytes and time, before the
response ends and the connection closes. Clients that send the whole body before they read
(urllib, requests: no `Expect: 100-continue`) would otherwise meet a connection the server
closed with their bytes unread, a reset, and never see the answer."""

from __future__ import annotations

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.body_limit import carries_body, declared_body

LINGER_MAX_BYTES = 64 * 1024 * 1024
LINGER_MAX_S = 10.0
_CLOSE = (b"connection", b"close")


class LingeringCloseMiddleware:
    def __init__(self, app: ASGIApp, max_bytes: int = LINGER_MAX_BYTES, max_s: float = LINGER_MAX_S):
        self.app, self.max_bytes, self.max_s = app, max_bytes, max_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not carries_body(scope):
            await self.app(scope, receive, send)
            return
        body_in = False
        body_started = False

        async def tracking_receive() -> Message:
            nonlocal body_in, body_started
            event = await receive()
            body_started = True
            if event["type"] != "http.request" or not event.get("more_body", False):
                body_in = True
            return event

        async def lingering_send(event: Message) -> None:
            nonlocal ending
            if body_in:
                await send(event)
            elif event["type"] == "http.response.start":
                # The connection cannot serve another request with part of this body still unread.
                headers = [(k, v) for k, v in event.get("headers", ()) if k.lower() != b"connection"]
                await send({**event, "headers": [*headers, _CLOSE]})
            elif event["type"] == "http.response.body" and not event.get("more_body", False):
                ending = True  # after the app has returned (and given back what it holds): read, then end
                await send({**event, "more_body": True})
            else:
                await send(event)

        ending = False
        await self.app(scope, tracking_receive, lingering_send)
        if ending:
            if self._worth_reading(scope, body_started):
                await self._drain(tracking_receive)
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    def _worth_reading(self, scope: Scope, body_started: bool) -> bool:
        """Not when the client waits for `100 Continue` (it sends nothing now that it has its
        answer), nor when it declared more than the bound (it would be cut off all the same)."""
        if not body_started and _expects_continue(scope):
            return False
        declared, _ = declared_body(scope)
        return declared is None or not declared.isdigit() or int(declared) <= self.max_bytes

    async def _drain(self, receive: Receive) -> None:
        read = 0
        with anyio.move_on_after(self.max_s):
            while read < self.max_bytes:
                event = await receive()
                if event["type"] != "http.request":
                    return
                read += len(event.get("body", b""))
                if not event.get("more_body", False):
                    return


def _expects_continue(scope: Scope) -> bool:
    return any(name == b"expect" and value.lower() == b"100-continue" for name, value in scope.get("headers", ()))
