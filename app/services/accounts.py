"""Users, API tokens and browser sessions.

Passwords are hashed with Argon2id (argon2-cffi). Tokens and session ids are random values of
256 bits handed out once; only their SHA-256 is stored, so the database alone cannot sign
anybody in. Every change is an audit row in the same transaction."""

from __future__ import annotations

import functools
import hashlib
import json
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from app.models import ApiToken, LoginSession, ServerSecret, User
from app.roles import SYSTEM, Principal, Role, parse_role
from app.services import audit
from app.services.errors import ConflictError, InvalidRequestError, NotFoundError
from store.broker.metadata import consuming_group
from store.clock import Clock
from store.format import topics as topic_rules

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
MIN_PASSWORD = 10
MAX_PASSWORD = 256  # Argon2 takes any length; the bound keeps a hostile request from costing much
TOKEN_PREFIX = "mql_"
BOOTSTRAP_TOKEN_NAME = "bootstrap-admin"
FIRST_ADMIN_NAME = "admin"
SESSION_SECRET = "session_signing_key"

ADD_USER, UPDATE_USER = "add_user", "update_user"
CREATE_TOKEN, REVOKE_TOKEN = "create_token", "revoke_token"

DEMO_PASSWORD = "demo-password"
DEMO_USERS = {f"demo-{role.value}": role for role in (Role.VIEWER, Role.SUPPORT, Role.OPERATOR, Role.ADMIN)}


@functools.cache
def _hasher() -> PasswordHasher:
    return PasswordHasher()  # Argon2id with the library's current recommended cost


@functools.cache
def _unknown_user_hash() -> str:
    """A hash of nothing anyone knows: a login for an unknown name costs as much as one for a known name."""
    return _hasher().hash(secrets.token_urlsafe(16))


def _sha256(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


def checked_name(name: str, what: str = "user name") -> str:
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise InvalidRequestError(f"a {what} has 1 to 64 letters, digits or . _ @ - and starts with a letter or digit")
    return name


def checked_password(password: str) -> str:
    if not isinstance(password, str) or not MIN_PASSWORD <= len(password) <= MAX_PASSWORD:
        raise InvalidRequestError(f"a password has {MIN_PASSWORD} to {MAX_PASSWORD} characters")
    return password


def _role(role: str | Role) -> Role:
    try:
        return parse_role(role) if isinstance(role, str) else role
    except ValueError as exc:
        raise InvalidRequestError(str(exc)) from None


@dataclass(frozen=True)
class UserView:
    name: str
    role: str
    created_at_ms: int
    disabled: bool


@dataclass(frozen=True)
class TokenView:
    id: int
    name: str
    role: str
    created_at_ms: int
    created_by: str
    expires_at_ms: int | None
    revoked_at_ms: int | None
    topics: list[str] | None = None  # a client token's scopes (None: any)
    groups: list[str] | None = None


def _user_view(user: User) -> UserView:
    return UserView(user.name, user.role, user.created_at_ms, user.disabled)


def _token_view(token: ApiToken) -> TokenView:
    return TokenView(token.id, token.name, token.role, token.created_at_ms, token.created_by, token.expires_at_ms,
                     token.revoked_at_ms, _names(token.topics), _names(token.groups))


def _names(stored: str | None) -> list[str] | None:
    return None if stored is None else json.loads(stored)


MAX_SCOPE_NAMES = 100


def checked_scope(names: list[str] | None, role: Role, what: str, check: Callable[[str], object]) -> str | None:
    """A client token's list of topics or groups, as stored (JSON), or None for any."""
    if names is not None and role is not Role.CLIENT:
        raise InvalidRequestError(f"{what} limit client tokens only: a {role.value} token uses every {what[:-1]}")
    return checked_names(names, what, check)


def checked_names(names: list[str] | None, what: str, check: Callable[[str], object]) -> str | None:
    """A limit to some topics or groups (each passed to `check`), as stored (JSON), or None for any."""
    if names is None:
        return None
    wanted = list(dict.fromkeys(names))
    if not 1 <= len(wanted) <= MAX_SCOPE_NAMES:
        raise InvalidRequestError(f"name at least one and at most {MAX_SCOPE_NAMES} {what} (or leave {what} out: "
                                  "any)")
    for name in wanted:
        check(name)
    return json.dumps(wanted)


# -- users -------------------------------------------------------------------------------------
def add_user(sessions: sessionmaker[Session], clock: Clock, name: str, password: str, role: str | Role, *,
             actor: Principal) -> UserView:
    name, role = checked_name(name), _role(role)
    password_hash = _hasher().hash(checked_password(password))
    try:
        with sessions.begin() as s:
            user = User(name=name, password_hash=password_hash, role=role.value, created_at_ms=clock.now_ms(),
                        disabled=False)
            s.add(user)
            audit.record(s, clock, actor=actor, action=ADD_USER, target=f"user:{name}",
                         detail={"after": {"role": role.value}})
    except IntegrityError:
        raise ConflictError(f"a user named {name} exists already") from None
    return _user_view(user)


def update_user(sessions: sessionmaker[Session], clock: Clock, name: str, *, actor: Principal,
                role: str | Role | None = None, password: str | None = None, disabled: bool | None = None) -> UserView:
    """Change a user's role, password or disabled flag; a disabled user's sessions end at once."""
    new_role = _role(role) if role is not None else None
    new_hash = _hasher().hash(checked_password(password)) if password is not None else None
    with sessions.begin() as s:
        user = s.scalars(select(User).where(User.name == name)).first()
        if user is None:
            raise NotFoundError(f"no user named {name[:64]}")
        before = {"role": user.role, "disabled": user.disabled}
        if new_role is not None:
            user.role = new_role.value
        if disabled is not None:
            user.disabled = disabled
        if new_hash is not None:
            user.password_hash = new_hash
        if user.disabled or new_hash is not None:
            s.execute(delete(LoginSession).where(LoginSession.user_id == user.id))
        after = {"role": user.role, "disabled": user.disabled}
        audit.record(s, clock, actor=actor, action=UPDATE_USER, target=f"user:{name}",
                     detail={"before": before, "after": after, "password_changed": new_hash is not None})
        return _user_view(user)


def list_users(sessions: sessionmaker[Session]) -> list[UserView]:
    with sessions() as s:
        return [_user_view(u) for u in s.scalars(select(User).order_by(User.name))]


def has_users(sessions: sessionmaker[Session]) -> bool:
    with sessions() as s:
        return s.scalars(select(User.id).limit(1)).first() is not None


def authenticate(sessions: sessionmaker[Session], name: str, password: str) -> Principal | None:
    """The user whose name and password these are, or None (wrong, unknown or disabled)."""
    if not isinstance(name, str) or not isinstance(password, str) or len(password) > MAX_PASSWORD or len(name) > 64:
        return None
    with sessions() as s:
        user = s.scalars(select(User).where(User.name == name)).first()
        stored = user.password_hash if user is not None else _unknown_user_hash()
        try:
            _hasher().verify(stored, password)
        except (VerificationError, InvalidHashError):
            return None
        if user is None or user.disabled:
            return None
        principal = Principal(user.name, Role(user.role), "user")
        needs_rehash = _hasher().check_needs_rehash(stored)
    if needs_rehash:
        with sessions.begin() as s:
            fresh = s.scalars(select(User).where(User.name == name)).first()
            if fresh is not None:
                fresh.password_hash = _hasher().hash(password)
    return principal


def ensure_first_admin(sessions: sessionmaker[Session], clock: Clock, password: str | None) -> str | None:
    """On a database without users: the first admin, with `password` or a generated one
    (returned, to be shown once). None when users exist already."""
    if has_users(sessions):
        return None
    chosen = password or secrets.token_urlsafe(15)
    try:
        add_user(sessions, clock, FIRST_ADMIN_NAME, chosen, Role.ADMIN, actor=SYSTEM)
    except ConflictError:
        return None
    return chosen


def ensure_demo_users(sessions: sessionmaker[Session], clock: Clock) -> list[str]:
    """The demo's users, one per role, all with DEMO_PASSWORD; returns the names made now."""
    made = []
    with sessions() as s:
        existing = set(s.scalars(select(User.name).where(User.name.in_(DEMO_USERS))))
    for name, role in DEMO_USERS.items():
        if name not in existing:
            try:
                add_user(sessions, clock, name, DEMO_PASSWORD, role, actor=SYSTEM)
                made.append(name)
            except ConflictError:
                pass
    return made


# -- browser sessions --------------------------------------------------------------------------
def start_session(sessions: sessionmaker[Session], clock: Clock, user_name: str, ttl_ms: int) -> str:
    """A new signed-in session for the user; returns its id (goes into the signed cookie)."""
    session_id = secrets.token_urlsafe(32)
    now = clock.now_ms()
    with sessions.begin() as s:
        user = s.scalars(select(User).where(User.name == user_name)).one()
        s.execute(delete(LoginSession).where(LoginSession.user_id == user.id, LoginSession.expires_at_ms <= now))
        s.add(LoginSession(session_sha256=_sha256(session_id), user_id=user.id, created_at_ms=now,
                           expires_at_ms=now + ttl_ms))
    return session_id


def session_principal(sessions: sessionmaker[Session], clock: Clock, session_id: str) -> Principal | None:
    """The user signed in with this session id, while the session lasts and the user is enabled."""
    if not isinstance(session_id, str) or len(session_id) > 128:
        return None
    with sessions() as s:
        row = s.execute(select(User.name, User.role, User.disabled, LoginSession.expires_at_ms)
                        .join(LoginSession, LoginSession.user_id == User.id)
                        .where(LoginSession.session_sha256 == _sha256(session_id))).first()
    if row is None or row.disabled or row.expires_at_ms <= clock.now_ms():
        return None
    return Principal(row.name, Role(row.role), "user")


def end_session(sessions: sessionmaker[Session], session_id: str) -> None:
    with sessions.begin() as s:
        s.execute(delete(LoginSession).where(LoginSession.session_sha256 == _sha256(session_id)))


# -- API tokens --------------------------------------------------------------------------------
def create_token(sessions: sessionmaker[Session], clock: Clock, name: str, role: str | Role, *, actor: Principal,
                 expires_at_ms: int | None = None, topics: list[str] | None = None,
                 groups: list[str] | None = None) -> tuple[TokenView, str]:
    """A new token; returns it with its value, which is shown this once and never again. A client
    token may be limited to some topics and consumer groups."""
    name, role = checked_name(name, "token name"), _role(role)
    topic_scope = checked_scope(topics, role, "topics", topic_rules.validate_topic)
    group_scope = checked_scope(groups, role, "groups", consuming_group)
    now = clock.now_ms()
    if expires_at_ms is not None and expires_at_ms <= now:
        raise InvalidRequestError("a token's expiry must be in the future")
    value = TOKEN_PREFIX + secrets.token_urlsafe(32)
    try:
        with sessions.begin() as s:
            token = ApiToken(name=name, token_sha256=_sha256(value), role=role.value, created_at_ms=now,
                             created_by=actor.name, expires_at_ms=expires_at_ms, topics=topic_scope,
                             groups=group_scope)
            s.add(token)
            s.flush()
            audit.record(s, clock, actor=actor, action=CREATE_TOKEN, target=f"token:{name}",
                         detail={"after": {"role": role.value, "expires_at_ms": expires_at_ms,
                                           "topics": _names(topic_scope), "groups": _names(group_scope)}})
            view = _token_view(token)
    except IntegrityError:
        raise ConflictError(f"a token named {name} exists already") from None
    return view, value


def revoke_token(sessions: sessionmaker[Session], clock: Clock, token_id: int, *, actor: Principal) -> TokenView:
    with sessions.begin() as s:
        token = s.get(ApiToken, token_id)
        if token is None:
            raise NotFoundError(f"no token with id {token_id}")
        if token.revoked_at_ms is None:
            token.revoked_at_ms = clock.now_ms()
            audit.record(s, clock, actor=actor, action=REVOKE_TOKEN, target=f"token:{token.name}",
                         detail={"before": {"role": token.role}})
        return _token_view(token)


def list_tokens(sessions: sessionmaker[Session]) -> list[TokenView]:
    with sessions() as s:
        return [_token_view(t) for t in s.scalars(select(ApiToken).order_by(ApiToken.id))]


def token_principal(sessions: sessionmaker[Session], clock: Clock, value: str) -> Principal | None:
    """The token's name and role, while it is neither revoked nor expired and its maker's account
    is not disabled."""
    if not isinstance(value, str) or not 8 <= len(value) <= 256:
        return None
    now = clock.now_ms()
    with sessions() as s:
        token = s.scalars(select(ApiToken).where(ApiToken.token_sha256 == _sha256(value))).first()
        if token is None or token.revoked_at_ms is not None:
            return None
        if token.expires_at_ms is not None and token.expires_at_ms <= now:
            return None
        if _made_by_disabled_user(s, token.created_by):
            return None
        return Principal(token.name, Role(token.role), "token", _scope(token.topics), _scope(token.groups))


def _scope(stored: str | None) -> frozenset[str] | None:
    return None if stored is None else frozenset(json.loads(stored))


MAX_MAKER_CHAIN = 16


def _made_by_disabled_user(s: Session, maker: str) -> bool:
    """A disabled user made the token, directly or through tokens made with its tokens: the
    user's tokens stop with the user (and work again when the user is enabled again)."""
    seen: set[str] = set()
    while maker not in seen and len(seen) < MAX_MAKER_CHAIN:
        seen.add(maker)
        disabled = s.scalars(select(User.disabled).where(User.name == maker)).first()
        if disabled is not None:
            return disabled
        parent = s.scalars(select(ApiToken.created_by).where(ApiToken.name == maker)).first()
        if parent is None:
            return False
        maker = parent
    return False


def ensure_bootstrap_token(sessions: sessionmaker[Session], clock: Clock, value: str) -> None:
    """The admin token named bootstrap-admin has this value (created, or refreshed and un-revoked)."""
    if len(value) < 16:
        raise InvalidRequestError("MQLENS_BOOTSTRAP_ADMIN_TOKEN needs at least 16 characters")
    digest = _sha256(value)
    with sessions.begin() as s:
        token = s.scalars(select(ApiToken).where(ApiToken.name == BOOTSTRAP_TOKEN_NAME)).first()
        if token is None:
            s.add(ApiToken(name=BOOTSTRAP_TOKEN_NAME, token_sha256=digest, role=Role.ADMIN.value,
                           created_at_ms=clock.now_ms(), created_by=SYSTEM.name))
            audit.record(s, clock, actor=SYSTEM, action=CREATE_TOKEN, target=f"token:{BOOTSTRAP_TOKEN_NAME}",
                         detail={"after": {"role": Role.ADMIN.value}, "from": "MQLENS_BOOTSTRAP_ADMIN_TOKEN"})
        elif token.token_sha256 != digest or token.revoked_at_ms is not None or token.role != Role.ADMIN.value:
            token.token_sha256, token.revoked_at_ms, token.role = digest, None, Role.ADMIN.value
            token.expires_at_ms = None
            audit.record(s, clock, actor=SYSTEM, action=CREATE_TOKEN, target=f"token:{BOOTSTRAP_TOKEN_NAME}",
                         detail={"after": {"role": Role.ADMIN.value}, "from": "MQLENS_BOOTSTRAP_ADMIN_TOKEN",
                                 "refreshed": True})


# -- the server's own secrets ------------------------------------------------------------------
def server_secret(sessions: sessionmaker[Session], name: str = SESSION_SECRET) -> str:
    """A secret made once and kept in the database (so every restart signs cookies alike)."""
    with sessions() as s:
        row = s.get(ServerSecret, name)
        if row is not None:
            return row.value
    try:
        with sessions.begin() as s:
            s.add(ServerSecret(name=name, value=secrets.token_urlsafe(48)))
    except IntegrityError:
        pass  # another server made it first
    with sessions() as s:
        return s.get_one(ServerSecret, name).value
