"""Signing in and out of the console, and who the caller is: GET/POST /login, POST /logout,
GET /api/me."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from app.deps import ClockDep, SessionsDep
from app.pages import RendererDep
from app.roles import GRANTS
from app.schemas import MeResponse
from app.security import SESSION_KEY, current_principal
from app.services import accounts
from app.services.login_limit import LoginLimiter
from app.services.password_checks import PasswordCheckPool
from store.errors import FlowControlError

router = APIRouter(tags=["accounts"])


def safe_next(target: str | None) -> str:
    """Where to go after signing in: a path on this server only (never another site)."""
    if not target or not target.startswith("/") or target.startswith(("//", "/\\")) or len(target) > 2000:
        return "/"
    return target


def _login_page(request: Request, renderer, *, next_url: str, name: str = "", error: str | None = None,
                status: int = 200, headers: dict[str, str] | None = None) -> Response:
    demo = request.app.state.settings.demo
    data = {"next": next_url, "name": name, "error": error, "status": status,
            "demo_users": [(n, r.value) for n, r in accounts.DEMO_USERS.items()] if demo else [],
            "demo_password": accounts.DEMO_PASSWORD if demo else None}
    return renderer.page(request, "auth/login.html", data, status=status, headers=headers)


@router.get("/login", include_in_schema=False)
def login_page(request: Request, renderer: RendererDep, next: str | None = None) -> Response:
    return _login_page(request, renderer, next_url=safe_next(next))


@router.post("/login", include_in_schema=False)
async def login(request: Request, renderer: RendererDep, sessions: SessionsDep, clock: ClockDep,
                name: Annotated[str, Form(max_length=64)], password: Annotated[str, Form(max_length=256)],
                next: Annotated[str, Form(max_length=2000)] = "/") -> Response:
    limiter: LoginLimiter = request.app.state.login_limiter
    checks: PasswordCheckPool = request.app.state.password_checks
    client = request.client.host if request.client else "unknown"
    next_url = safe_next(next)

    def refused(wait_s: int, why: str) -> Response:
        return _login_page(request, renderer, next_url=next_url, name=name, status=429,
                           error=f"{why}: try again in {wait_s} s", headers={"Retry-After": str(wait_s)})

    if wait_s := limiter.retry_after_s(name, client):
        return refused(wait_s, "too many failed sign-ins")
    try:
        async with checks.slot():
            if wait_s := limiter.retry_after_s(name, client):  # failures recorded while this one waited
                return refused(wait_s, "too many failed sign-ins")
            charged_at_ms = limiter.failed(name, client)
            principal = await checks.in_thread(accounts.authenticate, sessions, name, password)
    except FlowControlError as busy:
        return refused(busy.retry_after_s, "too many sign-ins in progress")
    if principal is None:
        return _login_page(request, renderer, next_url=next_url, name=name, status=401,
                           error="wrong user name or password (or the user is disabled)")
    limiter.succeeded(name, client, charged_at_ms)
    ttl_ms = request.app.state.settings.session_ttl_s * 1000
    session_id = await run_in_threadpool(accounts.start_session, sessions, clock, principal.name, ttl_ms)
    request.session.clear()
    request.session[SESSION_KEY] = session_id
    return RedirectResponse(next_url, status_code=303)


@router.post("/logout", include_in_schema=False)
async def logout(request: Request, sessions: SessionsDep) -> Response:
    session_id = request.session.get(SESSION_KEY)
    if session_id:
        await run_in_threadpool(accounts.end_session, sessions, session_id)
        request.app.state.principal_cache.clear()
    request.session.clear()
    return RedirectResponse("/login", status_code=303)


@router.get("/api/me", response_model=MeResponse)
async def me(request: Request) -> MeResponse:
    """Who the credentials of this request belong to, with their role and permissions (anonymous
    without credentials; a bad token is a 401), and a client token's topics and groups."""
    principal = await current_principal(request)
    permissions = sorted(p.value for p in GRANTS[principal.role]) if principal.role else []
    return MeResponse(name=principal.name, role=principal.role.value if principal.role else None,
                      kind=principal.kind, permissions=permissions, topics=_sorted(principal.topics),
                      groups=_sorted(principal.groups))


def _sorted(names: frozenset[str] | None) -> list[str] | None:
    return None if names is None else sorted(names)
