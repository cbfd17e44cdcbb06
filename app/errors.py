"""The one error path: every error becomes {"ok": false, "error": message, "status": N}.

Domain errors (the store's and the services') map to 4xx by class; request validation to 422
(malformed JSON to 400); unknown routes and methods to 404/405; flow control to 429, a full
disk to 507 and a busy database to 503, each with Retry-After; anything else to 500 with a
generic message (the traceback goes to the log only). A browser asking for a console page
gets the same message as the error page (or, for htmx, as the error fragment); the JSON API
and JSON twins always get JSON."""

from __future__ import annotations

import logging
import sqlite3
from urllib.parse import urlencode

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from sqlalchemy.exc import DBAPIError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.render import wants_html
from app.services.errors import (
    AuthenticationError,
    ConflictError,
    ForbiddenError,
    InvalidRequestError,
    NotFoundError,
    PayloadTooLargeError,
    ServiceError,
)
from backend.protocol import BackendRefused, BackendUnavailable
from store.broker.metadata import TopicNotFoundError
from store.errors import (
    DiskFullError,
    FlowControlError,
    MessageNotFoundError,
    ReadOnlyStoreError,
    StoreError,
    StoreLockedError,
    StoreNotFoundError,
)

__all__ = ["FlowControlError", "error_response", "install_error_handlers", "status_for"]

log = logging.getLogger("mqlens.app")

PROBED_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")
INTERNAL_ERROR_MESSAGE = "internal server error (details are in the server log)"

# Most specific first: the first class an error is an instance of gives its status.
_STATUS_BY_CLASS: tuple[tuple[type[Exception], int], ...] = (
    (DiskFullError, 507),
    (FlowControlError, 429),
    (TopicNotFoundError, 404),
    (MessageNotFoundError, 404),
    (StoreNotFoundError, 404),
    (NotFoundError, 404),
    (ReadOnlyStoreError, 409),
    (StoreLockedError, 409),
    (ConflictError, 409),
    (AuthenticationError, 401),
    (ForbiddenError, 403),
    (InvalidRequestError, 400),
    (BackendRefused, 400),
    (PayloadTooLargeError, 413),
    # A live cluster that answered nothing in time: the request may be repeated as it is.
    (BackendUnavailable, 424),
)


def status_for(exc: Exception) -> int:
    """The HTTP status of a domain error; 500 for anything not meant for the caller."""
    for cls, status in _STATUS_BY_CLASS:
        if isinstance(exc, cls):
            return status
    if isinstance(exc, (StoreError, ServiceError)) and isinstance(exc, ValueError):
        return 400  # InvalidMessageError, InvalidIdError, MetadataError...
    return 500


def encodable(text: str) -> str:
    """`text` with what UTF-8 cannot hold (a lone surrogate a client sent) written as an escape."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def error_response(request: Request, status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    """The body of every error response."""
    message = encodable(message)
    renderer = getattr(request.app.state, "renderer", None)
    if renderer is not None and wants_html(request):
        try:
            return renderer.error(request, status, message, headers)
        except Exception:  # the error page itself failed: the JSON error still tells what happened
            log.exception("rendering the error page failed")
    return JSONResponse({"ok": False, "error": message, "status": status}, status_code=status, headers=headers)


def _to_login(request: Request) -> Response:
    """A browser that is not signed in goes to the sign-in page, and comes back afterwards."""
    back = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    target = "/login?" + urlencode({"next": back}) if request.method == "GET" else "/login"
    if request.headers.get("hx-request") == "true":
        return Response(status_code=401, headers={"HX-Redirect": target})
    return RedirectResponse(target, status_code=303)


def _message(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


async def _domain_error(request: Request, exc: Exception) -> Response:
    status = status_for(exc)
    if status == 500:
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return error_response(request, 500, INTERNAL_ERROR_MESSAGE)
    headers = None
    if isinstance(exc, AuthenticationError):
        if wants_html(request):
            return _to_login(request)
        headers = {"WWW-Authenticate": "Bearer"}
    if isinstance(exc, FlowControlError):
        headers = {"Retry-After": str(max(1, int(exc.retry_after_s)))}
    return error_response(request, status, _message(exc), headers)


# Tags of the tagged union of request bodies (one object or a list): the branch taken, not a field.
_BODY_UNION_TAGS = frozenset({"one", "many"})


def _location(loc: tuple) -> str:
    """("body", "many", 1, "keys") -> "body[1].keys"."""
    if len(loc) > 1 and loc[0] == "body" and loc[1] in _BODY_UNION_TAGS:
        loc = (loc[0], *loc[2:])
    parts: list[str] = []
    for part in loc:
        parts.append(f"[{part}]" if isinstance(part, int) else ("." if parts else "") + str(part))
    return "".join(parts)


def validation_message(exc: RequestValidationError) -> tuple[int, str]:
    errors = exc.errors()
    for error in errors:
        if error.get("type") == "json_invalid":
            detail = (error.get("ctx") or {}).get("error") or "not JSON"
            return 400, f"malformed JSON body: {detail}"
    parts = []
    for error in errors[:10]:
        where = _location(tuple(error.get("loc", ())))
        message = str(error.get("msg", "invalid"))
        if error.get("type") == "value_error" and (error.get("ctx") or {}).get("error") is not None:
            message = str(error["ctx"]["error"])  # a validator's own words, without "Value error, "
        parts.append(f"{where}: {message}" if where else message)
    if len(errors) > 10:
        parts.append(f"... and {len(errors) - 10} more")
    return 422, "invalid request: " + "; ".join(parts)


async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
    status, message = validation_message(exc)
    return error_response(request, status, message)


async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
    if exc.status_code == 404 and exc.detail == "Not Found":
        message = f"not found: {request.url.path}"
    elif exc.status_code == 405 and exc.detail == "Method Not Allowed":
        allowed = allowed_methods(request)
        message = f"method {request.method} is not allowed on {request.url.path} (allowed: {', '.join(allowed)})"
        return error_response(request, 405, message, {**(exc.headers or {}), "Allow": ", ".join(allowed)})
    else:
        message = str(exc.detail)
    return error_response(request, exc.status_code, message, exc.headers)


def allowed_methods(request: Request) -> list[str]:
    """Every method some route of the path takes (Starlette's answer names only the first route's)."""
    routes = request.app.router.routes
    return [method for method in PROBED_METHODS
            if any(route.matches({**request.scope, "method": method})[0] == Match.FULL for route in routes)]


class UnexpectedErrorMiddleware:
    """Turns an exception no handler took into a logged, generic 500 (no traceback in the body)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception:
            request = Request(scope)
            log.exception("%s %s failed", request.method, request.url.path)
            if started:
                raise
            await error_response(request, 500, INTERNAL_ERROR_MESSAGE)(scope, receive, send)


# SQLSTATE/SQLite codes of a database that cannot take a write now: (status, Retry-After s, message)
_DISK_FULL = (507, 30, "the operator database's disk is full: the change is not applied; "
                       "writes are refused until space is freed, reads go on")
_BUSY = (503, 1, "the operator database is busy: the change is not applied, retry")


def _database_refusal(exc: DBAPIError) -> tuple[int, int, str] | None:
    """A database error that is the disk's or the load's, not the request's nor a bug."""
    original = exc.orig
    code = getattr(original, "sqlite_errorcode", None)
    if code == sqlite3.SQLITE_FULL:
        return _DISK_FULL
    if code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
        return _BUSY
    sqlstate = getattr(original, "sqlstate", None)  # psycopg
    if sqlstate == "53100":  # disk_full
        return _DISK_FULL
    if sqlstate in ("53300", "57P03", "40P01", "55P03"):  # too many connections, cannot connect now, deadlock, lock
        return _BUSY
    return None


async def _database_error(request: Request, exc: DBAPIError) -> Response:
    refusal = _database_refusal(exc)
    if refusal is None:
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return error_response(request, 500, INTERNAL_ERROR_MESSAGE)
    status, retry_after_s, message = refusal
    log.warning("%s %s refused: %s", request.method, request.url.path, _message(exc.orig or exc))
    return error_response(request, status, message, {"Retry-After": str(retry_after_s)})


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(DBAPIError, _database_error)
    app.add_exception_handler(StoreError, _domain_error)
    app.add_exception_handler(ServiceError, _domain_error)
    app.add_exception_handler(BackendUnavailable, _domain_error)
    app.add_exception_handler(BackendRefused, _domain_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_middleware(UnexpectedErrorMiddleware)
