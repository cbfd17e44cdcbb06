"""The dead-letter inbox pages: one group's (or every group's) dead letters with filters, a
Resend button on each row, bulk resend of the selected ones or of all matching, a confirmation
that says exactly what will happen, and the result of each resend."""

from __future__ import annotations

import secrets
from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Form, Request

from app.deps import BackendDep, ClockDep, SessionsDep
from app.errors import status_for
from app.pages import RendererDep
from app.pages.params import as_form_time, optional_int, optional_time_ms
from app.roles import Permission
from app.security import READ, Resender
from app.services import dead_letter_inbox, dead_letters
from app.services import resend as resend_service
from app.services.audit import MAX_REASON
from app.services.dead_letters import MAX_LIMIT, Filter
from app.services.errors import InvalidRequestError, NotOnThisBackendError

router = APIRouter(include_in_schema=False)

PAGE_SIZE = 50
EDIT_BODY_MAX = 1024 * 1024
FormText = Annotated[str | None, Form(max_length=255)]


def inbox_filter(begin: str | None, end: str | None, key: str | None, tag: str | None, reason: str | None,
            state: str | None) -> Filter:
    return Filter(optional_time_ms(begin, "From") or 0, optional_time_ms(end, "To"), (key or "").strip() or None,
                  (tag or "").strip() or None, (reason or "").strip() or None, (state or "").strip() or None)


def _offers(request: Request, group: str | None, wanted: Filter, found: dead_letters.Inbox, on_store: bool) -> dict:
    """What the signed-in role may do with what matches, and only when there is something to do:
    resend all that match (at most its per-action limit; on the embedded store only), plan a redrive
    job over the waiting ones."""
    principal = getattr(request.state, "principal", None)

    def may(permission: Permission) -> bool:
        return principal is not None and principal.can(permission)

    limit = resend_service.MAX_IDS if may(Permission.REDRIVE) else request.app.state.settings.resend_limit
    redrivable = found.total if wanted.state else found.counts.get("waiting", 0)
    return {"resend_all": on_store and bool(group) and may(Permission.RESEND) and 0 < found.total <= limit,
            "resend_limit": limit if may(Permission.RESEND) else 0,
            "redrive": bool(group) and may(Permission.REDRIVE) and redrivable > 0}


def _inbox_page(request: Request, renderer, backend, sessions, clock, group: str | None, begin, end, key, tag,
                reason, state, cursor, limit):
    wanted = inbox_filter(begin, end, key, tag, reason, state)
    size = optional_int(limit, "Per page", low=1, high=MAX_LIMIT) or PAGE_SIZE
    found = dead_letter_inbox.inbox(backend, sessions, clock, request.app.state.dead_letters, group, wanted,
                               cursor or None, size)
    query = wanted.as_query()
    on_store = backend.kind == "embedded"
    base = f"/groups/{group}/dead-letters" if group else "/dead-letters"
    rows = []
    for m in found.messages:
        row = vars(m).copy()
        row.pop("phys_offset", None)
        row["route"] = resend_service.group_route(backend, m.group, m.original_topic)
        rows.append(row)
    data = {
        "nav": "dead_letters", "group": group, "messages": rows, "total": found.total, "counts": found.counts,
        "offers": _offers(request, group, wanted, found, on_store), "on_cluster": not on_store,
        "oldest_waiting_ms": found.oldest_waiting_ms, "truncated": found.truncated, "problems": found.problems,
        "now_ms": clock.now_ms(),
        "next_url": f"{base}?" + urlencode({**query, "cursor": found.next_cursor, "limit": size})
        if found.next_cursor else None,
        "first_url": f"{base}?" + urlencode({**query, "limit": size}) if cursor else None,
        "export": {kind: f"/api/dlq/{group}/messages.{kind}?" + urlencode(query) for kind in ("csv", "ndjson")}
        if group and on_store else None,
        "form": {"begin": as_form_time(wanted.begin or None), "end": as_form_time(wanted.end), "key": key or "",
                 "tag": tag or "", "reason": reason or "", "state": state or "", "limit": size},
        "filter": query, "states": dead_letters.STATES, "click_key": secrets.token_urlsafe(16),
    }
    return renderer.page(request, "dead_letters/inbox.html", data, fragment="inbox")


@router.get("/dead-letters", dependencies=[READ])
def every_group(request: Request, backend: BackendDep, sessions: SessionsDep, clock: ClockDep, renderer: RendererDep,
                begin: str | None = None, end: str | None = None, key: str | None = None, tag: str | None = None,
                reason: str | None = None, state: str | None = None, cursor: str | None = None,
                limit: str | None = None):
    return _inbox_page(request, renderer, backend, sessions, clock, None, begin, end, key, tag, reason, state, cursor,
                       limit)


@router.get("/groups/{group}/dead-letters", dependencies=[READ])
def one_group(group: str, request: Request, backend: BackendDep, sessions: SessionsDep, clock: ClockDep,
              renderer: RendererDep, begin: str | None = None, end: str | None = None, key: str | None = None,
              tag: str | None = None, reason: str | None = None, state: str | None = None,
              cursor: str | None = None, limit: str | None = None):
    return _inbox_page(request, renderer, backend, sessions, clock, group, begin, end, key, tag, reason, state, cursor,
                       limit)


def destination_choice(choice: str, topic: str | None) -> object:
    if choice == "named":
        if not topic or not topic.strip():
            raise InvalidRequestError("name the topic to resend to")
        return {"topic": topic.strip()}
    if choice not in ("group", "topic"):
        raise InvalidRequestError("choose where to resend: the failed group, the original topic or a topic")
    return choice


def _property_changes(dead, text: str) -> dict[str, str | None]:
    """The edited "name=value" lines against the dead letter's user properties: set, changed, removed."""
    wanted: dict[str, str] = {}
    for number, line in enumerate(text.replace("\r\n", "\n").split("\n"), start=1):
        if not line.strip():
            continue
        name, sep, value = line.partition("=")
        if not sep or not name.strip():
            raise InvalidRequestError(f"property line {number} is not name=value")
        wanted[name.strip()] = value
    current = resend_service.user_properties(dead)
    changes: dict[str, str | None] = {name: None for name in current if name not in wanted}
    changes.update({name: value for name, value in wanted.items() if current.get(name) != value})
    return changes


def _sentence(count: int, group: str, destination: object, routes: set[str]) -> str:
    what = f"{count} message{'' if count == 1 else 's'}"
    them = "it" if count == 1 else "them"
    if destination == "group":
        return f"{what} back to group {group} only, through {', '.join(sorted(routes))}"
    if destination == "topic":
        return f"{what} back to {', '.join(sorted(routes))}: every group subscribed to it gets {them} again"
    return f"{what} to topic {destination['topic']}: every group subscribed to it gets {them}"


@router.post("/dead-letters/resend")
def resend(request: Request, backend: BackendDep, sessions: SessionsDep, clock: ClockDep, renderer: RendererDep,
           actor: Resender, group: Annotated[str, Form(max_length=255)],
           message_id: Annotated[list[str] | None, Form(max_length=255)] = None,
           destination: Annotated[str, Form(max_length=16)] = "group",
           topic: Annotated[str | None, Form(max_length=127)] = None,
           reason: Annotated[str | None, Form(max_length=MAX_REASON)] = None,
           force: Annotated[bool, Form()] = False, confirm: Annotated[bool, Form()] = False,
           all_matching: Annotated[bool, Form()] = False,
           idempotency_key: Annotated[str | None, Form(max_length=255)] = None,
           begin: FormText = None, end: FormText = None, key: FormText = None, tag: FormText = None,
           reason_filter: FormText = None, state: FormText = None, edit: Annotated[bool, Form()] = False,
           edit_body: Annotated[str | None, Form(max_length=EDIT_BODY_MAX)] = None,
           edit_properties: Annotated[str | None, Form(max_length=65_536)] = None):
    """Without `confirm`: what would happen (a dry run), with a button to do it. With it: the resend.
    With `edit` (the operator's form on a dead letter's page): its body and properties changed first."""
    chosen = destination_choice(destination, topic)
    changes = None
    if edit:
        if not message_id or len(message_id) != 1:
            raise InvalidRequestError("edit one dead letter at a time")
        dead = resend_service.find_dead_letter(backend, group, message_id[0])
        changes = resend_service.Edit(None if edit_body is None else edit_body.replace("\r\n", "\n").encode("utf-8"),
                                      _property_changes(dead, edit_properties or ""))
    settings = request.app.state.settings
    if all_matching:
        wanted = inbox_filter(begin, end, key, tag, reason_filter, state)
        store = dead_letter_inbox.embedded_store(backend)
        if store is None:
            raise NotOnThisBackendError("resending all that match needs the embedded store: on a live cluster "
                                        "select the dead letters to resend")
        ids = dead_letters.matching_ids(store, sessions, clock, request.app.state.dead_letters, group, wanted)
        if len(ids) > resend_service.MAX_IDS:
            raise InvalidRequestError(f"{len(ids)} dead letters match: at most {resend_service.MAX_IDS} at once "
                                      "here; narrow the filter, or start a redrive job")
    else:
        ids = list(dict.fromkeys(message_id or []))
    if not ids:
        raise InvalidRequestError("select at least one dead letter to resend")
    back = f"/groups/{group}/dead-letters"
    asked = {"group": group, "ids": ids, "destination": destination, "topic": topic or "", "reason": reason or "",
             "back_url": back, "edit": {"on": edit, "body": edit_body, "properties": edit_properties or ""}}
    if not confirm:
        try:
            plan = resend_service.resend(backend, sessions, clock, group, ids, actor=actor, destination=chosen,
                                         dry_run=True, reason=reason, force=force, limit=settings.resend_limit,
                                         edit=changes)
        except resend_service.AlreadyResentError as exc:
            return _already_resent(request, renderer, asked, exc)
        going = [r for r in plan.results if r.status == "would_resend"]
        data = {"nav": "dead_letters", "group": group, "results": plan.results,
                "sentence": _sentence(len(going), group, chosen, {r.destination for r in going if r.destination}),
                "ids": [r.dead_letter_id for r in going], "destination": destination, "topic": topic or "",
                "reason": reason or "", "force": force, "click_key": secrets.token_urlsafe(16), "back_url": back,
                "edit": {"on": edit, "body": edit_body, "properties": edit_properties or "", "diff": plan.diff}}
        return renderer.page(request, "dead_letters/confirm.html", data)
    try:
        done = resend_service.resend(backend, sessions, clock, group, ids, actor=actor, destination=chosen,
                                     reason=reason, force=force, idempotency_key=idempotency_key or None,
                                     limit=settings.resend_limit, edit=changes)
    except resend_service.AlreadyResentError as exc:
        return _already_resent(request, renderer, asked, exc)
    ok = [r for r in done.results if r.status == "ok"]
    data = {"nav": "dead_letters", "group": group, "results": done.results, "action_id": done.action_id,
            "replayed": done.replayed, "back_url": back, "ok": done.all_done,
            "sentence": _sentence(len(ok), group, chosen, {r.destination for r in ok if r.destination})}
    refusal = done.nothing_resent()
    return renderer.page(request, "dead_letters/resent.html", data,
                         status=200 if refusal is None else status_for(refusal))


def _already_resent(request: Request, renderer, asked: dict, exc: resend_service.AlreadyResentError):
    """The 409 of a resend of dead letters resent already: which ones, by whom and when, the way
    back, and the same resend again, forced, with the reason it needs."""
    earlier = [{"dead_letter_id": item.dead_letter_id, "actor": item.actor, "at_ms": item.at_ms,
                "new_offset_msg_id": item.new_offset_msg_id} for item in exc.earlier.values()]
    data = {"nav": "dead_letters", **asked, "error": str(exc), "status": 409, "earlier": earlier,
            "click_key": secrets.token_urlsafe(16)}
    return renderer.page(request, "dead_letters/already_resent.html", data, status=409)
