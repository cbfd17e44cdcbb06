"""Who may do what: roles and the permissions each grants.

viewer < support < operator < admin each add to the one before; client is apart: a script that
produces and consumes through the REST messaging API and reads nothing else."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Permission(StrEnum):
    READ = "read"  # every page and lookup (bodies masked unless READ_BODIES or revealed)
    READ_BODIES = "read_bodies"  # bodies shown without a reveal
    RESEND = "resend"  # resend single or selected dead letters, up to a per-action limit
    # long work (redrive jobs, pipeline runs), resends beyond the per-action limit, edits before a resend
    REDRIVE = "redrive"
    CONFIGURE = "configure"  # delay levels, group settings, offset resets, topics
    MESSAGING = "messaging"  # produce, receive, ack, nack, commit offsets
    ADMIN = "admin"  # users and tokens


class Role(StrEnum):
    VIEWER = "viewer"
    SUPPORT = "support"
    OPERATOR = "operator"
    ADMIN = "admin"
    CLIENT = "client"


_VIEWER = frozenset({Permission.READ})
_SUPPORT = _VIEWER | {Permission.READ_BODIES, Permission.RESEND}
_OPERATOR = _SUPPORT | {Permission.REDRIVE, Permission.CONFIGURE, Permission.MESSAGING}

GRANTS: dict[Role, frozenset[Permission]] = {
    Role.VIEWER: _VIEWER,
    Role.SUPPORT: _SUPPORT,
    Role.OPERATOR: _OPERATOR,
    Role.ADMIN: _OPERATOR | {Permission.ADMIN},
    Role.CLIENT: frozenset({Permission.MESSAGING}),
}

ROLE_NAMES = tuple(role.value for role in Role)


def grants(role: Role, permission: Permission) -> bool:
    return permission in GRANTS[role]


def roles_with(permission: Permission) -> list[Role]:
    """The roles that grant `permission`, for error messages ("needs the support, operator or admin role")."""
    return [role for role in Role if permission in GRANTS[role]]


def parse_role(name: str) -> Role:
    try:
        return Role(name.strip().lower())
    except ValueError:
        raise ValueError(f"unknown role {name[:40]!r}: use one of {', '.join(ROLE_NAMES)}") from None


@dataclass(frozen=True)
class Principal:
    """Who makes a request: a signed-in user, a token's name, or an anonymous visitor."""

    name: str
    role: Role | None  # None: no role at all (anonymous, not granted the viewer role)
    kind: str  # "user" | "token" | "anonymous" | "system"
    topics: frozenset[str] | None = None  # a client token's scope: the topics it may use (None: any)
    groups: frozenset[str] | None = None  # ... and the consumer groups (None: any)

    def can(self, permission: Permission) -> bool:
        return self.role is not None and grants(self.role, permission)


ANONYMOUS = "anonymous"
SYSTEM = Principal("mqlens", Role.ADMIN, "system")  # the server itself (start-up settling, the demo)
