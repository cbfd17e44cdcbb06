"""Client credentials: the access keys and secrets the official RocketMQ 5 clients sign their gRPC
calls with (`Credentials(ak, sk)` in the client's configuration).

An admin makes one for a service with a role (producer, consumer or both) and, if wanted, the
topics and consumer groups it is limited to; its secret is shown that once, and kept encrypted
with the server key (app/services/client_secret_key.py). A credential is revoked, never deleted.
Every change is an audit row in the same transaction; the secret is in none of them."""

from __future__ import annotations

import base64
import json
import secrets
from dataclasses import dataclass
from enum import StrEnum

from sqlalchemy import bindparam, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from app.models import ClientCredential
from app.roles import Principal
from app.services import audit
from app.services.accounts import checked_names
from app.services.client_secret_key import SecretCipher
from app.services.errors import ConflictError, InvalidRequestError, NotFoundError
from store.broker.metadata import consuming_group
from store.clock import Clock
from store.format import topics as topic_rules

CREATE_CLIENT_CREDENTIAL, REVOKE_CLIENT_CREDENTIAL = "create_client_credential", "revoke_client_credential"
ACCESS_KEY_PREFIX = "AK"
ACCESS_KEY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"  # what an access key may look like (ours: AK + base32)
MAX_DESCRIPTION = 200


class ClientRole(StrEnum):
    PRODUCER = "producer"
    CONSUMER = "consumer"
    BOTH = "both"

    @property
    def can_produce(self) -> bool:
        return self is not ClientRole.CONSUMER

    @property
    def can_consume(self) -> bool:
        return self is not ClientRole.PRODUCER


CLIENT_ROLE_NAMES = tuple(role.value for role in ClientRole)


@dataclass(frozen=True)
class CredentialView:
    """A credential as it is listed: never its secret."""

    access_key: str
    role: str
    topics: list[str] | None  # the topics it may use (None: any)
    groups: list[str] | None  # the consumer groups it may consume as (None: any)
    description: str | None
    created_at_ms: int
    created_by: str
    revoked_at_ms: int | None
    last_used_at_ms: int | None  # to the minute


@dataclass(frozen=True)
class StoredCredential:
    """A credential as the verifier loads it: its secret still encrypted."""

    access_key: str
    secret_encrypted: str
    role: ClientRole
    topics: frozenset[str] | None
    groups: frozenset[str] | None
    revoked: bool


def _listed(stored: str | None) -> list[str] | None:
    return None if stored is None else json.loads(stored)


def _view(row: ClientCredential) -> CredentialView:
    return CredentialView(row.access_key, row.role, _listed(row.topics), _listed(row.groups), row.description,
                          row.created_at_ms, row.created_by, row.revoked_at_ms, row.last_used_at_ms)


def _role(role: str | ClientRole) -> ClientRole:
    try:
        return ClientRole(role.strip().lower()) if isinstance(role, str) else role
    except ValueError:
        raise InvalidRequestError(f"unknown client role {role[:40]!r}: use one of "
                                  f"{', '.join(CLIENT_ROLE_NAMES)}") from None


def _description(text: str | None) -> str | None:
    if text is None or not text.strip():
        return None
    if len(text) > MAX_DESCRIPTION or not text.isprintable():
        raise InvalidRequestError(f"a description is one line of at most {MAX_DESCRIPTION} characters")
    return text.strip()


def new_access_key() -> str:
    return ACCESS_KEY_PREFIX + base64.b32encode(secrets.token_bytes(15)).decode("ascii")  # 120 bits, 24 letters


def new_secret() -> str:
    return secrets.token_urlsafe(30)  # 240 bits


def create_credential(sessions: sessionmaker[Session], clock: Clock, cipher: SecretCipher, role: str | ClientRole,
                      *, actor: Principal, topics: list[str] | None = None, groups: list[str] | None = None,
                      description: str | None = None) -> tuple[CredentialView, str]:
    """A new credential; returns it with its secret, which is shown this once and never again."""
    role = _role(role)
    if groups is not None and not role.can_consume:
        raise InvalidRequestError("groups limit consumers only: a producer credential consumes as no group")
    topic_limit = checked_names(topics, "topics", topic_rules.validate_topic)
    group_limit = checked_names(groups, "groups", consuming_group)
    description = _description(description)
    secret = new_secret()
    try:
        with sessions.begin() as s:
            row = ClientCredential(access_key=new_access_key(), secret_encrypted=cipher.encrypt(secret),
                                   role=role.value, topics=topic_limit, groups=group_limit, description=description,
                                   created_at_ms=clock.now_ms(), created_by=actor.name)
            s.add(row)
            s.flush()
            audit.record(s, clock, actor=actor, action=CREATE_CLIENT_CREDENTIAL, target=f"client:{row.access_key}",
                         detail={"after": {"role": role.value, "topics": _listed(topic_limit),
                                           "groups": _listed(group_limit), "description": description}})
            view = _view(row)
    except IntegrityError:  # two new access keys alike: 120 random bits make it unheard of
        raise ConflictError("a credential with the same access key was made at the same time; retry") from None
    return view, secret


def list_credentials(sessions: sessionmaker[Session]) -> list[CredentialView]:
    """Every credential, the active ones first, newest first."""
    with sessions() as s:
        rows = s.scalars(select(ClientCredential).order_by(ClientCredential.revoked_at_ms.is_not(None),
                                                           ClientCredential.id.desc()))
        return [_view(row) for row in rows]


def revoke_credential(sessions: sessionmaker[Session], clock: Clock, access_key: str, *,
                      actor: Principal) -> CredentialView:
    """Revoke a credential: its calls are refused from now on (this server: at once; others: within
    the verifier's refresh). Revoking it again changes nothing."""
    with sessions.begin() as s:
        row = s.scalars(select(ClientCredential).where(ClientCredential.access_key == access_key)).first()
        if row is None:
            raise NotFoundError(f"no client credential with access key {access_key[:64]}")
        if row.revoked_at_ms is None:
            row.revoked_at_ms = clock.now_ms()
            audit.record(s, clock, actor=actor, action=REVOKE_CLIENT_CREDENTIAL, target=f"client:{access_key}",
                         detail={"before": {"role": row.role, "topics": _listed(row.topics),
                                            "groups": _listed(row.groups)}})
        return _view(row)


def _limit(stored: str | None) -> frozenset[str] | None:
    return None if stored is None else frozenset(json.loads(stored))


def stored_credentials(sessions: sessionmaker[Session]) -> list[StoredCredential]:
    """Every credential, for the verifier (the revoked ones without their secret)."""
    with sessions() as s:
        rows = s.execute(select(ClientCredential.access_key, ClientCredential.secret_encrypted, ClientCredential.role,
                                ClientCredential.topics, ClientCredential.groups, ClientCredential.revoked_at_ms))
        return [StoredCredential(row.access_key, row.secret_encrypted if row.revoked_at_ms is None else "",
                                 ClientRole(row.role), _limit(row.topics), _limit(row.groups),
                                 row.revoked_at_ms is not None) for row in rows]


def any_stored(sessions: sessionmaker[Session]) -> bool:
    with sessions() as s:
        return s.scalars(select(ClientCredential.id).limit(1)).first() is not None


def check_key(sessions: sessionmaker[Session], cipher: SecretCipher) -> None:
    """Raises SecretKeyError when an active credential's secret cannot be decrypted with `cipher`."""
    for credential in stored_credentials(sessions):
        if not credential.revoked:
            cipher.decrypt(credential.secret_encrypted)


def record_uses(sessions: sessionmaker[Session], last_used_ms: dict[str, int]) -> None:
    """When each of these access keys was last used, in one transaction."""
    if not last_used_ms:
        return
    table = ClientCredential.__table__
    statement = (update(table).where(table.c.access_key == bindparam("key"))
                 .values(last_used_at_ms=bindparam("used_ms")))
    with sessions.begin() as s:
        s.execute(statement, [{"key": key, "used_ms": used_ms} for key, used_ms in last_used_ms.items()])
