"""The dead-letter inbox keeps each queue's summaries between requests: a request reads only the
dead letters written since the last one, and what retention deleted leaves the inbox, so a
long-running console answers the same as a fresh one (issue #14: the inbox read and held every
dead letter on every request)."""

from __future__ import annotations

import os
import time

from app.services.dead_letters import DeadLetterCache, Summary
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
