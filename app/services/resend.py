"""Resending dead letters, as an audited operator action.

By default a dead letter goes back to the group that failed it only, through its retry route:
`%RETRY%group` for a push consumer (RocketMQ's own route for a consumer's retries), or
`%RETRY%group_topic` for a group that receives by pop; groups that consumed it already do not
see it again. It may go to the original topic (every group) or to a chosen topic instead.

The audit row and one item row per dead letter (destination, the unique key the copy will
carry) are written before the store is touched, the outcome after. Each copy carries the
action's id and the dead letter's id as properties, so a resend cut by a crash is settled at
start-up from the commit log (through the index, by the copy's unique key): an item is ok if
and only if its copy exists, and each copy belongs to exactly one item."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import Row, func, select
from sqlalchemy.orm import Session, sessionmaker

from app.models import AuditEntry, ResendItem
from app.roles import Permission, Principal
from app.services import audit, lookup
from app.services.errors import ConflictError, ForbiddenError, InvalidRequestError, NotFoundError, ServiceError
from app.services.lookup import Source, backend_of
from app.services.messages import RESERVED_PROPERTIES
from backend.protocol import Backend, BackendRefused, BackendUnavailable
from store.broker.metadata import GroupConfig, checked_group
from store.broker.record_builder import is_valid_key
from store.clock import Clock
from store.errors import StoreError
from store.format import topics
from store.format.codec import StoredMessage
from store.format.resend_plan import origin_topic
from store.message_store import DEFAULT_QUERY_MAX, FAR_FUTURE_MS

RESEND_DEAD_LETTERS = "resend_dead_letters"
ACTION_PROPERTY = topics.RESEND_ACTION  # the audit entry id of the action that made the copy
RESENT_FROM_PROPERTY = topics.RESENT_FROM  # the offset message id of the dead letter it came from
MAX_IDS = 1000
SETTLE_SLACK_MS = 60_000  # a copy is looked for from this long before its action was recorded
PENDING, OK, FAILED = "pending", "ok", "failed"


@dataclass(frozen=True)
class Destination:
    """Where the copies go: "group" (the failed group only), "topic" (the original topic), or a named topic."""

    kind: str  # group | topic | named
    topic: str | None = None  # for "named"

    @classmethod
    def parse(cls, value: object) -> Destination:
        if value in (None, "group"):
            return cls("group")
        if value == "topic":
            return cls("topic")
        if isinstance(value, dict) and set(value) == {"topic"} and isinstance(value["topic"], str):
            topics.validate_topic(value["topic"])
            if topics.is_system_topic(value["topic"]) and not topics.is_retry_topic(value["topic"]):
                raise InvalidRequestError(f"{value['topic']} is a system topic: a dead letter cannot go there")
            return cls("named", value["topic"])
        raise InvalidRequestError('destination is "group", "topic" or {"topic": "NAME"}')

    def as_json(self) -> object:
        return {"topic": self.topic} if self.kind == "named" else self.kind

    def check_allowed(self, source: Source, actor: Principal) -> None:
        """A named topic (other than a retry topic, checked per dead letter) exists, accepts
        messages, and the actor's role may produce: a resend never creates a topic, and the
        support role resends only along the dead letter's own routes."""
        if self.kind != "named" or topics.is_retry_topic(self.topic or ""):
            return
        if not actor.can(Permission.MESSAGING):
            raise ForbiddenError(f"{actor.name} ({actor.role}) may resend a dead letter to its group or its "
                                 f"original topic only: sending it to {self.topic} needs the operator or admin role")
        config = backend_of(source).get_topic(self.topic or "")
        if config is None:
            raise NotFoundError(f"no topic {self.topic}: a dead letter is resent to an existing topic only "
                                "(create the topic first)")
        if not config.writable:
            raise InvalidRequestError(f"topic {self.topic} does not accept messages (permission {config.perm})")

    def topic_for(self, source: Source, group: str, dead: StoredMessage) -> str:
        origin = origin_topic(dead)
        if origin is None:
            raise InvalidRequestError(f"dead letter {dead.offset_msg_id} does not say which topic it came from")
        if self.kind == "topic":
            return origin
        if self.kind == "named":
            assert self.topic is not None
            own = (topics.retry_topic(group), topics.pop_retry_topic(group, origin))
            if topics.is_retry_topic(self.topic) and self.topic not in own:
                raise InvalidRequestError(f"{self.topic} is not a retry topic of group {group}: its dead letters go "
                                          f"only to a retry topic of group {group} ({' or '.join(own)})")
            return self.topic
        return group_route(source, group, origin)


def group_route(source: Source, group: str, origin: str | None) -> str:
    """The retry topic a message of `origin` takes back to `group` only (Backend.retry_route)."""
    return backend_of(source).retry_route(group, origin)


EDITABLE_PREFIXES_REFUSED = ("DLQ_", "MQLENS_", "__")


@dataclass(frozen=True)
class Edit:
    """An operator's changes to a dead letter before it is resent."""

    body: bytes | None = None  # None: the body as it is
    properties: dict[str, str | None] | None = None  # None value: remove the property


def editable(name: str) -> bool:
    """A user property an operator may change (not one the broker sets or reads)."""
    return (name not in RESERVED_PROPERTIES and not name.startswith(EDITABLE_PREFIXES_REFUSED)
            and name not in (topics.DLQ_ORIGIN_TOPIC, topics.DLQ_ORIGIN_MESSAGE_ID))


def user_properties(msg: StoredMessage) -> dict[str, str]:
    return {name: value for name, value in msg.properties.items() if editable(name)}


def edit_diff(dead: StoredMessage, edit: Edit) -> dict:
    """What an edit changes, for the confirmation and the audit log."""
    changes = []
    for name, value in sorted((edit.properties or {}).items()):
        if not editable(name) or not name or any(c in name + (value or "") for c in "\x01\x02\n\r"):
            raise InvalidRequestError(f"property {name[:40]!r} cannot be set here: the broker sets it, or it "
                                      "holds a separator character")
        before = dead.properties.get(name)
        if before != value:
            changes.append({"name": name, "before": before, "after": value})
    body = None
    if edit.body is not None and edit.body != dead.body:
        try:
            old, new = dead.body.decode("utf-8"), edit.body.decode("utf-8")
            lines = list(difflib.unified_diff(old.splitlines(), new.splitlines(), "before", "after", lineterm=""))
            body = {"size_before": len(dead.body), "size_after": len(edit.body), "diff": lines[:400]}
        except UnicodeDecodeError:
            body = {"size_before": len(dead.body), "size_after": len(edit.body), "diff": ["(binary body replaced)"]}
    return {"properties": changes, "body": body}


@dataclass(frozen=True)
class ItemResult:
    message_id: str  # as asked for (an offset message id or a unique key)
    dead_letter_id: str | None  # the dead letter's offset message id
    status: str  # would_resend | ok | failed | not_found
    destination: str | None
    new_offset_msg_id: str | None = None
    error: str | None = None


class AlreadyResentError(ConflictError):
    """Some of the dead letters were resent already: a resend of them again needs force and a reason."""

    def __init__(self, message: str, earlier: dict[str, Row]):
        super().__init__(message)
        self.earlier = earlier  # dead letter id -> the item that resent it


@dataclass(frozen=True)
class ResendOutcome:
    action_id: int | None  # None for a dry run, or when nothing could be resent
    results: list[ItemResult]
    replayed: bool
    diff: dict | None = None  # an edit's changes
    dry_run: bool = False

    @property
    def all_done(self) -> bool:
        """Every item was resent (or replayed as resent); for a dry run, every item would be."""
        done = "would_resend" if self.dry_run else OK
        return bool(self.results) and all(r.status == done for r in self.results)

    def nothing_resent(self) -> ServiceError | None:
        """Why a request resent nothing (not found: no id named a dead letter), or None when it resent something
        (or was a dry run)."""
        if self.dry_run or any(r.status in (OK, PENDING) for r in self.results):
            return None
        first = next((r for r in self.results if r.status != "not_found"), self.results[0])
        error = NotFoundError if first.status == "not_found" else InvalidRequestError
        return error(f"nothing was resent: {first.error or first.status}")


def group_of(dlq_topic: str) -> str:
    return dlq_topic[len(topics.DLQ_PREFIX):]


def find_dead_letter(source: Source, group: str | None, message_id: str) -> StoredMessage:
    """The dead letter an offset message id or unique key names (in %DLQ%group when a group is given)."""
    text = message_id.strip()
    dead = None
    try:  # both are 32 hex characters: an offset id that names no message may still be a unique key
        dead = lookup.by_offset_id(source, text)
    except (InvalidRequestError, NotFoundError):
        if group is None:
            raise
    if dead is None:
        assert group is not None
        if not is_valid_key(text) or len(text) > 255:
            raise InvalidRequestError(f"{text[:64]!r} is neither an offset message id nor a unique key")
        found = backend_of(source).query_key(text, [topics.dlq_topic(group)], 0, FAR_FUTURE_MS, 1, True).messages
        if not found:
            raise NotFoundError(f"no dead letter of group {group} has the id or unique key {text}")
        dead = found[0]
    if not topics.is_dlq_topic(dead.topic):
        raise InvalidRequestError(f"message {dead.offset_msg_id} is in {dead.topic}, not in a dead-letter topic")
    if group is not None and dead.topic != topics.dlq_topic(group):
        raise InvalidRequestError(f"message {dead.offset_msg_id} is a dead letter of group {group_of(dead.topic)}, "
                                  f"not of {group}")
    return dead


LOOKUP_CHUNK = 500
PAGE_CHUNK = 64
RESEND_COLUMNS = (ResendItem.dead_letter_id, ResendItem.status, ResendItem.at_ms, ResendItem.actor,
                  ResendItem.action_id, ResendItem.destination, ResendItem.new_offset_msg_id)


def resent_before(sessions: sessionmaker[Session], dead_letter_ids: Iterable[str]) -> dict[str, Row]:
    """The latest item that resent (or may have resent: pending) each of these dead letters: its
    columns only (the inbox asks this of every dead letter per request; entities cost ten times more)."""
    wanted = list(dict.fromkeys(dead_letter_ids))
    found: dict[str, Row] = {}
    with sessions() as s:
        for start in range(0, len(wanted), LOOKUP_CHUNK):
            chunk = wanted[start:start + LOOKUP_CHUNK]
            # Always PAGE_CHUNK or LOOKUP_CHUNK values: two statement texts, so the database keeps
            # two prepared statements rather than one per chunk length (each of hundreds of
            # parameters), and a page's few ids are not padded to hundreds.
            chunk += [chunk[-1]] * ((PAGE_CHUNK if len(chunk) <= PAGE_CHUNK else LOOKUP_CHUNK) - len(chunk))
            for item in s.execute(select(*RESEND_COLUMNS).where(ResendItem.dead_letter_id.in_(chunk),
                                                                ResendItem.status.in_((OK, PENDING)))
                                  .order_by(ResendItem.id)):
                found[item.dead_letter_id] = item
    return found


def resend_items_version(sessions: sessionmaker[Session], group: str | None) -> tuple[int, int | None]:
    """How many items resent (or may have resent) dead letters of `group` (or of every group),
    and the newest one's id: when neither moved, resent_ids answers as before."""
    query = select(func.count(), func.max(ResendItem.id)).where(ResendItem.status.in_((OK, PENDING)))
    if group is not None:
        query = query.where(ResendItem.group == group)
    with sessions() as s:
        count, newest = s.execute(query).one()
    return count, newest


def resent_ids(sessions: sessionmaker[Session], group: str | None) -> set[str]:
    """The dead letters (of `group`, or of every group) that an item resent or may have resent
    (pending): what the inbox needs of every dead letter, one column from one index."""
    query = select(ResendItem.dead_letter_id).where(ResendItem.status.in_((OK, PENDING))).distinct()
    if group is not None:
        query = query.where(ResendItem.group == group)
    with sessions() as s:
        return set(s.scalars(query))


def resend(source: Source, sessions: sessionmaker[Session], clock: Clock, group: str | None,
           message_ids: list[str], *, actor: Principal, destination: object = "group", dry_run: bool = False,
           reason: str | None = None, force: bool = False, idempotency_key: str | None = None,
           limit: int = MAX_IDS, edit: Edit | None = None) -> ResendOutcome:
    """Resend the named dead letters (of `group`, or of the group each belongs to when None);
    with `edit`, one dead letter with an operator's changes to its body or properties."""
    if not message_ids:
        raise InvalidRequestError("name at least one dead letter (message_ids)")
    if len(message_ids) > MAX_IDS:
        raise InvalidRequestError(f"at most {MAX_IDS} dead letters per request: use a redrive job for more")
    if len(message_ids) > limit and not actor.can(Permission.REDRIVE):
        raise ForbiddenError(f"{actor.name} ({actor.role}) may resend at most {limit} dead letters at once; "
                             "an operator can run a redrive job for more")
    backend = backend_of(source)
    if group is not None:
        checked_group(GroupConfig(group))
        if backend.get_topic(topics.dlq_topic(group)) is None:
            raise NotFoundError(f"group {group} has no dead letters (no {topics.dlq_topic(group)} topic)")
    if edit is not None:
        if len(message_ids) != 1:
            raise InvalidRequestError("edit one dead letter at a time")
        if not actor.can(Permission.REDRIVE):
            raise ForbiddenError(f"{actor.name} ({actor.role}) may not edit a message before resending it: it "
                                 "needs the operator or admin role")
    where = Destination.parse(destination)
    where.check_allowed(backend, actor)
    reason = audit.checked_reason(reason)
    if force and not reason:
        raise InvalidRequestError("say why (reason) to resend a dead letter that was resent already")

    results: dict[str, ItemResult] = {}
    chosen: list[tuple[str, StoredMessage, str]] = []  # (asked id, dead letter, destination topic)
    for message_id in dict.fromkeys(message_ids):
        try:
            dead = find_dead_letter(backend, group, message_id)
            target = where.topic_for(backend, group_of(dead.topic), dead)
        except NotFoundError as exc:
            results[message_id] = ItemResult(message_id, None, "not_found", None, error=str(exc))
            continue
        except (InvalidRequestError, StoreError, BackendRefused) as exc:
            results[message_id] = ItemResult(message_id, None, FAILED, None, error=str(exc))
            continue
        chosen.append((message_id, dead, target))
    if not force and not audit.used_key(sessions, idempotency_key):
        earlier = resent_before(sessions, [dead.offset_msg_id for _, dead, _ in chosen])
        if earlier:
            first = next(iter(earlier.values()))
            raise AlreadyResentError(f"{len(earlier)} of these dead letters {'was' if len(earlier) == 1 else 'were'} "
                                     f"resent already ({first.dead_letter_id} by {first.actor}): leave them out, or "
                                     "force with a reason", earlier)
    diff = edit_diff(chosen[0][1], edit) if edit is not None and chosen else None
    if dry_run:
        for message_id, dead, target in chosen:
            results[message_id] = ItemResult(message_id, dead.offset_msg_id, "would_resend", target)
        return ResendOutcome(None, [results[m] for m in dict.fromkeys(message_ids)], False, diff, dry_run=True)
    if not chosen:
        return ResendOutcome(None, [results[m] for m in dict.fromkeys(message_ids)], False)

    plan = [(message_id, dead, target, dead.unique_key if dead.unique_key else backend.new_unique_key())
            for message_id, dead, target in chosen]
    request = {"group": group, "message_ids": list(dict.fromkeys(message_ids)), "destination": where.as_json(),
               "force": force, "edit": diff}
    target_name = f"dlq:{group}" if group is not None else f"message:{plan[0][1].offset_msg_id}"

    def intent(s: Session, entry_id: int) -> dict:
        now = clock.now_ms()
        for _, dead, target, key in plan:
            s.add(ResendItem(action_id=entry_id, dead_letter_id=dead.offset_msg_id, group=group_of(dead.topic),
                             destination=target, lookup_key=key, status=PENDING, at_ms=now, actor=actor.name,
                             claim=None if force else dead.offset_msg_id))
        return {"action_id": entry_id, "destination": where.as_json(), "count": len(plan), "edit": diff,
                "items": [{"dead_letter": dead.offset_msg_id, "to": target} for _, dead, target, _ in plan]}

    def act(decided: dict) -> dict:
        action_id = decided["action_id"]
        done: dict[str, tuple[str, str | None, str | None]] = {}
        errors: list[Exception] = []
        unknown: list[BackendUnavailable] = []
        for _, dead, target, key in plan:
            marks = {ACTION_PROPERTY: str(action_id), RESENT_FROM_PROPERTY: dead.offset_msg_id}
            try:
                copy_id = backend.resend_dead_letter(dead, actor.name, topic=target, marks=marks, unique_key=key,
                                                     body=edit.body if edit else None,
                                                     property_changes=edit.properties if edit else None)
                done[dead.offset_msg_id] = (OK, copy_id, None)
            except (StoreError, BackendRefused) as exc:
                done[dead.offset_msg_id] = (FAILED, None, str(exc)[:2000])
                errors.append(exc)
            except BackendUnavailable as exc:
                done[dead.offset_msg_id] = _unanswered_send(backend, action_id, dead, target, key, exc)
                if done[dead.offset_msg_id][0] == PENDING:
                    unknown.append(exc)
        with sessions.begin() as s:
            for item in s.scalars(select(ResendItem).where(ResendItem.action_id == action_id)):
                item.status, item.new_offset_msg_id, item.error = done[item.dead_letter_id]
                if item.status == FAILED:
                    item.claim = None
        if unknown:
            raise unknown[0]  # the item stays pending (and claimed): it may have been sent
        if len(errors) == len(done):
            raise errors[0]  # nothing was resent: the action failed, as the first error says
        return {"resent": len(done) - len(errors), "failed": len(errors)}

    performed = audit.perform(sessions, clock, actor=actor, action=RESEND_DEAD_LETTERS, target=target_name,
                              request=request, intent=intent, act=act, idempotency_key=idempotency_key,
                              reason=reason)
    action_id = performed.result["action_id"]
    with sessions() as s:
        items = {item.dead_letter_id: item for item in
                 s.scalars(select(ResendItem).where(ResendItem.action_id == action_id))}
    for message_id, dead, _, _ in plan:
        item = items.get(dead.offset_msg_id)
        if item is not None:
            results[message_id] = ItemResult(message_id, dead.offset_msg_id, item.status, item.destination,
                                             item.new_offset_msg_id, item.error)
    if performed.replayed:  # the ids of the first request: report what it did
        for item in items.values():
            results.setdefault(item.dead_letter_id, ItemResult(item.dead_letter_id, item.dead_letter_id, item.status,
                                                               item.destination, item.new_offset_msg_id, item.error))
    ordered = [results[m] for m in dict.fromkeys(message_ids) if m in results]
    return ResendOutcome(action_id, ordered, performed.replayed, diff)


def _unanswered_send(backend: Backend, action_id: int, dead: StoredMessage, target: str, key: str,
                     exc: BackendUnavailable) -> tuple[str, str | None, str | None]:
    """A send nobody answered may have stored the copy: ok when the copy is found now, else the
    item stays pending (it blocks a resend without force) and says why."""
    probe = ResendItem(action_id=action_id, dead_letter_id=dead.offset_msg_id, destination=target, lookup_key=key)
    try:
        copy = find_copy(backend, probe, dead.store_timestamp)
    except BackendUnavailable:
        copy = None
    if copy is not None:
        return OK, copy.offset_msg_id, None
    return PENDING, None, f"{exc}: the copy may have been sent (a resend of it needs force)"[:2000]


def find_copy(source: Source, item: ResendItem, since_ms: int) -> StoredMessage | None:
    """The copy an item's action made, found through the index by its unique key and matched by marks;
    BackendUnavailable when it is not found and a broker did not answer."""
    try:
        found = backend_of(source).query_key(item.lookup_key, [item.destination], max(0, since_ms - SETTLE_SLACK_MS),
                                             FAR_FUTURE_MS, DEFAULT_QUERY_MAX, True)
    except StoreError:
        return None
    for msg in found.messages:
        if (msg.properties.get(ACTION_PROPERTY) == str(item.action_id)
                and msg.properties.get(RESENT_FROM_PROPERTY) == item.dead_letter_id):
            return msg
    if found.problems:
        raise BackendUnavailable(f"the copy of {item.dead_letter_id} was not found: {'; '.join(found.problems)}")
    return None


def reconcile_resends(source: Source, sessions: sessionmaker[Session]) -> list[str]:
    """At start-up: settle resends a crash left pending, from the commit log (on a cluster, the
    brokers' index of the destination topic): an item is ok when its copy (carrying the action id
    and the dead letter id) is there, else failed (it may be resent again). Returns what was done,
    for the log; on a cluster where a broker does not answer, BackendUnavailable and nothing settled."""
    done: list[str] = []
    with sessions.begin() as s:

        def settle(entry: AuditEntry, detail: dict) -> audit.Settlement:
            items = list(s.scalars(select(ResendItem).where(ResendItem.action_id == entry.id)))
            ok = 0
            for item in items:
                copy = find_copy(source, item, entry.at_ms)
                if copy is not None:
                    item.status, item.new_offset_msg_id, item.error = OK, copy.offset_msg_id, None
                    ok += 1
                else:
                    item.status, item.error = FAILED, "interrupted before the dead letter was resent"
                    item.claim = None
            if ok == 0:
                return audit.FAILED, "interrupted before any dead letter was resent", {"resent": 0,
                                                                                         "failed": len(items)}
            return audit.OK, f"completed before a restart: {ok} of {len(items)} resent (found in the commit log)", {
                "resent": ok, "failed": len(items) - ok}

        done += audit.settle_pending(s, RESEND_DEAD_LETTERS, settle)
    return done
