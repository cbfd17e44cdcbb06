"""The RocketMQ 5 clients connected through the gRPC front, as the front sees them: who each is
(client id, language and version, address), what it does (producer of some topics, consumer of a
group with its subscriptions), when it was first and last heard from, and the receives it has
in flight. In memory only: a restart starts an empty list, and the clients show up again at
their next call (a heartbeat comes every 10 s).

A client is online until it says it terminates (NotifyClientTermination) or stays silent (no
call, no heartbeat, no receive in flight) for `silent_after_ms`; then it is gone, and is kept
`forget_after_ms` more so the page can say so. A gone client that calls again is online again;
one that terminated comes back only with new settings (a client id is used by one client
process, so only a late call of the ended one would otherwise revive it).

Every method is cheap and does no I/O: the gRPC front calls them on its event loop for each
call. What is kept is bounded: at most `max_sessions` clients, the gone ones dropped first
(oldest first), then the least recently heard from; texts a client sends are cut to a bound."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from store.clock import Clock

PRODUCER = "producer"
PUSH_CONSUMER = "push_consumer"
SIMPLE_CONSUMER = "simple_consumer"
CONSUMER_KINDS = frozenset({PUSH_CONSUMER, SIMPLE_CONSUMER})

SILENT_AFTER_MS = 120_000
FORGET_AFTER_MS = 3_600_000
MAX_SESSIONS = 10_000
SWEEP_EVERY_MS = 1_000  # writes look for silent and forgotten clients at most this often

MAX_ID_CHARS = 256
MAX_NAME_CHARS = 255  # groups and topics
MAX_SHORT_CHARS = 64  # kind, language, version
MAX_ADDRESS_CHARS = 128
MAX_EXPRESSION_CHARS = 1024
MAX_TOPICS = 128  # topics and subscriptions kept per client

State = Literal["online", "gone"]


@dataclass(frozen=True)
class ClientSession:
    """One client as of a snapshot."""

    client_id: str
    state: State
    kind: str | None  # producer, push_consumer, simple_consumer (or what a newer client says); None until told
    group: str | None  # a consumer's group
    topics: tuple[str, ...]  # a producer's topics
    subscriptions: dict[str, str]  # a consumer's topics and their filter expressions
    language: str | None
    version: str | None
    address: str | None  # where its calls come from (host:port)
    first_seen_ms: int
    last_seen_ms: int  # its last call of any kind
    last_heartbeat_ms: int | None
    settings_at_ms: int | None  # when it last sent its settings (Telemetry)
    in_flight_receives: int
    gone_at_ms: int | None  # when it terminated or was found silent
    gone_why: str | None  # "terminated" or "silent"

    @property
    def is_consumer(self) -> bool:
        return self.kind in CONSUMER_KINDS

    def concerns(self, topic: str) -> bool:
        return topic in self.topics or topic in self.subscriptions


@dataclass(slots=True)
class _Session:
    client_id: str
    first_seen_ms: int
    last_seen_ms: int
    kind: str | None = None
    group: str | None = None
    topics: tuple[str, ...] = ()
    subscriptions: dict[str, str] = field(default_factory=dict)
    language: str | None = None
    version: str | None = None
    address: str | None = None
    last_heartbeat_ms: int | None = None
    settings_at_ms: int | None = None
    in_flight_receives: int = 0
    gone_at_ms: int | None = None
    gone_why: str | None = None

    def view(self) -> ClientSession:
        return ClientSession(
            self.client_id, "online" if self.gone_at_ms is None else "gone", self.kind, self.group, self.topics,
            dict(self.subscriptions), self.language, self.version, self.address, self.first_seen_ms,
            self.last_seen_ms, self.last_heartbeat_ms, self.settings_at_ms, self.in_flight_receives,
            self.gone_at_ms, self.gone_why)


def _text(value: object, limit: int) -> str | None:
    if value is None:
        return None
    text = value if type(value) is str else str(value)
    return text[:limit] or None


def _topics(names: Iterable[object]) -> tuple[str, ...]:
    kept: dict[str, None] = {}
    for name in names:
        text = _text(name, MAX_NAME_CHARS)
        if text:
            kept[text] = None
            if len(kept) == MAX_TOPICS:
                break
    return tuple(kept)


def _subscriptions(given: Mapping[object, object]) -> dict[str, str]:
    kept: dict[str, str] = {}
    for topic, expression in given.items():
        name = _text(topic, MAX_NAME_CHARS)
        if name:
            kept[name] = _text(expression, MAX_EXPRESSION_CHARS) or "*"
            if len(kept) == MAX_TOPICS:
                break
    return kept


@dataclass(frozen=True)
class ClientCounts:
    producers: int  # online ones
    consumers: int
    others: int  # online, kind not told yet or unknown
    gone: int

    @property
    def online(self) -> int:
        return self.producers + self.consumers + self.others


class ClientSessions:
    """The registry; thread-safe (one lock, held briefly)."""

    def __init__(self, clock: Clock, *, silent_after_ms: int = SILENT_AFTER_MS,
                 forget_after_ms: int = FORGET_AFTER_MS, max_sessions: int = MAX_SESSIONS):
        if silent_after_ms <= 0 or forget_after_ms < 0 or max_sessions < 1:
            raise ValueError("silent_after_ms > 0, forget_after_ms >= 0 and max_sessions >= 1")
        self.clock = clock
        self.silent_after_ms = silent_after_ms
        self.forget_after_ms = forget_after_ms
        self.max_sessions = max_sessions
        self._lock = threading.Lock()
        self._online: OrderedDict[str, _Session] = OrderedDict()  # least recently heard from first
        self._gone: OrderedDict[str, _Session] = OrderedDict()  # gone longest first
        self._next_sweep_ms = 0

    # -- what the gRPC front reports -----------------------------------------------------------
    def seen(self, client_id: str, *, address: str | None = None, language: str | None = None,
             version: str | None = None) -> None:
        """Any call from the client. A client that terminated is not brought back by it."""
        with self._lock:
            session = self._touch(client_id, revive_terminated=False)
            if session is not None:
                self._describe(session, address, language, version)

    def settings(self, client_id: str, *, kind: str | None, group: str | None = None,
                 topics: Iterable[str] = (), subscriptions: Mapping[str, str] | None = None,
                 language: str | None = None, version: str | None = None, address: str | None = None) -> None:
        """The client's settings (Telemetry), sent at start and again every few minutes: they
        replace what it said before."""
        with self._lock:
            session = self._touch(client_id, revive_terminated=True)
            if session is None:
                return
            self._describe(session, address, language, version)
            session.kind = _text(kind, MAX_SHORT_CHARS)
            session.group = _text(group, MAX_NAME_CHARS)
            session.topics = _topics(topics)
            session.subscriptions = _subscriptions(subscriptions or {})
            session.settings_at_ms = session.last_seen_ms

    def heartbeat(self, client_id: str, kind: str | None = None, group: str | None = None) -> None:
        """A Heartbeat; its kind and group fill in what the settings have not told yet."""
        with self._lock:
            session = self._touch(client_id, revive_terminated=False)
            if session is None:
                return
            session.last_heartbeat_ms = session.last_seen_ms
            if session.kind is None:
                session.kind = _text(kind, MAX_SHORT_CHARS)
            if session.group is None:
                session.group = _text(group, MAX_NAME_CHARS)

    def receive_started(self, client_id: str) -> None:
        with self._lock:
            session = self._touch(client_id, revive_terminated=False)
            if session is not None:
                session.in_flight_receives += 1

    def receive_ended(self, client_id: str) -> None:
        """A receive started by receive_started ended (answered, failed or cancelled)."""
        with self._lock:
            session = self._online.get(client_id) or self._gone.get(client_id)
            if session is None:
                return
            session.in_flight_receives = max(session.in_flight_receives - 1, 0)
            if session.gone_why != "terminated":
                self._touch(client_id, revive_terminated=False)

    def terminated(self, client_id: str) -> None:
        """NotifyClientTermination: the client shuts down."""
        with self._lock:
            now = self.clock.now_ms()
            session = self._online.pop(client_id, None)
            if session is not None:
                session.last_seen_ms = max(session.last_seen_ms, now)
                self._mark_gone(session, now, "terminated")
            elif (session := self._gone.get(client_id)) is not None:
                session.gone_why = "terminated"

    # -- what the console shows ----------------------------------------------------------------
    def snapshot(self, group: str | None = None, topic: str | None = None) -> list[ClientSession]:
        """The clients known now (of `group`, of `topic` as a producer's topic or a subscription),
        online ones first, then by group, kind and client id."""
        with self._lock:
            self._sweep(self.clock.now_ms())
            views = [s.view() for s in (*self._online.values(), *self._gone.values())
                     if (group is None or s.group == group)
                     and (topic is None or topic in s.topics or topic in s.subscriptions)]
        return sorted(views, key=lambda c: (c.state != "online", c.group or "", c.kind or "", c.client_id))

    def counts(self) -> ClientCounts:
        with self._lock:
            self._sweep(self.clock.now_ms())
            producers = sum(1 for s in self._online.values() if s.kind == PRODUCER)
            consumers = sum(1 for s in self._online.values() if s.kind in CONSUMER_KINDS)
            return ClientCounts(producers, consumers, len(self._online) - producers - consumers, len(self._gone))

    # -- bookkeeping (lock held) ---------------------------------------------------------------
    def _touch(self, client_id: str, *, revive_terminated: bool) -> _Session | None:
        """The client's session, heard from now (made, or brought back when gone), or None when
        it stays gone or has no id."""
        now = self.clock.now_ms()
        if now >= self._next_sweep_ms:
            self._sweep(now)
        session = self._online.get(client_id)
        if session is not None:
            self._online.move_to_end(client_id)
        else:
            session = self._gone.get(client_id)
            if session is not None:
                if session.gone_why == "terminated" and not revive_terminated:
                    return None
                del self._gone[client_id]
                session.gone_at_ms = session.gone_why = None
            else:
                if type(client_id) is not str or not client_id:
                    return None
                client_id = client_id[:MAX_ID_CHARS]
                if client_id in self._online or client_id in self._gone:  # a longer id cut to one known
                    return self._touch(client_id, revive_terminated=revive_terminated)
                session = _Session(client_id, now, now)
                self._make_room()
            self._online[session.client_id] = session
        session.last_seen_ms = max(session.last_seen_ms, now)
        return session

    def _describe(self, session: _Session, address: str | None, language: str | None, version: str | None) -> None:
        if address is not None:
            session.address = _text(address, MAX_ADDRESS_CHARS)
        if language is not None:
            session.language = _text(language, MAX_SHORT_CHARS)
        if version is not None:
            session.version = _text(version, MAX_SHORT_CHARS)

    def _mark_gone(self, session: _Session, now: int, why: str) -> None:
        session.gone_at_ms, session.gone_why = now, why
        self._gone[session.client_id] = session

    def _make_room(self) -> None:
        """Room for one more session: the gone ones go first, the oldest first, then the client
        heard from least recently."""
        while len(self._online) + len(self._gone) >= self.max_sessions:
            if self._gone:
                self._gone.popitem(last=False)
            else:
                self._online.popitem(last=False)

    def _sweep(self, now: int) -> None:
        """Clients silent too long are gone; gone ones kept long enough are forgotten."""
        self._next_sweep_ms = now + SWEEP_EVERY_MS
        silent_before = now - self.silent_after_ms
        waiting = []  # silent but with a receive in flight: a long poll is a sign of life
        while self._online:
            client_id, session = next(iter(self._online.items()))
            if session.last_seen_ms > silent_before:
                break
            del self._online[client_id]
            if session.in_flight_receives:
                waiting.append(session)
            else:
                self._mark_gone(session, now, "silent")
        for session in reversed(waiting):
            self._online[session.client_id] = session
            self._online.move_to_end(session.client_id, last=False)
        forget_before = now - self.forget_after_ms
        while self._gone:
            session = next(iter(self._gone.values()))
            if session.gone_at_ms > forget_before:
                break
            del self._gone[session.client_id]
