"""A redrive job's dry run over 100,000 dead letters stays under 200 MiB of extra memory
(issue 25 #16): the matches come from the dead-letter index, the items go in as rows."""

from __future__ import annotations

import time
import tracemalloc

import pytest

from app.db import make_engine, migrate, session_factory
from app.roles import SYSTEM
from app.services import redrive
from app.services.dead_letters import DeadLetterCache, Filter
from store.clock import FakeClock
from store.engine.config import StoreConfig
from store.format import topics
from store.log.geometry import StoreGeometry
from store.message_store import MessageStore, NewMessage

GROUP = "GID_memory"
DEAD_LETTERS = 100_000
MIB = 1 << 20


@pytest.mark.slow
def test_a_dry_run_of_100000_dead_letters_stays_under_200_mib(tmp_path):
    url = f"sqlite:///{tmp_path}/operator.db"
    migrate(url)
    engine = make_engine(url)
    sessions = session_factory(engine)
    clock = FakeClock(time.time_ns() // 1_000_000)
    geometry = StoreGeometry(commitlog_file_size=64 * MIB, index_slots=200_000, index_entries=800_000)
    config = StoreConfig(geometry=geometry, flush="async", trace=False, put_wait_ms=60_000)
    with MessageStore.open(tmp_path / "store", config, clock=clock) as store:
        dlq = topics.dlq_topic(GROUP)
        for start in range(0, DEAD_LETTERS, 10_000):
            store.put_many([NewMessage(dlq, b"x" * 100, keys=[f"k{n}"], queue_id=0, reconsume_times=1,
                                       properties={topics.DLQ_REASON: "1 delivery attempts failed",
                                                   topics.RETRY_TOPIC: "Orders"})
                            for n in range(start, start + 10_000)])
        tracemalloc.start()
        try:
            view = redrive.create_job(store, sessions, clock, DeadLetterCache(), GROUP, Filter(),
                                      destination="topic", rate_per_s=100, dry_run=True, actor=SYSTEM)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert view.total == DEAD_LETTERS and view.state == "planned"
    assert peak < 200 * MIB, f"{peak / MIB:.0f} MiB (before issue 25: 354 MiB)"
    engine.dispose()
