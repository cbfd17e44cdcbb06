"""Every console page has a JSON twin at the same path plus ".json": this middleware strips the
suffix before routing and marks the request, so one route serves both (see app.render)."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

SUFFIX = ".json"
# Paths that are JSON or files already, never a page's twin.
_NOT_TWINS = ("/api/", "/static/", "/openapi.json")


class JsonTwinMiddleware:
    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "") if scope["type"] == "http" else ""
        if path.endswith(SUFFIX) and not path.startswith(_NOT_TWINS):
            page = path[: -len(SUFFIX)]
            if page.endswith("/index") or page == "/index":
                page = page[: -len("index")]
            raw_path: bytes = scope.get("raw_path") or path.encode()
            if raw_path.endswith(SUFFIX.encode()):
                raw_path = raw_path[: -len(SUFFIX)]
            if raw_path.endswith(b"/index"):
                raw_path = raw_path[: -len(b"index")]
            scope = dict(scope, path=page or "/", raw_path=raw_path or b"/",
                         state={**scope.get("state", {}), "json_twin": True})
        await self.app(scope, receive, send)
