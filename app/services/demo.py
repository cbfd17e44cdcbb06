"""The demo workload (`mqlens serve --demo`): a few messages a second to DemoTopic."""

from __future__ import annotations

import itertools
import json
import logging
import threading

from store.errors import StoreError
from store.message_store import MessageStore
from store.record_builder import NewMessage

DEMO_TOPIC = "DemoTopic"
log = logging.getLogger("mqlens.demo")


def demo_message(n: int) -> NewMessage:
    status = ("created", "paid", "shipped")[n % 3]
    body = json.dumps({"order": n, "amount_cents": (n * 137) % 10_000, "status": status})
    return NewMessage(topic=DEMO_TOPIC, body=body.encode(), tags=status, keys=[f"order-{n}"])


class DemoWorkload:
    """A thread that puts one demo message every `interval_s` until stopped."""

    def __init__(self, store: MessageStore, interval_s: float = 0.5):
        self.store = store
        self.interval_s = interval_s
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mqlens-demo", daemon=True)

    def start(self) -> DemoWorkload:
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
                self.store.put(demo_message(n))
                self.sent += 1
            except StoreError as exc:
                log.warning("demo put failed: %s", exc)
            if self._stop.wait(self.interval_s):
                return
