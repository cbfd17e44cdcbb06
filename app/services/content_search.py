"""Content search jobs: the messages whose body or a property holds a text or matches a regular
expression, within a time window and topics, found by a process of its own (store.search.worker)
that this module starts, reads as it goes and ends on cancel or when the search runs too long.

Jobs live in memory only: a search reads the store and changes nothing, so a restart forgets it.
Each is seen by the caller who started it alone."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from app.roles import Principal
from app.services import audit
from app.services.errors import ConflictError, InvalidRequestError, NotFoundError
from store.clock import Clock
from store.search.matching import ContentQuery
from store.search.scan import MAX_TOPICS

SEARCH_CONTENTS = "search_contents"  # the audit action: a search reads bodies, whoever may see them
RUNNING, FINISHED, CANCELLED, TIMED_OUT, FAILED = "running", "finished", "cancelled", "timed out", "failed"
MAX_TEXT = 200  # characters of a text or a regular expression
MAX_SEARCH_TOPICS = 20
MAX_HITS, DEFAULT_HITS = 1000, 100
MAX_SECONDS, DEFAULT_SECONDS = 300, 60
MAX_BYTES = 64 << 30  # of records one search walks at most
MAX_RUNNING = 2  # searches at once, for the whole server: each takes a core
KEPT = 50  # finished searches kept for their callers to read
POLL_S = 0.1
_PROJECT = Path(__file__).resolve().parents[2]
_TOPIC = re.compile(r"^[^\x00-\x1f]{1,255}$")


@dataclass(frozen=True)
class SearchRequest:
    text: str
    regex: bool = False
    in_body: bool = True
    in_properties: bool = True
    topics: tuple[str, ...] = ()
    begin_ms: int | None = None
    end_ms: int | None = None
    max_hits: int = DEFAULT_HITS
    max_seconds: int = DEFAULT_SECONDS


@dataclass
class SearchView:
    id: str
    state: str
    owner: str
    text: str
    regex: bool
    in_body: bool
    in_properties: bool
    topics: list[str]
    begin_ms: int | None
    end_ms: int | None
    max_hits: int
    max_seconds: int
    started_at_ms: int
    finished_at_ms: int | None = None
    elapsed_ms: int = 0
    scanned_bytes: int = 0
    window_bytes: int = 0
    records: int = 0
    reached_ms: int | None = None  # store time the walk had reached
    hits: list[dict] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def active(self) -> bool:
        return self.state == RUNNING

    @property
    def progress(self) -> float:
        if self.state == FINISHED:
            return 1.0
        return min(1.0, self.scanned_bytes / self.window_bytes) if self.window_bytes else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.scanned_bytes / 1e6 / (self.elapsed_ms / 1000) if self.elapsed_ms else 0.0


def content_query(request: SearchRequest) -> ContentQuery:
    """The request checked against the bounds: a 400 with the reason otherwise."""
    text = request.text
    if not text or len(text) > MAX_TEXT:
        raise InvalidRequestError(f"the text to find must have 1 to {MAX_TEXT} characters")
    if request.regex:
        try:
            re.compile(text)
        except re.error as exc:
            raise InvalidRequestError(f"the regular expression does not compile: {exc}") from None
    if not (request.in_body or request.in_properties):
        raise InvalidRequestError("search the body, the properties or both")
    topics = tuple(dict.fromkeys(t.strip() for t in request.topics if t.strip()))
    if len(topics) > min(MAX_SEARCH_TOPICS, MAX_TOPICS):
        raise InvalidRequestError(f"at most {MAX_SEARCH_TOPICS} topics in one search")
    for topic in topics:
        if not _TOPIC.match(topic):
            raise InvalidRequestError(f"{topic[:40]!r} is not a topic name")
    begin = request.begin_ms if request.begin_ms is not None else 0
    end = request.end_ms if request.end_ms is not None else 2**63 - 1
    if begin > end:
        raise InvalidRequestError("the time window ends before it begins")
    if not 1 <= request.max_hits <= MAX_HITS:
        raise InvalidRequestError(f"max_hits must be within 1..{MAX_HITS}")
    if not 1 <= request.max_seconds <= MAX_SECONDS:
        raise InvalidRequestError(f"max_seconds must be within 1..{MAX_SECONDS}")
    return ContentQuery(text, request.regex, request.in_body, request.in_properties, topics, begin, end)


@dataclass(frozen=True)
class LogSnapshot:
    """The commit log's segments up to its end when the search starts (later records are not searched)."""

    segments: list[tuple[int, str]]
    file_size: int
    log_end: int

    @classmethod
    def of(cls, commitlog) -> LogSnapshot:
        end = commitlog.end  # first: every segment listed after it holds the bytes up to it
        return cls([(base, str(path)) for base, path in commitlog.segments()], commitlog.file_size, end)


def owner_of(principal: Principal) -> str:
    return f"{principal.kind}:{principal.name}"


def start_audited(searches: ContentSearches, sessions: sessionmaker[Session], clock: Clock, snapshot: LogSnapshot,
                  request: SearchRequest, actor: Principal) -> SearchView:
    """Start a search for `actor` and write its audit row: what was looked for, where and when."""
    view = searches.start(snapshot, request, owner_of(actor))
    with sessions.begin() as s:
        audit.record(s, clock, actor=actor, action=SEARCH_CONTENTS, target=f"content-search:{view.id}",
                     detail={"text": view.text, "regex": view.regex, "in_body": view.in_body,
                             "in_properties": view.in_properties, "topics": view.topics, "begin_ms": view.begin_ms,
                             "end_ms": view.end_ms})
    return view


class _Job:
    def __init__(self, view: SearchView):
        self.view = view
        self.cancel = threading.Event()
        self.lock = threading.Lock()


class ContentSearches:
    """The server's content searches: at most MAX_RUNNING at once, the newest KEPT remembered."""

    def __init__(self, clock: Clock, *, max_running: int = MAX_RUNNING, max_bytes: int = MAX_BYTES,
                 monotonic: Callable[[], float] = time.monotonic):
        self.clock, self.max_running, self.max_bytes, self.monotonic = clock, max_running, max_bytes, monotonic
        self._jobs: dict[str, _Job] = {}
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def start(self, snapshot: LogSnapshot, request: SearchRequest, owner: str) -> SearchView:
        query = content_query(request)
        view = SearchView(id=secrets.token_hex(8), state=RUNNING, owner=owner, text=query.text, regex=query.regex,
                          in_body=query.in_body, in_properties=query.in_properties, topics=list(query.topics),
                          begin_ms=request.begin_ms, end_ms=request.end_ms, max_hits=request.max_hits,
                          max_seconds=request.max_seconds, started_at_ms=self.clock.now_ms())
        job = _Job(view)
        with self._lock:
            running = sum(1 for j in self._jobs.values() if j.view.active)
            if running >= self.max_running:
                raise ConflictError(f"{running} content searches run now, the most at once: wait for one to "
                                    "finish or cancel yours")
            self._jobs[view.id] = job
            self._forget_old()
        payload = {"query": {"text": query.text, "regex": query.regex, "in_body": query.in_body,
                             "in_properties": query.in_properties, "topics": list(query.topics),
                             "begin_ms": query.begin_ms, "end_ms": query.end_ms},
                   "segments": snapshot.segments, "file_size": snapshot.file_size, "log_end": snapshot.log_end,
                   "max_hits": request.max_hits, "max_bytes": self.max_bytes}
        thread = threading.Thread(target=self._run, args=(job, payload), name=f"content-search-{view.id}",
                                  daemon=True)
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()
        return self._copy(job)

    def get(self, search_id: str, owner: str) -> SearchView:
        return self._copy(self._owned(search_id, owner))

    def cancel(self, search_id: str, owner: str) -> SearchView:
        job = self._owned(search_id, owner)
        job.cancel.set()
        self.wait(search_id, timeout_s=5)
        return self._copy(job)

    def wait(self, search_id: str, timeout_s: float) -> SearchView | None:
        """The search once it no longer runs (None: still running after `timeout_s`)."""
        deadline = self.monotonic() + timeout_s
        job = self._jobs.get(search_id)
        while job is not None and job.view.active and self.monotonic() < deadline:
            time.sleep(POLL_S / 2)
        return None if job is None or job.view.active else self._copy(job)

    def close(self) -> None:
        for job in list(self._jobs.values()):
            job.cancel.set()
        for thread in self._threads:
            thread.join(timeout=5)

    def _owned(self, search_id: str, owner: str) -> _Job:
        job = self._jobs.get(search_id)
        if job is None or job.view.owner != owner:
            raise NotFoundError(f"no content search {search_id[:40]!r} of yours (searches are kept for a while, "
                                "and only in this server's memory)")
        return job

    def _forget_old(self) -> None:
        finished = [k for k, j in self._jobs.items() if not j.view.active]
        for key in finished[: max(0, len(finished) - KEPT)]:
            del self._jobs[key]

    @staticmethod
    def _copy(job: _Job) -> SearchView:
        with job.lock:
            return replace(job.view, topics=list(job.view.topics), hits=list(job.view.hits),
                           problems=list(job.view.problems))

    # -- the worker process ---------------------------------------------------------------------
    def _run(self, job: _Job, payload: dict) -> None:
        started = self.monotonic()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(_PROJECT), os.environ.get("PYTHONPATH")]))}
        try:
            proc = subprocess.Popen([sys.executable, "-m", "store.search.worker"], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)
        except OSError as exc:
            self._end(job, FAILED, started, f"the search process did not start: {exc}")
            return
        state, error = FINISHED, None
        try:
            proc.stdin.write(json.dumps(payload).encode())
            proc.stdin.close()
            pending = b""
            deadline = started + job.view.max_seconds
            fd = proc.stdout.fileno()
            while True:
                if job.cancel.is_set():
                    state = CANCELLED
                    break
                if self.monotonic() >= deadline:
                    state = TIMED_OUT
                    break
                ready, _, _ = select.select([fd], [], [], POLL_S)
                if not ready:
                    continue
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    break
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    self._apply(job, json.loads(line), started)
        except (OSError, ValueError) as exc:
            state, error = FAILED, f"the search process answered badly: {exc}"
        finally:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            proc.stdout.close()
            proc.stderr.close()
        if state == FINISHED and proc.returncode != 0:
            state, error = FAILED, (stderr.strip().splitlines() or ["no output"])[-1][:500]
        if state == TIMED_OUT:
            error = f"stopped after {job.view.max_seconds} s, the time this search was given"
        self._end(job, state, started, error)

    def _apply(self, job: _Job, line: dict, started: float) -> None:
        with job.lock:
            view = job.view
            view.elapsed_ms = int((self.monotonic() - started) * 1000)
            if "hit" in line:
                view.hits.append(line["hit"])
            elif "problem" in line:
                view.problems.append(line["problem"])
            else:
                progress = line.get("progress") or line.get("done") or {}
                view.scanned_bytes = progress.get("scanned_bytes", view.scanned_bytes)
                view.window_bytes = progress.get("window_bytes", view.window_bytes)
                view.records = progress.get("records", view.records)
                view.reached_ms = progress.get("reached_ms", view.reached_ms)

    def _end(self, job: _Job, state: str, started: float, error: str | None) -> None:
        with job.lock:
            job.view.state, job.view.error = state, error
            job.view.elapsed_ms = int((self.monotonic() - started) * 1000)
            job.view.finished_at_ms = self.clock.now_ms()
