"""Acceptance (issue #3, criterion 4): at-least-once delivery over the REST API through a server
restart.

The real server (`mqlens serve` in a subprocess) gets 10,000 messages over HTTP; four consumer
threads receive them with long polls and short invisible times, nack 5% of deliveries at random
(seeded) and every delivery of a few "poison" messages, and ack the rest. Halfway the server is
stopped with SIGTERM and started again on the same data directory while the consumers go on,
retrying connection errors. Afterwards the store, opened read-only, must show every message
done for the group, and every message must be acked by a consumer or be in %DLQ%group. Deliveries
of a message after a consumer's ack of it was confirmed may only come from the restart."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from store.broker.trace import TraceKind
from store.format import topics
from store.log.geometry import StoreGeometry
from store.message_store import MessageStore, StoreConfig
from tests.live_server import ADMIN_HEADERS, LiveServer, wait_until

pytestmark = pytest.mark.slow  # runs first (tests/conftest.py)

MESSAGES = 10_000
PRODUCE_BATCH = 250
POISON_EVERY = 500  # every 500th message is failed at every delivery, so it must end in the DLQ
CONSUMERS = 4
NACK_RATE = 0.05
SEED = 20240611
TOPIC = "AtLeastOnce"
GROUP = "GID_at_least_once"
MAX_RECONSUME_TIMES = 3  # 4 delivery attempts
DELAY_LEVELS = "1s 1s 1s 1s 1s"  # every retry backoff is 1 s
RECEIVE_MAX = 32
INVISIBLE_MS = 5_000
WAIT_MS = 1_000
QUEUES = 4
DEADLINE_S = 100  # the whole consuming phase, restart included
RETRY_BACKOFF_S = 0.1
REQUEST_TIMEOUT_S = 30
SETTINGS = {"commitlog_file_size": 8 * 1024 * 1024, "cq_file_size": 20 * 16_384, "index_slots": 16_384,
            "index_entries": 131_072}


@dataclass
class Ledger:
    """What the consumers saw, shared between their threads."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    deliveries: Counter = field(default_factory=Counter)
    acked: set[str] = field(default_factory=set)  # keys whose ack the server confirmed
    ack_unknown: set[str] = field(default_factory=set)  # an ack cut by the restart, refused when retried
    dead_expected: set[str] = field(default_factory=set)  # nacked at the last attempt, confirmed
    after_ack: list[tuple[str, float]] = field(default_factory=list)  # (key, when): delivered after its ack
    holding: int = 0  # deliveries received and not yet settled
    transport_errors: int = 0
    unexpected: list[str] = field(default_factory=list)

    def received(self, keys: list[str]) -> None:
        now = time.monotonic()
        with self.lock:
            self.holding += len(keys)
            for key in keys:
                self.deliveries[key] += 1
                if key in self.acked:
                    self.after_ack.append((key, now))

    def settled(self, count: int) -> None:
        with self.lock:
            self.holding -= count


class Consumer(threading.Thread):
    def __init__(self, index: int, base_url: str, ledger: Ledger, poison: set[str], stop: threading.Event):
        super().__init__(name=f"consumer-{index}", daemon=True)
        self.rng = random.Random(SEED + index)
        self.client = httpx.Client(base_url=base_url, timeout=REQUEST_TIMEOUT_S, headers=ADMIN_HEADERS)
        self.ledger = ledger
        self.poison = poison
        self.stop_event = stop

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                self.consume_once()
        except Exception as exc:  # reported by the test, not lost in a thread
            with self.ledger.lock:
                self.ledger.unexpected.append(f"{self.name}: {type(exc).__name__}: {exc}")
        finally:
            self.client.close()

    def call(self, path: str, body: dict) -> tuple[httpx.Response | None, bool]:
        """POST until the server answers (connection errors: retried after a short backoff); the
        answer (None when stopped) and whether an attempt was cut (the server may have acted)."""
        cut = False
        while not self.stop_event.is_set():
            try:
                response = self.client.post(path, json=body)
            except httpx.TransportError:
                cut = True
                with self.ledger.lock:
                    self.ledger.transport_errors += 1
                self.stop_event.wait(RETRY_BACKOFF_S)
                continue
            if response.status_code in (429, 503):
                self.stop_event.wait(RETRY_BACKOFF_S)
                continue
            return response, cut
        return None, cut

    def consume_once(self) -> None:
        response, _ = self.call(f"/api/groups/{GROUP}/receive", {"topic": TOPIC, "max": RECEIVE_MAX,
                                                                  "invisible_ms": INVISIBLE_MS, "wait_ms": WAIT_MS})
        if response is None:
            return
        if response.status_code != 200:
            raise AssertionError(f"receive answered {response.status_code}: {response.text}")
        messages = response.json()["messages"]
        self.ledger.received([m["unique_key"] for m in messages])
        acks = []
        for m in messages:
            if m["unique_key"] in self.poison or self.rng.random() < NACK_RATE:
                self.nack(m)
            else:
                acks.append(m)
        if acks:
            self.ack(acks)

    def nack(self, message: dict) -> None:
        response, cut = self.call(f"/api/groups/{GROUP}/nack", {"receipt_handle": message["receipt_handle"],
                                                                 "reason": "failed on purpose"})
        self.ledger.settled(1)
        if response is None:
            return
        if response.status_code == 200:
            if message["delivery_attempt"] == MAX_RECONSUME_TIMES + 1:
                with self.ledger.lock:
                    self.ledger.dead_expected.add(message["unique_key"])
        elif response.status_code != 400 or not cut:
            # A handle refused without a restart in between: the consumer was too slow, or a bug.
            self.expect_expired(response)

    def ack(self, messages: list[dict]) -> None:
        response, cut = self.call(f"/api/groups/{GROUP}/ack",
                                  {"receipt_handles": [m["receipt_handle"] for m in messages]})
        self.ledger.settled(len(messages))
        if response is None:
            return
        if response.status_code != 200:
            raise AssertionError(f"ack answered {response.status_code}: {response.text}")
        with self.ledger.lock:
            for m, result in zip(messages, response.json()["results"], strict=True):
                if result["ok"]:
                    self.ledger.acked.add(m["unique_key"])
                elif cut:
                    self.ledger.ack_unknown.add(m["unique_key"])
                elif "expired" not in result["error"]:
                    self.ledger.unexpected.append(f"ack refused: {result['error']}")

    def expect_expired(self, response: httpx.Response) -> None:
        if response.status_code != 400 or "expired" not in response.text:
            with self.ledger.lock:
                self.ledger.unexpected.append(f"nack answered {response.status_code}: {response.text}")


def produce(base_url: str) -> tuple[list[str], set[str]]:
    """All messages, in batches; their unique keys and those of the poison messages."""
    keys: list[str] = []
    poison: set[str] = set()
    with httpx.Client(base_url=base_url, timeout=REQUEST_TIMEOUT_S, headers=ADMIN_HEADERS) as client:
        for start in range(0, MESSAGES, PRODUCE_BATCH):
            batch = [{"body": f"m{i}", "tags": "poison" if i % POISON_EVERY == 0 else "plain"}
                     for i in range(start, min(start + PRODUCE_BATCH, MESSAGES))]
            r = client.post(f"/api/topics/{TOPIC}/messages", json=batch)
            assert r.status_code == 200, r.text
            for item, result in zip(batch, r.json()["results"], strict=True):
                keys.append(result["unique_key"])
                if item["tags"] == "poison":
                    poison.add(result["unique_key"])
    return keys, poison


def set_up(base_url: str) -> None:
    with httpx.Client(base_url=base_url, timeout=REQUEST_TIMEOUT_S, headers=ADMIN_HEADERS) as client:
        r = client.put("/api/config/delay-levels", json={"levels": DELAY_LEVELS})
        assert r.status_code == 200, r.text
        r = client.put(f"/api/groups/{GROUP}", json={"max_reconsume_times": MAX_RECONSUME_TIMES})
        assert r.status_code == 200, r.text
        r = client.put(f"/api/topics/{TOPIC}", json={"queues": QUEUES})
        assert r.status_code == 200, r.text


def group_caught_up(base_url: str) -> bool:
    """The server's view: the group's committed offset is at the end of every queue, so every
    message is acked or dead-lettered (the offset stays at the first message not done)."""
    try:
        for queue_id in range(QUEUES):
            r = httpx.get(f"{base_url}/api/topics/{TOPIC}/queues/{queue_id}/messages", headers=ADMIN_HEADERS,
                          params={"group": GROUP, "max": 1}, timeout=REQUEST_TIMEOUT_S)
            if r.status_code != 200:
                return False
            view = r.json()
            if view["offset"] != view["max_offset"]:
                return False
    except httpx.TransportError:
        return False
    return True


def test_every_message_is_acked_or_dead_lettered_through_a_restart(tmp_path: Path):
    data = tmp_path / "data"
    ledger = Ledger()
    stop = threading.Event()
    consumers: list[Consumer] = []
    with LiveServer(data, tmp_path / "server.log", SETTINGS) as server:
        server.start()
        set_up(server.base_url)
        keys, poison = produce(server.base_url)
        assert len(set(keys)) == MESSAGES and len(poison) == MESSAGES // POISON_EVERY
        deadline = time.monotonic() + DEADLINE_S
        consumers = [Consumer(i, server.base_url, ledger, poison, stop) for i in range(CONSUMERS)]
        try:
            for consumer in consumers:
                consumer.start()
            wait_until(lambda: len(ledger.acked) >= MESSAGES // 2 or ledger.unexpected, DEADLINE_S,
                       "half of the messages to be acked")
            with ledger.lock:
                held_at_restart = ledger.holding
            restart_began = time.monotonic()
            assert server.stop() == 0
            server.start()
            wait_until(lambda: group_caught_up(server.base_url) or ledger.unexpected,
                       max(1.0, deadline - time.monotonic()), "every message to be acked or dead-lettered",
                       poll_s=0.2)
        finally:
            stop.set()
            for consumer in consumers:
                consumer.join(timeout=REQUEST_TIMEOUT_S + 5)
        assert not ledger.unexpected, ledger.unexpected[:5]
        assert not any(c.is_alive() for c in consumers)
        assert server.stop() == 0

    with MessageStore.open(data / "store", StoreConfig(geometry=StoreGeometry(**SETTINGS)),
                           read_only=True) as store:
        assert not store.abnormal_shutdown
        for queue_id in range(QUEUES):
            cq = store.queues.get(TOPIC, queue_id)
            assert store.offsets.get(TOPIC, GROUP, queue_id) == cq.max_offset
        subscription = store.pop.state.get(GROUP, TOPIC)
        assert subscription is not None and subscription.entries == {}  # nothing left in flight
        dlq = store.queues.get(topics.dlq_topic(GROUP), 0)
        dead_letters = [store.get_by_queue_offset(topics.dlq_topic(GROUP), 0, offset)
                        for offset in range(dlq.min_offset, dlq.max_offset)]
        dead_keys = [m.properties[topics.DLQ_ORIGIN_MESSAGE_ID] for m in dead_letters]
        unconfirmed = set(keys) - ledger.acked - set(dead_keys)
        acked_per_store = {key for key in unconfirmed
                           if any(e.kind == TraceKind.ACKED for e in store.timeline(key))}
        report = store.check()
    assert report.ok, report.problems

    # None lost: each message was acked by a consumer or dead-lettered, once.
    assert len(dead_keys) == len(set(dead_keys)), "a message was dead-lettered twice"
    assert set(dead_keys) <= set(keys)
    assert not ledger.acked & set(dead_keys), "a message was both acked and dead-lettered"
    assert poison | ledger.dead_expected <= set(dead_keys)
    assert unconfirmed <= ledger.ack_unknown and unconfirmed == acked_per_store, "lost messages"
    assert set(keys) == ledger.acked | set(dead_keys) | acked_per_store
    assert all(m.reconsume_times == MAX_RECONSUME_TIMES + 1 for m in dead_letters)

    # At least once, duplicates only from the restart.
    assert ledger.transport_errors > 0, "the restart was not seen by the consumers"
    assert all(when >= restart_began for _, when in ledger.after_ack), "redelivered after an ack, no restart"
    assert len(ledger.after_ack) <= held_at_restart + CONSUMERS * RECEIVE_MAX
    assert sum(ledger.deliveries.values()) >= MESSAGES
