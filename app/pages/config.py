"""The delay-level page: the table in use, an editor that checks and previews as you type (the
retry schedule a group would get, warnings), save as a new version, and the history with who,
when, why and what changed, each version one click from being current again."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse

from app.deps import BackendDep, ClockDep, ConfigLockDep, SessionsDep, StoreDep, StoreIfAnyDep
from app.pages import RendererDep
from app.pages.params import optional_int
from app.render import is_htmx
from app.security import READ, Configurer
from app.services import broker_delay_levels, config
from app.services.audit import MAX_REASON
from app.services.errors import InvalidRequestError
from backend.embedded_groups import known_groups
from store.broker.metadata import DEFAULT_RETRY_MAX_TIMES

router = APIRouter(include_in_schema=False)
PAGE = "/config/delay-levels"


def _preview(store, levels: str, group: str | None) -> dict:
    limit = store.metadata.group(group).max_reconsume_times if group else DEFAULT_RETRY_MAX_TIMES
    return {**config.preview(store, levels, limit), "group": group or "", "levels_text": levels}


def _page_data(store, sessions, group: str | None, levels: str | None = None) -> dict:
    """The page: the table in use, the preview of `levels` (else of the table in use) for the
    group, and the history."""
    current = config.get_delay_levels(store, sessions)
    groups = known_groups(store)
    chosen = group if group in groups else None
    return {"nav": "config", "current": {"levels": current.levels, "version": current.version,
                                         "source": current.source},
            "preview": _preview(store, current.levels if levels is None else levels, chosen), "groups": groups,
            "history": [vars(v) for v in config.history(sessions, store)], "saved": None}


def _cluster_page_data(backend, sessions, saved: str | None) -> dict:
    """On a live cluster: each broker's table, the restart notice, and the versions written here."""
    current = broker_delay_levels.get_delay_levels(backend, sessions)
    history = [vars(v) for v in broker_delay_levels.history(sessions)]
    return {"nav": "config", "current": current, "history": history, "saved": _saved_version(saved, history)}


@router.get(PAGE, dependencies=[READ])
def delay_levels_page(request: Request, store: StoreIfAnyDep, backend: BackendDep, sessions: SessionsDep,
                      renderer: RendererDep, group: str | None = None, saved: str | None = None):
    if store is None:
        return renderer.page(request, "config/cluster_delay_levels.html", _cluster_page_data(backend, sessions, saved))
    data = _page_data(store, sessions, group)
    data["saved"] = _saved_version(saved, data["history"])
    return renderer.page(request, "config/delay_levels.html", data)


def _saved_version(saved: str | None, history: list[dict]) -> int | None:
    """The version a save or rollback just made (the redirect names it), when it is one."""
    if saved is None or not saved.isdigit():
        return None
    return int(saved) if any(v["version"] == int(saved) for v in history) else None


@router.get(f"{PAGE}/preview", dependencies=[READ])
def preview_fragment(request: Request, store: StoreDep, sessions: SessionsDep, renderer: RendererDep,
                     levels: str = "", group: str | None = None):
    """For htmx the preview block (an invalid table says why in it); otherwise the whole page
    (or its JSON twin) previewing `levels`, 422 when they are not a valid table."""
    if len(levels) > 4000:
        levels = levels[:4000]
    if is_htmx(request):
        data = {"nav": "config", "preview": _preview(store, levels, group or None)}
        return renderer.page(request, "config/delay_levels.html", data, fragment="preview_block")
    data = _page_data(store, sessions, group, levels)
    return renderer.page(request, "config/delay_levels.html", data, status=200 if data["preview"]["valid"] else 422)


@router.post(PAGE)
def save(store: StoreIfAnyDep, backend: BackendDep, sessions: SessionsDep, clock: ClockDep, actor: Configurer,
         lock: ConfigLockDep, levels: Annotated[str, Form(max_length=4000)],
         expected_version: Annotated[str, Form(max_length=12)],
         reason: Annotated[str | None, Form(max_length=MAX_REASON)] = None,
         allow_dropped_levels: Annotated[bool, Form()] = False,
         idempotency_key: Annotated[str | None, Form(max_length=255)] = None):
    if store is None:
        written = broker_delay_levels.set_delay_levels(
            backend, sessions, clock, levels.strip(), actor=actor, lock=lock, reason=reason,
            expected_version=optional_int(expected_version, "version"), idempotency_key=idempotency_key or None)
        return RedirectResponse(f"{PAGE}?saved={written.version}", status_code=303)
    view = config.set_delay_levels(store, sessions, clock, levels.strip(), actor=actor, lock=lock, reason=reason,
                                   expected_version=optional_int(expected_version, "version"),
                                   allow_dropped_levels=allow_dropped_levels, idempotency_key=idempotency_key or None)
    return RedirectResponse(f"{PAGE}?saved={view.version}", status_code=303)


@router.post(f"{PAGE}/rollback")
def rollback(store: StoreIfAnyDep, backend: BackendDep, sessions: SessionsDep, clock: ClockDep, actor: Configurer,
             lock: ConfigLockDep, version: Annotated[str, Form(max_length=12)],
             expected_version: Annotated[str, Form(max_length=12)],
             reason: Annotated[str | None, Form(max_length=MAX_REASON)] = None,
             allow_dropped_levels: Annotated[bool, Form()] = False):
    target = optional_int(version, "version")
    if target is None:
        raise InvalidRequestError("say which version to roll back to")
    if store is None:
        written = broker_delay_levels.rollback(backend, sessions, clock, target, actor=actor, lock=lock, reason=reason,
                                               expected_version=optional_int(expected_version, "version"))
        return RedirectResponse(f"{PAGE}?saved={written.version}", status_code=303)
    view = config.rollback(store, sessions, clock, target, actor=actor, lock=lock,
                           reason=reason, expected_version=optional_int(expected_version, "version"),
                           allow_dropped_levels=allow_dropped_levels)
    return RedirectResponse(f"{PAGE}?saved={view.version}", status_code=303)
