"""The dead-letter inbox keeps each queue's summaries between requests: a request reads only the
dead letters written since the last one, and what retention deleted leaves the inbox, so a
long-running console answers the same as a fresh one (issue #14: the inbox read and held every
dead letter on every request)."""

from __future__ import annotations

import os
import time

from sqlalchemy import event

from app.db import make_engine, migrate, session_factory
from app.models import AuditEntry, ResendItem
from app.services.dead_letters import DeadLetterCache, Filter, Summary, inbox
from app.services.resend import LOOKUP_CHUNK
from store.clock import FakeClock
from store.format import topics
from store.log.retention import HOUR_MS
from store.message_store import MessageStore, NewMessage
from tests.store.helpers import small_config

GROUP = "GID_cache"
DLQ = topics.dlq_topic(GROUP)


def dead_letter(store: MessageStore, n: int) -> None:
    put = store.put(NewMessage("Orders", b"x" * 900, keys=[f"k{n}"], tags="T"))
    store.send_back(put.phys_offset, GROUP, delay_level=-1)


def fresh(store: MessageStore) -> list[Summary]:
    return DeadLetterCache().summaries(store, [DLQ])[0]


def test_the_kept_summaries_follow_new_dead_letters_and_retention(tmp_path):
    clock = FakeClock(time.time_ns() // 1_000_000)
    with MessageStore.open(tmp_path, small_config(), clock=clock) as store:
        cache = DeadLetterCache()
        for n in range(40):
            dead_letter(store, n)
        first, truncated = cache.summaries(store, [DLQ])
        assert not truncated and len(first) == 40 and first == fresh(store)
        assert [s.keys for s in first[:2]] == [("k39",), ("k38",)]

        reads = []
        real = store.get_by_queue_offset
        store.get_by_queue_offset = lambda *args: reads.append(args) or real(*args)
        for n in range(40, 45):
            dead_letter(store, n)
        again, _ = cache.summaries(store, [DLQ])
        assert [offset for _, _, offset in reads] == list(range(40, 45))  # only the new ones were read
        del store.get_by_queue_offset
        assert again == fresh(store) and len(again) == 45

        segments = [path for _, path in store.commitlog.segments()]
        old = (clock.now_ms() - 100 * HOUR_MS) / 1000
        for path in segments[:2]:
            os.utime(path, (old, old))
        assert store.delete_expired().deleted == segments[:2]
        [(_, low, _)] = store.topics()[DLQ]
        assert low > 0
        kept, _ = cache.summaries(store, [DLQ])
        assert kept == fresh(store) and len(kept) == 45 - low


def test_an_inbox_request_asks_the_database_about_its_page_not_every_dead_letter(tmp_path):
    """Which dead letters were resent comes from one indexed query of one column; the resend
    details only for the rows shown (issue #14: every request asked about all N, in chunks)."""
    url = f"sqlite:///{tmp_path}/operator.db"
    migrate(url)
    engine = make_engine(url)
    sessions = session_factory(engine)
    statements: list[tuple[str, object]] = []
    event.listen(engine, "before_cursor_execute",
                 lambda _conn, _cursor, statement, parameters, *_: statements.append((statement, parameters)))
    clock = FakeClock(time.time_ns() // 1_000_000)
    with MessageStore.open(tmp_path / "store", small_config(), clock=clock) as store:
        for n in range(1_200):
            dead_letter(store, n)
        cache = DeadLetterCache()
        everyone, _ = cache.summaries(store, [DLQ])
        with sessions.begin() as s:
            action = AuditEntry(at_ms=1, actor="alice", action="resend", target=GROUP)
            s.add(action)
            s.flush()
            s.add_all([ResendItem(action_id=action.id, dead_letter_id=m.offset_msg_id, group=GROUP,
                                  destination="Orders", lookup_key=f"u{n}", status="ok", at_ms=2, actor="alice")
                       for n, m in enumerate(everyone[:1_000])])
        statements.clear()
        page = inbox(store, sessions, clock, cache, GROUP, Filter(), limit=20)
    assert page.total == 1_200
    assert page.counts == {"waiting": 200, "resent": 1_000, "failed_again": 0}
    assert [row.state for row in page.messages] == ["resent"] * 20
    assert all(row.resend["actor"] == "alice" for row in page.messages)
    queries = [(sql, params) for sql, params in statements if sql.lstrip().upper().startswith("SELECT")]
    assert len(queries) == 2
    assert max(len(params) for _, params in queries) <= LOOKUP_CHUNK + 2  # the page's ids (padded), two states
    with engine.connect() as conn:
        plan = conn.exec_driver_sql(
            "EXPLAIN QUERY PLAN SELECT DISTINCT dead_letter_id FROM resend_items "
            "WHERE status IN ('ok', 'pending') AND \"group\" = 'g'").all()
    assert any("ix_resend_items_group_status" in str(step) for step in plan)
    engine.dispose()


def test_the_merged_list_is_kept_until_a_queue_changes(tmp_path):
    with MessageStore.open(tmp_path, small_config()) as store:
        cache = DeadLetterCache()
        for n in range(5):
            dead_letter(store, n)
        first, _ = cache.summaries(store, [DLQ])
        again, _ = cache.summaries(store, [DLQ])
        assert again is first  # nothing new: no copy, no sort
        dead_letter(store, 5)
        third, _ = cache.summaries(store, [DLQ])
        assert third is not first and [s.keys for s in third] == [(f"k{n}",) for n in range(5, -1, -1)]
        assert [s.keys for s in first] == [(f"k{n}",) for n in range(4, -1, -1)]  # a list handed out never changes
