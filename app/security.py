"""Who is asking and may they: credentials to a principal, permissions per route, and the guards
that keep other sites out (a foreign Origin on a state change, a Host name not ours).

Credentials, in order: `Authorization: Bearer <API token>`, then the signed session cookie of a
signed-in browser; without either the visitor is anonymous (the viewer role only when the
anonymous_viewer setting grants it)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool
from starlette.middleware.sessions import SessionMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from app.masking import BodyMask
from app.roles import ANONYMOUS, Permission, Principal, Role, roles_with
from app.services import accounts
from app.services.errors import AuthenticationError, ForbiddenError
from store.clock import Clock

SESSION_COOKIE = "mqlens_session"
SESSION_KEY = "sid"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_BEARER = "bearer "


class PrincipalCache:
    """Credentials checked in the last few seconds, so a burst of requests with one token costs
    one database lookup. Any change to users, tokens or sessions in this server empties it; a
    change made by another server process takes effect within `ttl_s`."""

    def __init__(self, clock: Clock, ttl_ms: int = 5_000, size: int = 10_000):
        self.clock, self.ttl_ms, self.size = clock, ttl_ms, size
        self._found: dict[str, tuple[Principal | None, int]] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> tuple[bool, Principal | None]:
        with self._lock:
            hit = self._found.get(key)
        if hit is None or hit[1] <= self.clock.now_ms():
            return False, None
        return True, hit[0]

    def put(self, key: str, principal: Principal | None) -> None:
        with self._lock:
            if len(self._found) >= self.size:
                self._found.clear()
            self._found[key] = (principal, self.clock.now_ms() + self.ttl_ms)

    def clear(self) -> None:
        with self._lock:
            self._found.clear()


class _AskTheDatabase(Exception):
    """The cache does not know the credentials: resolve again on a worker thread."""


def _lookup(request: Request, key: str, find: Callable[[], Principal | None], ask_db: bool) -> Principal | None:
    cache: PrincipalCache = request.app.state.principal_cache
    known, principal = cache.get(key)
    if not known:
        if not ask_db:
            raise _AskTheDatabase
        principal = find()
        cache.put(key, principal)
    return principal


def _resolve(request: Request, ask_db: bool = True) -> Principal:
    app_state = request.app.state
    settings = app_state.settings
    authorization = request.headers.get("authorization")
    if authorization is not None:
        if not authorization[: len(_BEARER)].lower() == _BEARER:
            raise AuthenticationError("the Authorization header takes an API token: 'Bearer <token>'")
        token = authorization[len(_BEARER):].strip()
        principal = _lookup(request, "t:" + token,
                            lambda: accounts.token_principal(app_state.sessions, app_state.clock, token), ask_db)
        if principal is None:
            raise AuthenticationError("the API token is unknown, revoked or expired, or the user who made it "
                                      "is disabled")
        return principal
    session_id = request.session.get(SESSION_KEY) if "session" in request.scope else None
    if session_id:
        principal = _lookup(request, "s:" + session_id,
                            lambda: accounts.session_principal(app_state.sessions, app_state.clock, session_id),
                            ask_db)
        if principal is not None:
            return principal
        request.session.clear()  # ended, expired or its user disabled: the cookie goes
    return Principal(ANONYMOUS, Role.VIEWER if settings.anonymous_viewer else None, "anonymous")


async def current_principal(request: Request) -> Principal:
    """The request's principal, resolved once per request (in the event loop when the cache
    knows the credentials, else on a worker thread: the database is asked)."""
    cached = getattr(request.state, "principal", None)
    if cached is None:
        try:
            cached = _resolve(request, ask_db=False)
        except _AskTheDatabase:
            cached = await run_in_threadpool(_resolve, request)
        request.state.principal = cached
    return cached


def _refusal(principal: Principal, permission: Permission) -> Exception:
    if principal.role is None:
        return AuthenticationError("sign in first: this needs an account (a signed-in browser, or an API token "
                                   "sent as 'Authorization: Bearer <token>')")
    allowed = " or ".join(role.value for role in roles_with(permission))
    return ForbiddenError(f"{principal.name} ({principal.role.value}) may not do this: it needs the {allowed} role")


# The API token as the OpenAPI document declares it (so /docs offers Authorize); reading and
# checking it is _resolve's work, this only names the scheme on every route that needs a role.
API_TOKEN_SCHEME = HTTPBearer(scheme_name="apiToken", auto_error=False, bearerFormat="mql_...",
                              description="An API token (made by an admin): `Authorization: Bearer <token>`. "
                                          "A signed-in browser's session cookie works too.")
DeclaredToken = Annotated[HTTPAuthorizationCredentials | None, Depends(API_TOKEN_SCHEME)]


def require(permission: Permission) -> Any:
    """A dependency that lets the request through only with `permission`; its value is the principal."""

    async def check(request: Request, _declared: DeclaredToken) -> Principal:
        principal = await current_principal(request)
        if not principal.can(permission):
            raise _refusal(principal, permission)
        return principal

    check.required_permission = permission  # type: ignore[attr-defined]  # read by the route audit test
    return Depends(check)


def required_permission(dependency: Callable) -> Permission | None:
    return getattr(dependency, "required_permission", None)


Reader = Annotated[Principal, require(Permission.READ)]
Resender = Annotated[Principal, require(Permission.RESEND)]
Configurer = Annotated[Principal, require(Permission.CONFIGURE)]
Redriver = Annotated[Principal, require(Permission.REDRIVE)]
JobStarter = Annotated[Principal, require(Permission.REDRIVE)]  # long work: redrive jobs and pipeline runs
Admin = Annotated[Principal, require(Permission.ADMIN)]
READ = require(Permission.READ)


async def _body_mask(request: Request, reader: Reader) -> BodyMask:
    state = request.app.state
    return BodyMask(state.sessions, state.clock, reader)


# What of the message bodies in an answer the caller sees: by role, or a recent audited reveal (app.masking).
Masking = Annotated[BodyMask, Depends(_body_mask)]
MESSAGING = require(Permission.MESSAGING)
Messenger = Annotated[Principal, MESSAGING]  # produce and consume (a client token within its scope)


class SessionCookieMiddleware:
    """Starlette's signed-cookie sessions, made on the first request: the signing key lives in
    the operator database, which the lifespan opens after the app is built."""

    def __init__(self, app: ASGIApp):
        self.app = app
        self._sessions: SessionMiddleware | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        if self._sessions is None:
            state = scope["app"].state
            settings = state.settings
            self._sessions = SessionMiddleware(self.app, secret_key=state.session_secret,
                                               session_cookie=SESSION_COOKIE, max_age=settings.session_ttl_s,
                                               same_site="lax", https_only=settings.secure_cookies)
        await self._sessions(scope, receive, send)


def _host_of(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"host":
            return value.decode("latin-1").lower()
    return None


def _same_host(origin: str, scope: Scope) -> bool:
    """The Origin names this server's Host (its scheme is not compared: a TLS proxy in front
    of the server changes it, and the host is what another site cannot forge)."""
    _, sep, netloc = origin.lower().rstrip("/").partition("://")
    return bool(sep) and netloc == _host_of(scope)


class CrossOriginGuardMiddleware:
    """Refuses a state change that another site started: an unsafe method whose Sec-Fetch-Site
    says cross-site or same-site, or whose Origin is not this server's. A plain HTML form, a
    `no-cors` fetch and `sendBeacon` from another origin all carry these headers; scripts with
    API tokens send neither, and pass."""

    def __init__(self, app: ASGIApp, refuse: Callable[[Scope, str], Any]):
        self.app = app
        self.refuse = refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] not in SAFE_METHODS:
            headers = {name: value.decode("latin-1") for name, value in scope.get("headers", ())
                       if name in (b"origin", b"sec-fetch-site")}
            fetch_site = headers.get(b"sec-fetch-site", "").lower()
            origin = headers.get(b"origin")
            if fetch_site in ("cross-site", "same-site"):
                await self.refuse(scope, f"refused: a {fetch_site} request may not change anything here")(
                    scope, receive, send)
                return
            if origin is not None and not _same_host(origin, scope):
                await self.refuse(scope, f"refused: a request from {origin[:100]} may not change anything here")(
                    scope, receive, send)
                return
        await self.app(scope, receive, send)
