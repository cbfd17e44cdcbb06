"""The demo workload (`mqlens serve --demo`): a few orders a second to DemoTopic, consumed by the
group demo-billing, which acknowledges most, fails some once (they are retried and then
acknowledged) and always fails every 25th order (retried, then dead-lettered), so every console
page has something to show."""

from __future__ import annotations

import itertools
import json
import logging
import threading

from store.broker.record_builder import NewMessage
from store.errors import StoreError
from store.message_store import MessageStore

DEMO_TOPIC = "DemoTopic"
DEMO_GROUP = "demo-billing"
DEMO_MAX_RECONSUME_TIMES = 2  # poison orders reach the dead-letter topic within about a minute
POISON_EVERY = 25
FLAKY_EVERY = 7
INVISIBLE_MS = 10_000
log = logging.getLogger("mqlens.demo")


def demo_message(n: int) -> NewMessage:
    status = ("created", "paid", "shipped")[n % 3]
    body = json.dumps({"order": n, "amount_cents": (n * 137) % 10_000, "status": status})
    return NewMessage(topic=DEMO_TOPIC, body=body.encode(), tags=status, keys=[f"order-{n}"])


def demo_verdict(order: int, attempt: int) -> str | None:
    """None to acknowledge, else why the demo consumer fails this delivery."""
    if order % POISON_EVERY == 0:
        return "card declined: poison order"
    if order % FLAKY_EVERY == 0 and attempt == 1:
        return "payment service timed out"
    return None


class DemoWorkload:
    """A thread that puts one demo message every `interval_s`, and consumes, until stopped."""

    def __init__(self, store: MessageStore, interval_s: float = 0.5):
        self.store = store
        self.interval_s = interval_s
        self.sent = 0
        self.acked = 0
        self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mqlens-demo", daemon=True)

    def start(self) -> DemoWorkload:
        self.store.metadata.update_group(DEMO_GROUP, max_reconsume_times=DEMO_MAX_RECONSUME_TIMES)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        for n in itertools.count():
            if self._stop.is_set():
                return
            try:
                self.step(n)
            except StoreError as exc:
                log.warning("demo step failed: %s", exc)
            if self._stop.wait(self.interval_s):
                return

    def step(self, n: int) -> None:
        """Put order `n`, then consume what the group is due to get."""
        self.store.put(demo_message(n))
        self.sent += 1
        for received in self.store.receive(DEMO_GROUP, DEMO_TOPIC, 8, INVISIBLE_MS):
            order = json.loads(received.message.body)["order"]
            reason = demo_verdict(order, received.delivery_attempt)
            if reason is None:
                self.store.ack(DEMO_GROUP, received.receipt_handle)
                self.acked += 1
            else:
                self.store.nack(DEMO_GROUP, received.receipt_handle, reason)
                self.failed += 1
