"""Consumer groups: their settings, and creating or changing one."""

from __future__ import annotations

from dataclasses import asdict

from sqlalchemy.orm import Session, sessionmaker

from app.models import AuditEntry
from app.roles import Principal
from app.services import audit
from app.services.errors import ConflictError
from backend.embedded import EmbeddedBackend
from backend.protocol import Backend, GroupView
from store.clock import Clock
from store.message_store import MessageStore

UPDATE_GROUP = "update_group"


def list_groups(backend: Backend) -> list[GroupView]:
    """The groups set up, by name (on a live cluster: every master broker's, merged)."""
    return backend.list_groups()


def get_group(store: MessageStore, name: str) -> GroupView:
    """A group's settings; one nobody configured has the defaults (configured: false)."""
    return EmbeddedBackend(store).get_group(name)


def put_group(store: MessageStore, sessions: sessionmaker[Session], clock: Clock, name: str, *, actor: Principal,
              reason: str | None = None, expected_version: str | None = None, **changes) -> GroupView:
    """Create or change a group: unset (None) settings keep their value. Audited with the
    settings before and after. With `expected_version`, settings changed since are refused (409)."""
    changed = {k: v for k, v in changes.items() if v is not None}
    before = get_group(store, name)  # checks the name
    if expected_version is not None and expected_version != before.version:
        raise ConflictError(f"group {name}'s settings changed since version {expected_version[:20]}: now "
                            f"{before.version} (max reconsume times {before.max_reconsume_times}, "
                            f"{before.consume_mode}); start from them")

    def act(decided: dict) -> dict:
        store.metadata.update_group(name, **changed)
        after = get_group(store, name)
        return {"after": asdict(after)}

    done = audit.perform(sessions, clock, actor=actor, action=UPDATE_GROUP, target=f"group:{name}",
                         request={"changes": changed}, intent=lambda s, _: {"before": asdict(before)}, act=act,
                         reason=reason)
    return GroupView(**done.result["after"])


def reconcile_group_updates(store: MessageStore, sessions: sessionmaker[Session]) -> list[str]:
    """At start-up: a group change a crash cut is ok when the group has the settings it asked for."""

    def settle(entry: AuditEntry, detail: dict) -> audit.Settlement:
        name = entry.target.removeprefix("group:")
        now = asdict(get_group(store, name))
        asked = detail.get("request", {}).get("changes", {})
        if now["configured"] and all(now.get(k) == v for k, v in asked.items()):
            return audit.OK, "completed before a restart", {"after": now}
        return audit.FAILED, "interrupted before the group was changed", None

    with sessions.begin() as s:
        return audit.settle_pending(s, UPDATE_GROUP, settle)
