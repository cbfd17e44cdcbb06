"""Users and API tokens (the admin role): /api/users and /api/tokens."""

from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter, Path, Request, Response
from starlette.concurrency import run_in_threadpool

from app.deps import ClockDep, SessionsDep
from app.headers import NO_STORE
from app.routes import error_responses
from app.schemas import (
    TokenCreate,
    TokenCreated,
    TokenOut,
    TokenResponse,
    TokensResponse,
    UserCreate,
    UserOut,
    UserResponse,
    UsersResponse,
    UserUpdate,
)
from app.security import Admin
from app.services import accounts

router = APIRouter(tags=["accounts"])


@router.get("/api/users", response_model=UsersResponse, responses=error_responses())
def list_users(sessions: SessionsDep, _: Admin) -> UsersResponse:
    return UsersResponse(users=[UserOut(**asdict(u)) for u in accounts.list_users(sessions)])


@router.post("/api/users", response_model=UserResponse, status_code=201, responses=error_responses(400, 409, 422))
async def add_user(body: UserCreate, sessions: SessionsDep, clock: ClockDep, actor: Admin) -> UserResponse:
    """Add a user who signs in to the console with this password."""
    user = await run_in_threadpool(accounts.add_user, sessions, clock, body.name, body.password, body.role,
                                   actor=actor)
    return UserResponse(user=UserOut(**asdict(user)))


@router.patch("/api/users/{name}", response_model=UserResponse, responses=error_responses(400, 404, 422))
async def update_user(name: str, body: UserUpdate, request: Request, sessions: SessionsDep, clock: ClockDep,
                      actor: Admin) -> UserResponse:
    """Change a user's role or password, or disable the user (their sessions end at once)."""
    user = await run_in_threadpool(lambda: accounts.update_user(sessions, clock, name, actor=actor, role=body.role,
                                                                password=body.password, disabled=body.disabled))
    request.app.state.principal_cache.clear()  # a new role, or a user disabled: at once
    return UserResponse(user=UserOut(**asdict(user)))


@router.get("/api/tokens", response_model=TokensResponse, responses=error_responses())
def list_tokens(sessions: SessionsDep, _: Admin) -> TokensResponse:
    return TokensResponse(tokens=[TokenOut(**asdict(t)) for t in accounts.list_tokens(sessions)])


@router.post("/api/tokens", response_model=TokenCreated, status_code=201, responses=error_responses(400, 409, 422))
def create_token(body: TokenCreate, response: Response, sessions: SessionsDep, clock: ClockDep,
                 actor: Admin) -> TokenCreated:
    """A new API token for a script, sent as `Authorization: Bearer <value>`. Its value is in
    this answer only; the server keeps just its hash. The token's name is the actor recorded
    for what it does. A client token may be limited to some `topics` and `groups`."""
    token, value = accounts.create_token(sessions, clock, body.name, body.role, actor=actor,
                                         expires_at_ms=body.expires_at_ms, topics=body.topics, groups=body.groups)
    response.headers["Cache-Control"] = NO_STORE
    return TokenCreated(token=TokenOut(**asdict(token)), value=value)


@router.delete("/api/tokens/{token_id}", response_model=TokenResponse, responses=error_responses(404, 422))
def revoke_token(request: Request, token_id: int = Path(ge=1, le=2**31), *, sessions: SessionsDep, clock: ClockDep,
                 actor: Admin) -> TokenResponse:
    """Revoke a token: it is refused from now on (kept in the list, with when)."""
    revoked = accounts.revoke_token(sessions, clock, token_id, actor=actor)
    request.app.state.principal_cache.clear()
    return TokenResponse(token=TokenOut(**asdict(revoked)))
