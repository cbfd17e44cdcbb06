"""The JSON API takes JSON: a request to /api/ that carries a body must say it is JSON
(application/json or a +json type); any other body, or one without a Content-Type, is refused
with 415 before anything parses it."""

from __future__ import annotations

from collections.abc import Callable

from starlette.types import ASGIApp, Receive, Scope, Send

from app.body_limit import carries_body

API_PREFIX = "/api/"
WITH_BODY = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def is_json_media_type(content_type: str) -> bool:
    media_type = content_type.split(";", 1)[0].strip().lower()
    kind, _, subtype = media_type.partition("/")
    return kind == "application" and (subtype == "json" or subtype.endswith("+json"))


class JsonContentTypeMiddleware:
    def __init__(self, app: ASGIApp, refuse: Callable[[Scope, str], ASGIApp]):
        self.app, self.refuse = app, refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] == "http" and scope["method"] in WITH_BODY and scope["path"].startswith(API_PREFIX)
                and carries_body(scope)):
            declared = dict(scope["headers"]).get(b"content-type", b"").decode("latin-1")
            if not is_json_media_type(declared):
                given = f"Content-Type is {declared[:100]!r}" if declared else "has no Content-Type"
                await self.refuse(scope, f"the API takes JSON: this request's {given}; send "
                                         "Content-Type: application/json")(scope, receive, send)
                return
        await self.app(scope, receive, send)
