"""Redrive jobs: resend every dead letter a filter matched, at a set rate, as long work with
progress, pause, resume and cancel, that survives a restart of the server.

A job lists its dead letters when it is made (a dry run stops there: the list is what a run
would send, and where). Running, it takes queued items in turn: marks them pending (committed),
asks the backend (the embedded store, or a live cluster's brokers) to resend each once, then
records the outcome. A crash between the two leaves items pending; before the job goes on they
are settled by looking their copies up (they carry the job's action id and the dead letter's id),
so no message is sent twice for one item. A job pauses itself when more than a set share of what
it resent has come back dead, and when the cluster does not answer a send; that pause ends by
itself once the items it left open are settled against the brokers again."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from sqlalchemy import func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from app.models import RedriveJob, ResendItem
from app.roles import Principal
from app.services import audit, dead_letter_inbox, dead_letters
from app.services.errors import ConflictError, InvalidRequestError, NotFoundError
from app.services.lookup import Source, backend_of
from app.services.resend import (
    ACTION_PROPERTY,
    FAILED,
    OK,
    PENDING,
    Destination,
    find_copy,
    find_dead_letter,
    resent_before,
)
from backend.protocol import Backend, BackendRefused, BackendUnavailable, BrokerGone, DeadLetterWindow, SendUnanswered
from store.clock import Clock
from store.errors import FlowControlError, StoreError
from store.format import topics
from store.format.codec import StoredMessage

log = logging.getLogger("mqlens.redrive")

CREATE_JOB, CONTROL_JOB = "create_redrive_job", "control_redrive_job"
QUEUED, SKIPPED = "queued", "skipped"
PLANNED, RUNNING, PAUSED, CANCELLED, DONE = "planned", "running", "paused", "cancelled", "done"
MAX_RATE = 10_000
MAX_ITEMS = 100_000
ITEMS_PAGE = 500  # a job's items a page lists, by default
ITEMS_PAGE_MAX = 1_000
INSERT_CHUNK = 1_000
MIN_RESENT_FOR_SHARE = 20  # the dead share is judged once this many were resent
DEAD_CHECK_S = 1.0
CLUSTER_RETRY_S = 2.0  # a job the cluster paused asks the brokers again this often
CLUSTER_PAUSE = "paused itself: the cluster did not answer"
DEAD_SCAN_PAGES = 10  # pages of the dead-letter queue one dead-share check reads on a cluster


@dataclass(frozen=True)
class JobView:
    id: int
    action_id: int
    group: str
    filter: dict
    destination: object
    rate_per_s: int
    max_dead_share: float
    state: str
    state_reason: str | None
    reason: str | None
    created_by: str
    created_at_ms: int
    started_at_ms: int | None
    finished_at_ms: int | None
    total: int
    counts: dict[str, int]  # items per status: queued, pending, ok, failed, skipped
    dead_again: int  # resent copies that came back dead

    @property
    def done_items(self) -> int:
        return sum(self.counts.get(s, 0) for s in (OK, FAILED, SKIPPED))

    @property
    def progress(self) -> float:
        """The share of the items done (resent, failed or skipped), 0 to 1."""
        return self.done_items / self.total if self.total else 1.0

    @property
    def report_url(self) -> str:
        return f"/api/redrive-jobs/{self.id}/report.csv"


def _counts(session: Session, job_id: int) -> dict[str, int]:
    counts = dict.fromkeys((QUEUED, PENDING, OK, FAILED, SKIPPED), 0)
    for status, count in session.execute(select(ResendItem.status, func.count()).where(ResendItem.job_id == job_id)
                                         .group_by(ResendItem.status)):
        counts[status] = count
    return counts


def _view(session: Session, job: RedriveJob, dead_again: int = 0) -> JobView:
    return JobView(job.id, job.action_id, job.group, json.loads(job.filter), json.loads(job.destination),
                   job.rate_per_s, job.max_dead_share, job.state, job.state_reason, job.reason, job.created_by,
                   job.created_at_ms, job.started_at_ms, job.finished_at_ms, job.total, _counts(session, job.id),
                   dead_again)


def get_job(sessions: sessionmaker[Session], job_id: int, runner: RedriveRunner | None = None) -> JobView:
    with sessions() as s:
        job = s.get(RedriveJob, job_id)
        if job is None:
            raise NotFoundError(f"no redrive job {job_id}")
        return _view(s, job, runner.dead_again(job_id) if runner else 0)


def list_jobs(sessions: sessionmaker[Session], limit: int = 50) -> list[JobView]:
    with sessions() as s:
        return [_view(s, job) for job in s.scalars(select(RedriveJob).order_by(RedriveJob.id.desc()).limit(limit))]


def job_items(sessions: sessionmaker[Session], job_id: int, after: int | None = None,
              limit: int = ITEMS_PAGE) -> tuple[list[ResendItem], int | None]:
    """A page of the job's items in the order they were listed, after item `after`; and the
    cursor of the next page (None on the last)."""
    if not 1 <= limit <= ITEMS_PAGE_MAX:
        raise InvalidRequestError(f"limit is between 1 and {ITEMS_PAGE_MAX}")
    with sessions() as s:
        if s.get(RedriveJob, job_id) is None:
            raise NotFoundError(f"no redrive job {job_id}")
        query = select(ResendItem).where(ResendItem.job_id == job_id)
        if after is not None:
            query = query.where(ResendItem.id > after)
        found = list(s.scalars(query.order_by(ResendItem.id).limit(limit + 1)))
    page = found[:limit]
    return page, page[-1].id if len(found) > limit else None


def every_job_item(sessions: sessionmaker[Session], job_id: int) -> Iterator[ResendItem]:
    """The job's items, read a page at a time (for the report)."""
    after: int | None = None
    while True:
        page, after = job_items(sessions, job_id, after, ITEMS_PAGE_MAX)
        yield from page
        if after is None:
            return


def create_job(source: Source, sessions: sessionmaker[Session], clock: Clock, cache: dead_letters.DeadLetterCache,
               group: str, wanted: dead_letters.Filter, *, destination: object, rate_per_s: int, dry_run: bool,
               actor: Principal, reason: str | None = None, max_dead_share: float = 0.5,
               idempotency_key: str | None = None) -> JobView:
    """Make a job over the dead letters `wanted` matches now; it runs unless `dry_run` (then it is
    planned: its list says what a run would send, and where; resume starts it)."""
    if not 1 <= rate_per_s <= MAX_RATE:
        raise InvalidRequestError(f"rate_per_s is between 1 and {MAX_RATE}")
    if not 0 < max_dead_share <= 1:
        raise InvalidRequestError("max_dead_share is above 0 and at most 1")
    backend = backend_of(source)
    where = Destination.parse(destination)
    where.check_allowed(backend, actor)
    request = {"group": group, "filter": wanted.as_query(), "destination": where.as_json(),
               "rate_per_s": rate_per_s, "dry_run": dry_run, "max_dead_share": max_dead_share}
    if audit.used_key(sessions, idempotency_key):  # a repeat: its job, whatever matches now
        done = audit.perform(sessions, clock, actor=actor, action=CREATE_JOB, target=f"dlq:{group}", request=request,
                             intent=lambda s, entry_id: {}, act=lambda decided: None,
                             idempotency_key=idempotency_key, reason=reason)
        return get_job(sessions, done.result["job_id"])
    store = dead_letter_inbox.embedded_store(backend)
    if store is not None:
        matched = dead_letters.matching_ids(store, sessions, clock, cache, group, wanted, at_most=MAX_ITEMS)
        found: dict[str, StoredMessage] = {}
    else:
        found = _cluster_matches(backend, sessions, group, wanted)
        matched = list(found)
    if len(matched) > MAX_ITEMS:
        raise InvalidRequestError(f"more than {MAX_ITEMS} dead letters match: a job takes at most {MAX_ITEMS}; "
                                  "narrow the filter")
    if not matched:
        raise InvalidRequestError("no dead letter matches the filter: nothing to redrive")
    earlier = resent_before(sessions, matched)
    plan = []  # (dead letter id, destination, lookup key): three short strings a dead letter
    for dead_id in matched:
        dead = found.get(dead_id) or find_dead_letter(backend, group, dead_id)
        plan.append((dead_id, where.topic_for(backend, group, dead), dead.unique_key or backend.new_unique_key()))

    def intent(s: Session, entry_id: int) -> dict:
        now = clock.now_ms()
        job = RedriveJob(action_id=entry_id, group=group, filter=json.dumps(wanted.as_query()),
                         destination=json.dumps(where.as_json()), rate_per_s=rate_per_s,
                         max_dead_share=max_dead_share, state=PLANNED if dry_run else RUNNING, reason=reason,
                         created_by=actor.name, created_at_ms=now, started_at_ms=None if dry_run else now,
                         total=len(plan))
        s.add(job)
        s.flush()
        for start in range(0, len(plan), INSERT_CHUNK):  # rows, not entities: a job of 100,000 stays small
            s.execute(insert(ResendItem), [
                {"action_id": entry_id, "job_id": job.id, "dead_letter_id": dead_id, "group": group,
                 "destination": target, "lookup_key": key, "at_ms": now, "actor": actor.name,
                 "status": SKIPPED if dead_id in earlier else QUEUED,
                 "error": f"resent already by {earlier[dead_id].actor}" if dead_id in earlier else None}
                for dead_id, target, key in plan[start:start + INSERT_CHUNK]])
        return {"job_id": job.id, "count": len(plan), "skipped": len(earlier),
                "dead_letters": [dead_id for dead_id, _, _ in plan[:1000]]}

    done = audit.perform(sessions, clock, actor=actor, action=CREATE_JOB, target=f"dlq:{group}", request=request,
                         intent=intent, act=lambda decided: None, idempotency_key=idempotency_key, reason=reason)
    return get_job(sessions, done.result["job_id"])


def _cluster_matches(backend: Backend, sessions: sessionmaker[Session], group: str,
                     wanted: dead_letters.Filter) -> dict[str, StoredMessage]:
    """A live cluster's dead letters of the group the filter matches (at most MAX_ITEMS + 1),
    read from the brokers a page at a time; "waiting" are those no resend has taken."""
    if wanted.state not in (None, "waiting"):
        raise InvalidRequestError("on a live cluster a redrive job takes the dead letters waiting (state=waiting) or "
                                  "all of them; the other states need the embedded store")
    window = dead_letter_inbox.check_cluster_filter(dead_letters.Filter(wanted.begin, wanted.end, wanted.key,
                                                                        wanted.tag, wanted.reason))
    found: dict[str, StoredMessage] = {}
    before = None
    while len(found) <= MAX_ITEMS:
        page = backend.dead_letter_page(group, window, before, dead_letters.MAX_LIMIT)
        if page.problems:
            raise BackendUnavailable(f"the dead letters of {group} could not all be read, so no job was made: "
                                     f"{'; '.join(page.problems)}")
        taken = resent_before(sessions, [m.offset_msg_id for m in page.messages]) if wanted.state else {}
        found.update((m.offset_msg_id, m) for m in page.messages if m.offset_msg_id not in taken)
        if page.next_position is None:
            break
        before = page.next_position
    return found


def reconcile_job_creation(sessions: sessionmaker[Session]) -> list[str]:
    """At start-up: a job's audit entry a crash left pending is ok (its job and items were made
    in the same transaction as the entry, and making them is all the action does)."""
    with sessions.begin() as s:
        return audit.settle_pending(s, CREATE_JOB, lambda entry, detail: (audit.OK, "made before a restart", None))


_NEXT_STATE = {"pause": ((RUNNING,), PAUSED), "resume": ((PAUSED, PLANNED), RUNNING),
               "cancel": ((RUNNING, PAUSED, PLANNED), CANCELLED)}


# What a command did, as the job page says it: "running · started by olga", "paused · paused by otto"
_DONE_BY = {("pause", RUNNING): "paused", ("resume", PLANNED): "started", ("resume", PAUSED): "resumed",
            ("cancel", PLANNED): "cancelled", ("cancel", RUNNING): "cancelled", ("cancel", PAUSED): "cancelled"}


def control_job(sessions: sessionmaker[Session], clock: Clock, job_id: int, command: str, *,
                actor: Principal, reason: str | None = None) -> JobView:
    """pause, resume (a planned job: start) or cancel; audited."""
    if command not in _NEXT_STATE:
        raise InvalidRequestError("use pause, resume or cancel")
    allowed, target = _NEXT_STATE[command]
    with sessions.begin() as s:
        job = s.get(RedriveJob, job_id)
        if job is None:
            raise NotFoundError(f"no redrive job {job_id}")
        if job.state not in allowed:
            raise ConflictError(f"job {job_id} is {job.state}: it cannot {command}")
        before = job.state
        job.state, job.state_reason = target, f"{_DONE_BY[command, before]} by {actor.name}"
        if target == RUNNING and job.started_at_ms is None:
            job.started_at_ms = clock.now_ms()
        if target == CANCELLED:
            job.finished_at_ms = clock.now_ms()
            s.execute(update(ResendItem).where(ResendItem.job_id == job_id, ResendItem.status == QUEUED)
                      .values(status=SKIPPED, error="the job was cancelled"))
        audit.record(s, clock, actor=actor, action=CONTROL_JOB, target=f"redrive-job:{job_id}",
                     detail={"command": command, "before": before, "after": target}, reason=reason)
    return get_job(sessions, job_id)


class RedriveRunner:
    """The thread that runs the jobs, one batch at a time, at each job's rate."""

    def __init__(self, source: Source, sessions: sessionmaker[Session], clock: Clock, tick_s: float = 0.02,
                 pace_clock: Callable[[], float] = time.monotonic):
        self.backend, self.sessions, self.clock, self.tick_s = backend_of(source), sessions, clock, tick_s
        self.store = dead_letter_inbox.embedded_store(self.backend)  # None on a live cluster
        self.pace_clock = pace_clock  # seconds, for the jobs' rates and the dead-copy checks
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._tokens: dict[int, tuple[float, float]] = {}  # job -> (tokens, when counted)
        # job -> (DLQ offset scanned to per queue, copies dead again, when counted)
        self._dead: dict[int, tuple[dict[int, int], int, float]] = {}
        self._cluster_asked = 0.0  # when jobs the cluster paused last asked it again
        self._unanswered: dict[int, set[str]] = {}  # job -> brokers that left a send of it unanswered

    def start(self) -> RedriveRunner:
        self.settle_pending()
        self._thread = threading.Thread(target=self._run, name="redrive", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def settle_pending(self, job_id: int | None = None) -> int:
        """Items a crash (or a send nobody answered) left pending, of every job or of one: ok when
        their copy is found, else queued again (the job sends them when it goes on). An item whose
        copy cannot be looked up now (a broker does not answer) stays pending; BackendUnavailable
        then, when `job_id` is given."""
        settled = 0
        query = select(ResendItem).where(ResendItem.job_id.is_not(None), ResendItem.status == PENDING)
        if job_id is not None:
            query = query.where(ResendItem.job_id == job_id)
        with self.sessions.begin() as s:
            for item in s.scalars(query):
                job = s.get_one(RedriveJob, item.job_id)
                try:
                    copy = find_copy(self.backend, item, job.created_at_ms)
                except BackendUnavailable:
                    if job_id is not None:
                        raise
                    log.warning("redrive item %s of job %s stays pending: its copy cannot be looked up now",
                                item.id, item.job_id)
                    continue
                if copy is not None:
                    item.status, item.new_offset_msg_id, item.error = OK, copy.offset_msg_id, None
                else:
                    item.status, item.claim, item.error = QUEUED, None, None
                settled += 1
        if settled and job_id is None:
            log.info("start-up: %d redrive item(s) cut by a restart settled", settled)
        return settled

    def dead_again(self, job_id: int) -> int:
        return self._dead.get(job_id, ({}, 0, 0.0))[1]

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                worked = self.step()
            except Exception:  # the runner must outlive one bad batch; the job stays as it was
                log.exception("redrive batch failed")
                worked = False
            if not worked:
                self._stop.wait(self.tick_s * (1 if self._tokens else 10))

    def step(self) -> bool:
        """One batch of every running job; whether anything was sent."""
        self._resume_after_cluster()
        with self.sessions() as s:
            running = list(s.scalars(select(RedriveJob).where(RedriveJob.state == RUNNING)))
        if not running:
            self._tokens.clear()
            return False
        worked = False
        for job in running:
            worked |= self._step_job(job)
        return worked

    def _take_tokens(self, job: RedriveJob) -> int:
        now = self.pace_clock()
        tokens, when = self._tokens.get(job.id, (0.0, now))
        tokens = min(tokens + (now - when) * job.rate_per_s, max(1.0, job.rate_per_s / 5))
        whole = int(tokens)
        self._tokens[job.id] = (tokens - whole, now)
        return whole

    def _step_job(self, job: RedriveJob) -> bool:
        if self._too_many_dead(job):
            return False
        want = self._take_tokens(job)
        if want == 0:
            return False
        batch = self._claim(job, want)
        if not batch:
            self._finish_if_done(job)
            return False
        outcomes: dict[int, tuple[str, str | None, str | None]] = {}
        paused_itself = False
        for item in batch:
            # Once the job paused itself (an item left queued or pending), the rest of the batch waits too.
            outcomes[item.id] = (QUEUED, None, None) if paused_itself else self._resend(job, item)
            paused_itself = outcomes[item.id][0] in (QUEUED, PENDING)
        with self.sessions.begin() as s:
            for item_id, (status, new_id, error) in outcomes.items():
                item = s.get_one(ResendItem, item_id)
                item.status, item.new_offset_msg_id, item.error = status, new_id, error
                if status in (FAILED, QUEUED):
                    item.claim = None
        return True

    def _claim(self, job: RedriveJob, want: int) -> list[ResendItem]:
        """The next queued items, marked pending (and claimed) before the store is asked. An item
        no longer queued when it is marked (a cancel skipped it meanwhile) is left alone."""
        with self.sessions() as s:
            batch = list(s.scalars(select(ResendItem).where(ResendItem.job_id == job.id, ResendItem.status == QUEUED)
                                   .order_by(ResendItem.id).limit(want)))
        if not batch:
            return []
        try:
            with self.sessions.begin() as s:
                return [item for item in batch if self._mark_pending(s, item)]
        except IntegrityError:  # another action resent one of them meanwhile: one at a time
            claimed = []
            for item in batch:
                try:
                    with self.sessions.begin() as s:
                        if self._mark_pending(s, item):
                            claimed.append(item)
                except IntegrityError:
                    with self.sessions.begin() as s:
                        s.execute(update(ResendItem).where(ResendItem.id == item.id, ResendItem.status == QUEUED)
                                  .values(status=SKIPPED, error="resent by another action meanwhile"))
            return claimed

    @staticmethod
    def _mark_pending(s: Session, item: ResendItem) -> bool:
        marked = s.execute(update(ResendItem).where(ResendItem.id == item.id, ResendItem.status == QUEUED)
                           .values(status=PENDING, claim=item.dead_letter_id))
        return marked.rowcount == 1

    def _resend(self, job: RedriveJob, item: ResendItem) -> tuple[str, str | None, str | None]:
        marks = {ACTION_PROPERTY: str(item.action_id), topics.RESENT_FROM: item.dead_letter_id}
        try:
            dead = self.backend.read_by_offset_id(item.dead_letter_id)
        except (BackendUnavailable, BrokerGone) as exc:  # nothing was sent
            self._pause(job, f"{CLUSTER_PAUSE}: {exc}")
            return QUEUED, None, None
        except StoreError as exc:
            return FAILED, None, str(exc)[:2000]
        try:
            copy_id = self.backend.resend_dead_letter(dead, job.created_by, topic=item.destination, marks=marks,
                                                      unique_key=item.lookup_key)
        except FlowControlError as exc:  # busy or disk full: nothing was written; the job waits, the item stays
            self._pause(job, f"paused itself: {exc}")
            return QUEUED, None, None
        except BrokerGone as exc:  # no broker listed now takes the copy: nothing was sent
            self._pause(job, f"{CLUSTER_PAUSE}: {exc}")
            return QUEUED, None, None
        except BackendUnavailable as exc:  # the copy may be stored: settled before the job goes on
            if isinstance(exc, SendUnanswered):
                self._unanswered.setdefault(job.id, set()).add(exc.broker)
            self._pause(job, f"{CLUSTER_PAUSE}: {exc}")
            return PENDING, None, "sent, no answer yet: settled when the cluster answers"
        except (StoreError, BackendRefused) as exc:
            return FAILED, None, str(exc)[:2000]
        return OK, copy_id, None

    def _pause(self, job: RedriveJob, why: str) -> None:
        with self.sessions.begin() as s:
            s.execute(update(RedriveJob).where(RedriveJob.id == job.id, RedriveJob.state == RUNNING)
                      .values(state=PAUSED, state_reason=why[:1000]))

    def _resume_after_cluster(self) -> None:
        """Jobs the cluster paused go on once their open items are settled against it."""
        now = self.pace_clock()
        if now - self._cluster_asked < CLUSTER_RETRY_S:
            return
        self._cluster_asked = now
        with self.sessions() as s:
            waiting = list(s.scalars(select(RedriveJob.id).where(RedriveJob.state == PAUSED,
                                                                 RedriveJob.state_reason.startswith(CLUSTER_PAUSE))))
        for job_id in waiting:
            try:
                if not self._cluster_ready(job_id):
                    continue
                self.settle_pending(job_id)
            except BackendUnavailable:
                continue
            self._unanswered.pop(job_id, None)
            with self.sessions.begin() as s:
                s.execute(update(RedriveJob).where(RedriveJob.id == job_id, RedriveJob.state == PAUSED,
                                                   RedriveJob.state_reason.startswith(CLUSTER_PAUSE))
                          .values(state=RUNNING, state_reason="resumed itself: the cluster answered again"))
            log.info("redrive job %s resumed: the cluster answered again", job_id)

    def _cluster_ready(self, job_id: int) -> bool:
        """Every broker answers, among them each one that left a send of the job unanswered (only it
        can tell whether the copy was stored: settling without it could send one twice), and the
        job's next dead letter can be read (its broker is listed again)."""
        view = self.backend.describe()
        answering = {b.name for c in view.clusters for b in c.brokers if b.answered}
        if not view.complete or not self._unanswered.get(job_id, set()) <= answering:
            return False
        with self.sessions() as s:
            next_dead = s.scalar(select(ResendItem.dead_letter_id).where(ResendItem.job_id == job_id,
                                                                         ResendItem.status == QUEUED)
                                 .order_by(ResendItem.id).limit(1))
        if next_dead is not None:
            try:
                self.backend.read_by_offset_id(next_dead)
            except (BackendUnavailable, BrokerGone):
                return False
            except StoreError:
                pass  # gone for good: the job fails that item when it goes on
        return True

    def _finish_if_done(self, job: RedriveJob) -> None:
        with self.sessions.begin() as s:
            left = s.scalar(select(func.count()).select_from(ResendItem)
                            .where(ResendItem.job_id == job.id, ResendItem.status.in_((QUEUED, PENDING))))
            if not left:
                s.execute(update(RedriveJob).where(RedriveJob.id == job.id, RedriveJob.state == RUNNING)
                          .values(state=DONE, finished_at_ms=self.clock.now_ms(), state_reason="every item handled"))
        self._tokens.pop(job.id, None)

    def _too_many_dead(self, job: RedriveJob) -> bool:
        """Count the job's copies that came back to the dead-letter topic; pause past the share."""
        scanned, dead, when = self._dead.get(job.id, ({}, 0, 0.0))
        now = self.pace_clock()
        if now - when < DEAD_CHECK_S:
            return False
        action = str(job.action_id)
        if self.store is not None:
            dead += self._dead_in_store(job.group, action, scanned)
        else:
            try:
                dead = self._dead_on_cluster(job, action)
            except BackendUnavailable:
                return False  # the next check counts them
        self._dead[job.id] = (scanned, dead, now)
        with self.sessions() as s:
            resent = s.scalar(select(func.count()).select_from(ResendItem)
                              .where(ResendItem.job_id == job.id, ResendItem.status == OK)) or 0
        if resent >= MIN_RESENT_FOR_SHARE and dead / resent > job.max_dead_share:
            self._pause(job, f"paused itself: {dead} of {resent} resent came back dead (more than "
                        f"{job.max_dead_share:.0%})")
            return True
        return False

    def _dead_in_store(self, group: str, action: str, scanned: dict[int, int]) -> int:
        """Copies of the action in the store's dead-letter queues past where the last check ended."""
        assert self.store is not None
        dlq, dead = topics.dlq_topic(group), 0
        for queue_id, lo, hi in self.store.topics().get(dlq, []):
            for offset in range(max(lo, scanned.get(queue_id, lo)), hi):
                try:
                    msg = self.store.get_by_queue_offset(dlq, queue_id, offset)
                except StoreError:
                    continue
                if msg.properties.get(ACTION_PROPERTY) == action:
                    dead += 1
            scanned[queue_id] = hi
        return dead

    def _dead_on_cluster(self, job: RedriveJob, action: str) -> int:
        """Copies of the action among the newest dead letters of the group stored since the job started
        (at most DEAD_SCAN_PAGES pages of them: a job whose copies die in such numbers pauses early)."""
        window, before, dead = DeadLetterWindow(begin_ms=job.started_at_ms or job.created_at_ms), None, 0
        for _ in range(DEAD_SCAN_PAGES):
            page = self.backend.dead_letter_page(job.group, window, before, dead_letters.MAX_LIMIT)
            dead += sum(1 for m in page.messages if m.properties.get(ACTION_PROPERTY) == action)
            if page.next_position is None:
                break
            before = page.next_position
        return dead
