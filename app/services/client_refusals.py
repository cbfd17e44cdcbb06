"""Refused gRPC clients in the audit log, without a flood of bad calls flooding it.

Refusals alike (one access key, one address, one reason) within one minute of the clock make one
audit row, whose count grows as more come. Noting a refusal only touches memory, so the caller
never waits for the database; flush() writes what came since the last flush (the credential
verifier's background thread calls it every few seconds)."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from app.models import AuditEntry
from app.roles import ANONYMOUS, Principal
from app.services import audit
from store.clock import Clock

REFUSE_CLIENT = "refuse_client"
WINDOW_MS = 60_000
# Kinds of refusal (key, address, reason) told apart at once; beyond, they are counted together
# under OTHERS, so that calls with ever new access keys or addresses cannot use up the memory.
MAX_KINDS = 1_000
OTHERS = "(others)"
MAX_NAME_CHARS = 128


@dataclass
class _Tally:
    first_at_ms: int
    last_at_ms: int
    message: str
    count: int = 0
    written: int = 0  # of count, how many the audit row says
    entry_id: int | None = None


_Kind = tuple[str, str, str, int]  # access key ("" for none), address, reason, minute


def _shown(text: str) -> str:
    """A name the client chose, as the audit log may hold it: printable and bounded."""
    text = text if text.isprintable() else text.encode("unicode_escape").decode("ascii")
    return text[:MAX_NAME_CHARS]


class RefusalLog:
    def __init__(self, clock: Clock, max_kinds: int = MAX_KINDS):
        self.clock, self.max_kinds = clock, max_kinds
        self._tallies: dict[_Kind, _Tally] = {}
        self._lock = threading.Lock()
        self._flushing = threading.Lock()

    def note(self, access_key: str | None, address: str, reason: str, message: str) -> None:
        """A refused call (no database work: flush writes it)."""
        now = self.clock.now_ms()
        kind = (_shown(access_key or ""), _shown(address), reason, now // WINDOW_MS)
        with self._lock:
            tally = self._tallies.get(kind)
            if tally is None:
                if len(self._tallies) >= self.max_kinds:
                    kind = (OTHERS, OTHERS, reason, kind[3])
                    tally = self._tallies.get(kind)
                if tally is None:
                    tally = self._tallies[kind] = _Tally(now, now, message[:2000])
            tally.count += 1
            tally.last_at_ms = now

    def pending(self) -> int:
        """Refusals noted that no audit row counts yet."""
        with self._lock:
            return sum(tally.count - tally.written for tally in self._tallies.values())

    def flush(self, sessions: sessionmaker[Session]) -> None:
        """Write the refusals noted since the last flush: a new row per new kind this minute, a
        higher count in the row of a kind seen before."""
        with self._flushing:
            with self._lock:
                due = [(kind, tally, tally.count, tally.last_at_ms) for kind, tally in self._tallies.items()
                       if tally.count > tally.written]
            if due:
                written = self._write(sessions, due)
                with self._lock:
                    for (_, tally, count, _), entry_id in zip(due, written, strict=True):
                        tally.written, tally.entry_id = count, entry_id
            minute = self.clock.now_ms() // WINDOW_MS
            with self._lock:
                for kind in [kind for kind, tally in self._tallies.items()
                             if kind[3] < minute and tally.written == tally.count]:
                    del self._tallies[kind]

    def _write(self, sessions: sessionmaker[Session], due: list[tuple[_Kind, _Tally, int, int]]) -> list[int]:
        ids = []
        with sessions.begin() as s:
            for (access_key, address, reason, _), tally, count, last_at_ms in due:
                detail = {"access_key": access_key or None, "address": address, "reason": reason, "count": count,
                          "first_at_ms": tally.first_at_ms, "last_at_ms": last_at_ms}
                entry = s.get(AuditEntry, tally.entry_id) if tally.entry_id is not None else None
                if entry is None:
                    actor = Principal(access_key or ANONYMOUS, None, "client")
                    entry = audit.record(s, self.clock, actor=actor, action=REFUSE_CLIENT,
                                         target=f"client:{access_key or address}", detail=detail,
                                         outcome=audit.FAILED)
                    entry.at_ms, entry.outcome_detail = tally.first_at_ms, tally.message
                    s.flush()
                else:
                    entry.detail = json.dumps(detail)
                ids.append(entry.id)
        return ids
