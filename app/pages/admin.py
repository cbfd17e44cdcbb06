"""The admin page: users (add, change role, disable, set a password) and API tokens (create, shown
once; revoke)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Form, Path, Request
from fastapi.responses import RedirectResponse

from app.deps import ClockDep, SessionsDep
from app.headers import NO_STORE
from app.pages import RendererDep
from app.pages.params import optional_int
from app.roles import ROLE_NAMES
from app.security import Admin
from app.services import accounts

router = APIRouter(include_in_schema=False)
DAY_MS = 86_400_000
SCOPE_TEXT_MAX = 13_000  # 100 names of 127 bytes, with separators


def name_list(text: str | None) -> list[str] | None:
    """Names typed apart by spaces or commas; none typed: no limit."""
    names = (text or "").replace(",", " ").split()
    return names or None


def _page_data(sessions) -> dict:
    return {"nav": "admin", "users": [asdict(u) for u in accounts.list_users(sessions)],
            "tokens": [asdict(t) for t in accounts.list_tokens(sessions)], "roles": ROLE_NAMES, "new_token": None}


@router.get("/admin")
def admin_page(request: Request, sessions: SessionsDep, renderer: RendererDep, _: Admin):
    return renderer.page(request, "admin/admin.html", _page_data(sessions))


@router.post("/admin/users")
def add_user(sessions: SessionsDep, clock: ClockDep, actor: Admin, name: Annotated[str, Form(max_length=64)],
             role: Annotated[str, Form(max_length=16)], password: Annotated[str, Form(max_length=256)]):
    accounts.add_user(sessions, clock, name, password, role, actor=actor)
    return RedirectResponse("/admin", status_code=303)


@router.post("/admin/users/{name}")
def update_user(name: Annotated[str, Path(max_length=64)], request: Request, sessions: SessionsDep, clock: ClockDep,
                actor: Admin, role: Annotated[str | None, Form(max_length=16)] = None,
                disabled: Annotated[bool | None, Form()] = None,
                password: Annotated[str | None, Form(max_length=256)] = None):
    accounts.update_user(sessions, clock, name, actor=actor, role=role or None, disabled=disabled,
                         password=password or None)
    request.app.state.principal_cache.clear()
    return RedirectResponse("/admin", status_code=303)


@router.post("/admin/tokens")
def create_token(request: Request, sessions: SessionsDep, clock: ClockDep, renderer: RendererDep, actor: Admin,
                 name: Annotated[str, Form(max_length=64)], role: Annotated[str, Form(max_length=16)],
                 expires_in_days: Annotated[str | None, Form(max_length=6)] = None,
                 topics: Annotated[str | None, Form(max_length=SCOPE_TEXT_MAX)] = None,
                 groups: Annotated[str | None, Form(max_length=SCOPE_TEXT_MAX)] = None):
    days = optional_int(expires_in_days, "Expires in days", low=1, high=3650)
    token, value = accounts.create_token(sessions, clock, name, role, actor=actor,
                                         expires_at_ms=clock.now_ms() + days * DAY_MS if days else None,
                                         topics=name_list(topics), groups=name_list(groups))
    return renderer.page(request, "admin/admin.html", {**_page_data(sessions),
                                                      "new_token": {"name": token.name, "value": value}},
                         headers={"Cache-Control": NO_STORE})  # the value is shown this once


@router.post("/admin/tokens/{token_id}/revoke")
def revoke_token(token_id: Annotated[int, Path(ge=1, le=2**31)], request: Request, sessions: SessionsDep,
                 clock: ClockDep, actor: Admin):
    accounts.revoke_token(sessions, clock, token_id, actor=actor)
    request.app.state.principal_cache.clear()
    return RedirectResponse("/admin", status_code=303)
