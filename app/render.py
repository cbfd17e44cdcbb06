"""Answering a console request in the form it asked for: a page's JSON twin ("*.json" or
`Accept: application/json`), a named fragment for htmx, or the whole page. All three come from
the same data dictionary, so the JSON twin shows exactly what the page shows."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import jinja2
from fastapi import Request
from fastapi.encoders import jsonable_encoder
from fastapi.responses import HTMLResponse, JSONResponse, Response
from jinja2_fragments import render_block

from app.masking import BodyMask

STATIC_PREFIX = "/static"
HTMX_FILE = "vendor/htmx-2.0.11.min.js"


def project_dir() -> Path:
    """Where templates/ and static/ live: beside the app package."""
    return Path(__file__).resolve().parents[1]


def format_ms(epoch_ms: int | None) -> str:
    """Epoch milliseconds as UTC date and time to the millisecond; a time outside years 1-9999
    (a client with a bad clock writes such records) as the raw number."""
    if epoch_ms is None:
        return ""
    try:
        moment = dt.datetime.fromtimestamp(epoch_ms / 1000, tz=dt.UTC)
    except (OverflowError, OSError, ValueError):
        return f"{epoch_ms} ms since 1970 (outside years 1-9999)"
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{epoch_ms % 1000:03d} UTC"


def format_duration_ms(ms: int | None) -> str:
    """2h 5m, 3m 10s, 1.5s, 20ms."""
    if ms is None:
        return ""
    sign, ms = ("-", -ms) if ms < 0 else ("", ms)
    if ms < 1000:
        return f"{sign}{ms}ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{sign}{seconds:.3g}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{sign}{minutes}m {secs}s" if secs else f"{sign}{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{sign}{hours}h {minutes}m" if minutes else f"{sign}{hours}h"
    return f"{sign}{hours // 24}d {hours % 24}h"


def format_bytes(count: int | None) -> str:
    if count is None:
        return ""
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{count} B"


def json_twin_url(request: Request) -> str:
    """The page's JSON twin, from the path as the browser sent it (so %25 stays %25)."""
    raw = request.scope.get("raw_path") or request.url.path.encode()
    path = raw.decode("latin-1").split("?", 1)[0].rstrip("/") or ""
    query = request.url.query
    return (path or "/index") + ".json" + (f"?{query}" if query else "")


def make_environment(templates_dir: Path) -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(templates_dir), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(ms_time=format_ms, duration=format_duration_ms, bytes=format_bytes)
    env.globals.update(static_prefix=STATIC_PREFIX, htmx_file=HTMX_FILE, json_twin_url=json_twin_url)
    # The macros as a global, so a block rendered on its own (an htmx fragment) has them too.
    env.globals["ui"] = env.get_template("_macros.html").module
    return env


def wants_json(request: Request) -> bool:
    """The JSON twin of a page was asked for: by suffix (see JsonTwinMiddleware) or by Accept."""
    if request.scope.get("state", {}).get("json_twin"):
        return True
    accept = request.headers.get("accept", "")
    return "application/json" in accept and "text/html" not in accept


def wants_html(request: Request) -> bool:
    """A browser (or htmx) asked for something outside the JSON API: it gets HTML, errors too."""
    path = request.url.path
    if path.startswith("/api/") or path in ("/openapi.json", "/metrics", "/healthz") or wants_json(request):
        return False
    return request.headers.get("hx-request") == "true" or "text/html" in request.headers.get("accept", "")


def is_htmx(request: Request) -> bool:
    return request.headers.get("hx-request") == "true" and request.headers.get("hx-history-restore-request") != "true"


class Renderer:
    def __init__(self, templates_dir: Path):
        self.env = make_environment(templates_dir)

    def _context(self, request: Request, data: dict[str, Any]) -> dict[str, Any]:
        principal = getattr(request.state, "principal", None)
        return {"nav": "", **data, "request": request, "principal": principal,
                "can": (lambda permission: principal is not None and principal.can(permission)),
                "read_only": getattr(request.app.state.settings, "read_only", False),
                "on_cluster": getattr(request.app.state.settings, "namesrv", None) is not None}

    def page(self, request: Request, template: str, data: dict[str, Any], *, fragment: str | None = None,
             status: int = 200, headers: dict[str, str] | None = None) -> Response:
        """The page, its JSON twin, or (for htmx) one named block of it: the block the request
        targets (`HX-Target` naming a block) or else `fragment`. Message bodies in `data` show
        as the caller may see them (app.masking), in all three."""
        state = request.app.state
        data = BodyMask(state.sessions, state.clock, getattr(request.state, "principal", None))(data)
        if wants_json(request):
            return JSONResponse(jsonable_encoder({"ok": status < 400, **data}), status_code=status, headers=headers)
        context = self._context(request, data)
        if is_htmx(request):
            block = self.block_for(template, request.headers.get("hx-target")) or fragment
            if block is not None:
                html = render_block(self.env, template, block, context)
                return HTMLResponse(html, status_code=status, headers=headers)
        html = self.env.get_template(template).render(context)
        return HTMLResponse(html, status_code=status, headers=headers)

    def block_for(self, template: str, target: str | None) -> str | None:
        if not target:
            return None
        blocks = self.env.get_template(template).blocks
        name = target.replace("-", "_")
        return name if name in blocks else None

    def error(self, request: Request, status: int, message: str, headers: dict[str, str] | None = None) -> Response:
        """The error page, or for htmx the error fragment put into the page's error banner."""
        data = {"error": message, "status": status}
        context = self._context(request, data)
        if is_htmx(request):
            html = render_block(self.env, "error.html", "error_banner", context)
            extra = {"HX-Retarget": "#error-banner", "HX-Reswap": "innerHTML"}
            return HTMLResponse(html, status_code=status, headers={**(headers or {}), **extra})
        html = self.env.get_template("error.html").render(context)
        return HTMLResponse(html, status_code=status, headers=headers)
