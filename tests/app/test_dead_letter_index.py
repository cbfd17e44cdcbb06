"""The dead-letter inbox reads a page from the store's dead-letter index: a page, a reason
filter, a later page by its cursor cost the same records and statements at 200 dead letters and
at 2,000 (issue 25 #16: a reason filter read every dead letter and its trace, 80-98 s at
102,000). The index is a projection: rebuilt from the log when lost or torn, kept in memory
for a read-only store."""

from __future__ import annotations

import os
import shutil
import time

from sqlalchemy import event

from app.db import make_engine, migrate, session_factory
from app.models import AuditEntry, ResendItem
from app.services.dead_letters import DeadLetterCache, Filter, inbox
from store.clock import FakeClock
from store.format import topics
from store.log.paths import DEAD_LETTER_DIR, DEAD_LETTER_UNITS_FILE
from store.message_store import MessageStore, NewMessage
from tests.store.helpers import small_config

GROUP = "GID_index"
DLQ = topics.dlq_topic(GROUP)
REASONS = ("1 delivery attempts failed; last: card declined", "1 delivery attempts failed; last: timeout")


def dead_letters(store: MessageStore, count: int) -> None:
    """`count` dead letters as the broker writes them (reason property, origin), in bulk."""
    store.put_many([NewMessage(DLQ, b"x" * 200, tags="T", keys=[f"k{n}"], queue_id=0, reconsume_times=1,
                               properties={topics.DLQ_REASON: REASONS[0 if n % 7 == 0 else 1],
                                           topics.RETRY_TOPIC: "Orders"})
                    for n in range(count)])


class Reads:
    """Counts what an inbox request reads: records, traces and statements."""

    def __init__(self, store: MessageStore, engine):
        self.records = self.traces = 0
        self.statements: list[str] = []
        real_read, real_get, real_timeline = store.read, store.get_by_queue_offset, store.timeline

        def read(*args):
            self.records += 1
            return real_read(*args)

        def get(*args):
            self.records += 1
            return real_get(*args)

        def timeline(*args, **kwargs):
            self.traces += 1
            return real_timeline(*args, **kwargs)

        store.read, store.get_by_queue_offset, store.timeline = read, get, timeline
        event.listen(engine, "before_cursor_execute", lambda _c, _cur, sql, *_: self.statements.append(sql))

    def cost(self) -> tuple[int, int, int]:
        found = (self.records, self.traces, len(self.statements))
        self.records = self.traces = 0
        self.statements.clear()
        return found


def database(tmp_path):
    url = f"sqlite:///{tmp_path}/operator.db"
    migrate(url)
    engine = make_engine(url)
    return engine, session_factory(engine)


def page_costs(tmp_path, count: int) -> tuple[list[tuple[int, int, int]], list]:
    """The cost of a first page, its next page and two reason filters, after one warm-up request."""
    engine, sessions = database(tmp_path)
    clock = FakeClock(time.time_ns() // 1_000_000)
    with MessageStore.open(tmp_path / "store", small_config(), clock=clock) as store:
        dead_letters(store, count)
        cache = DeadLetterCache()
        inbox(store, sessions, clock, cache, GROUP, Filter(), limit=20)
        reads = Reads(store, engine)
        costs, pages = [], []
        first = inbox(store, sessions, clock, cache, GROUP, Filter(), limit=20)
        costs.append(reads.cost())
        second = inbox(store, sessions, clock, cache, GROUP, Filter(), cursor=first.next_cursor, limit=20)
        costs.append(reads.cost())
        declined = inbox(store, sessions, clock, cache, GROUP, Filter(reason="DECLINED"), limit=20)
        costs.append(reads.cost())
        waiting = inbox(store, sessions, clock, cache, GROUP, Filter(reason="timeout", state="waiting"), limit=20)
        costs.append(reads.cost())
        pages = [first, second, declined, waiting]
    engine.dispose()
    return costs, pages


def test_a_page_costs_the_same_at_200_dead_letters_and_at_2000(tmp_path):
    small, small_pages = page_costs(tmp_path / "small", 200)
    large, large_pages = page_costs(tmp_path / "large", 2_000)
    assert small == large
    assert all(records <= 20 and traces == 0 for records, traces, _ in large)
    first, second, declined, waiting = large_pages
    assert [m.keys for m in first.messages[:2]] == [["k1999"], ["k1998"]] and first.total == 2_000
    assert second.messages[0].keys == ["k1979"] and len(second.messages) == 20
    assert declined.total == len(range(0, 2_000, 7)) and all("declined" in m.reason for m in declined.messages)
    assert declined.messages[0].keys == ["k1995"]  # 1995 = 7 * 285
    assert waiting.total == 2_000 - declined.total and waiting.counts["waiting"] == waiting.total
    assert small_pages[2].total == len(range(0, 200, 7))


def test_resent_dead_letters_come_from_one_query_while_the_resends_do_not_change(tmp_path):
    engine, sessions = database(tmp_path)
    clock = FakeClock(time.time_ns() // 1_000_000)
    with MessageStore.open(tmp_path / "store", small_config(), clock=clock) as store:
        dead_letters(store, 1_200)
        cache = DeadLetterCache()
        everyone = inbox(store, sessions, clock, cache, GROUP, Filter(), limit=500).messages
        with sessions.begin() as s:
            action = AuditEntry(at_ms=1, actor="alice", action="resend", target=GROUP)
            s.add(action)
            s.flush()
            s.add_all([ResendItem(action_id=action.id, dead_letter_id=m.offset_msg_id, group=GROUP,
                                  destination="Orders", lookup_key=f"u{n}", status="ok", at_ms=2, actor="alice")
                       for n, m in enumerate(everyone[:300])])
        reads = Reads(store, engine)
        page = inbox(store, sessions, clock, cache, GROUP, Filter(), limit=20)
        assert page.counts == {"waiting": 900, "resent": 300, "failed_again": 0}
        assert [row.state for row in page.messages] == ["resent"] * 20
        assert all(row.resend["actor"] == "alice" for row in page.messages)
        reads.cost()
        waiting = inbox(store, sessions, clock, cache, GROUP, Filter(state="waiting"), limit=20)
        assert waiting.messages[0].keys == ["k899"] and waiting.total == 900
        _, _, statements = reads.cost()
        assert statements == 2  # the resend items' version, the page's resends: not the resent set again
    engine.dispose()


def send_back_dead_letters(store: MessageStore, count: int) -> None:
    for n in range(count):
        put = store.put(NewMessage("Orders", b"x" * 100, keys=[f"s{n}"], tags="T"))
        store.send_back(put.phys_offset, GROUP, delay_level=-1 if n % 2 else 0, max_reconsume_times=0)


def test_reasons_of_records_without_one_come_from_the_trace_and_survive_a_rebuild(tmp_path):
    """A send-back writes the dead letter as RocketMQ does (no reason property): the reason comes
    from the DEAD_LETTER trace event dispatch projects; a lost or torn index is rebuilt from the log."""
    engine, sessions = database(tmp_path)
    clock = FakeClock(time.time_ns() // 1_000_000)
    config = small_config(trace=True)

    def asked() -> list[list[str]]:
        with MessageStore.open(tmp_path / "store", config, clock=clock) as store:
            found = inbox(store, sessions, clock, DeadLetterCache(), GROUP, Filter(reason="no more retries"))
            return [m.keys for m in found.messages]

    with MessageStore.open(tmp_path / "store", config, clock=clock) as store:
        send_back_dead_letters(store, 6)
        reads = Reads(store, engine)
        found = inbox(store, sessions, clock, DeadLetterCache(), GROUP, Filter(reason="no more retries"))
        assert [m.keys for m in found.messages] == [["s5"], ["s3"], ["s1"]]
        assert reads.cost()[1] == 0  # no trace was read for the filter
    assert asked() == [["s5"], ["s3"], ["s1"]]
    shutil.rmtree(tmp_path / "store" / DEAD_LETTER_DIR)
    assert asked() == [["s5"], ["s3"], ["s1"]]
    units = tmp_path / "store" / DEAD_LETTER_DIR / DLQ / "0" / DEAD_LETTER_UNITS_FILE
    os.truncate(units, units.stat().st_size - 7)  # a torn last unit
    assert asked() == [["s5"], ["s3"], ["s1"]]
    engine.dispose()


def test_a_read_only_store_is_indexed_in_memory(tmp_path):
    engine, sessions = database(tmp_path)
    clock = FakeClock(time.time_ns() // 1_000_000)
    with MessageStore.open(tmp_path / "store", small_config(), clock=clock) as store:
        dead_letters(store, 40)
    shutil.rmtree(tmp_path / "store" / DEAD_LETTER_DIR)
    before = sorted(str(p.relative_to(tmp_path)) for p in (tmp_path / "store").rglob("*"))
    with MessageStore.open(tmp_path / "store", small_config(), clock=clock, read_only=True) as store:
        page = inbox(store, sessions, clock, DeadLetterCache(), GROUP, Filter(reason="declined"), limit=3)
        assert page.total == len(range(0, 40, 7)) and [m.keys for m in page.messages] == [["k35"], ["k28"], ["k21"]]
    assert sorted(str(p.relative_to(tmp_path)) for p in (tmp_path / "store").rglob("*")) == before
    engine.dispose()
