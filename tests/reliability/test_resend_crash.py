"""Acceptance (issue #10, criterion 1): resends under load, the server SIGKILLed 25 times with
the default async flush; afterwards every audit row says exactly what the store holds.

The store is prepared with dead letters of one group. Each round starts `mqlens serve`, two
threads resend batches of dead letters through the REST API (and repeat some of them, with and
without their idempotency key), and the server is killed at a random moment. A last clean start
settles what the kills cut. Then, reading the operator database and the store (read-only): no
audit row is pending; an item is ok if and only if its copy exists; each copy carries the marks
of exactly one ok item; no dead letter has more than one copy."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from app.db import make_engine, session_factory
from app.models import AuditEntry, ResendItem
from app.services.resend import RESEND_DEAD_LETTERS
from store.clock import SystemClock
from store.format import topics
from store.log.geometry import StoreGeometry
from store.message_store import MessageStore, NewMessage, StoreConfig
from tests.live_server import ADMIN_HEADERS, LiveServer

pytestmark = pytest.mark.slow  # runs first (tests/conftest.py)

ROUNDS = 25
DEAD_LETTERS = 1_200
BATCH = 3
SENDERS = 2
TOPIC = "Orders"
GROUP = "GID_crash"
SEED = 1025
SETTINGS = {"commitlog_file_size": 4 * 1024 * 1024, "cq_file_size": 20 * 8192, "index_slots": 8192,
            "index_entries": 65_536}


def prepare(store_dir: Path, group: str = GROUP, count: int = DEAD_LETTERS,
            settings: dict[str, int] = SETTINGS, topic: str = TOPIC) -> list[str]:
    """A store whose group dead-lettered `count` messages of `topic`; their offset ids."""
    config = StoreConfig(geometry=StoreGeometry(**settings), flush="async", schedule_interval_ms=0)
    with MessageStore.open(store_dir, config, clock=SystemClock()) as store:
        store.metadata.update_group(group, max_reconsume_times=0)
        for start in range(0, count, 1000):
            store.put_many([NewMessage(topic=topic, body=f"order {n}".encode(), keys=[f"o-{n}"])
                            for n in range(start, min(count, start + 1000))])
        while received := store.receive(group, topic, 1000, 60_000):
            for r in received:
                store.nack(group, r.receipt_handle, "poison")
        dlq = topics.dlq_topic(group)
        queue = store.queues.get(dlq, 0)
        return [store.get_by_queue_offset(dlq, 0, n).offset_msg_id for n in range(queue.min_offset, queue.max_offset)]


class Sender(threading.Thread):
    def __init__(self, base_url: str, batches: list[list[str]], lock: threading.Lock, rng: random.Random,
                 sent: list[tuple[str, list[str]]]):
        super().__init__(daemon=True)
        self.client = httpx.Client(base_url=base_url, headers=ADMIN_HEADERS, timeout=10)
        self.batches, self.lock, self.rng, self.sent = batches, lock, rng, sent

    def run(self) -> None:
        try:
            while True:
                with self.lock:
                    if not self.batches:
                        return
                    if self.sent and self.rng.random() < 0.2:  # a repeat: a double click, or a retry
                        key, ids = self.rng.choice(self.sent)
                        key = key if self.rng.random() < 0.5 else None
                    else:
                        ids = self.batches.pop()
                        key = f"k-{ids[0]}"
                        self.sent.append((key, ids))
                headers = {"Idempotency-Key": key} if key else {}
                r = self.client.post(f"/api/dlq/{GROUP}/resend", json={"message_ids": ids}, headers=headers)
                assert r.status_code in (200, 409), r.text
        except httpx.TransportError:
            return  # the server was killed
        finally:
            self.client.close()


def test_audit_rows_match_the_store_through_25_kills(tmp_path: Path):
    data = tmp_path / "data"
    dead_ids = prepare(data / "store")
    assert len(dead_ids) == DEAD_LETTERS
    rng = random.Random(SEED)
    batches = [dead_ids[i:i + BATCH] for i in range(0, len(dead_ids), BATCH)]
    rng.shuffle(batches)
    sent: list[tuple[str, list[str]]] = []
    lock = threading.Lock()
    with LiveServer(data, tmp_path / "server.log", {**SETTINGS, "flush": "async"}) as server:
        for _ in range(ROUNDS):
            server.start()
            senders = [Sender(server.base_url, batches, lock, rng, sent) for _ in range(SENDERS)]
            for sender in senders:
                sender.start()
            time.sleep(rng.uniform(0.05, 0.6))  # the moment of the crash, chosen at random
            server.kill()
            for sender in senders:
                sender.join(timeout=30)
                assert not sender.is_alive()
        assert len(sent) > ROUNDS
        server.start()  # settles what the last kill cut
        assert server.stop() == 0

    engine = make_engine(f"sqlite:///{data / 'mqlens.db'}")
    try:
        with session_factory(engine)() as s:
            entries = list(s.scalars(select(AuditEntry).where(AuditEntry.action == RESEND_DEAD_LETTERS)))
            items = list(s.scalars(select(ResendItem)))
    finally:
        engine.dispose()
    assert entries and all(e.outcome in ("ok", "failed") for e in entries), "an audit row is still pending"
    config = StoreConfig(geometry=StoreGeometry(**SETTINGS))
    with MessageStore.open(data / "store", config, read_only=True) as store:
        destination = topics.pop_retry_topic(GROUP, TOPIC)
        copies: Counter = Counter()
        per_dead_letter: Counter = Counter()
        for queue_id, lo, hi in store.topics().get(destination, []):
            for offset in range(lo, hi):
                copy = store.get_by_queue_offset(destination, queue_id, offset)
                marks = (copy.properties[topics.RESEND_ACTION], copy.properties[topics.RESENT_FROM])
                copies[marks] += 1
                per_dead_letter[marks[1]] += 1
        assert store.check().ok
    ok_items = {(str(i.action_id), i.dead_letter_id) for i in items if i.status == "ok"}
    assert all(i.status in ("ok", "failed") for i in items)
    assert set(copies) == ok_items, "an item's outcome disagrees with the store"
    assert all(count == 1 for count in copies.values()), "a copy was made twice for one item"
    assert all(count == 1 for count in per_dead_letter.values()), "a dead letter was resent twice"
    for entry in entries:
        mine = [i for i in items if i.action_id == entry.id]
        assert (entry.outcome == "ok") == any(i.status == "ok" for i in mine)
    assert len(ok_items) >= len(sent) // 2  # most batches went through
    settled = [e for e in entries if "restart" in (e.outcome_detail or "") or "interrupted" in (e.outcome_detail or "")]
    assert settled, "no kill cut a resend: the crash path was not tried"
