"""The demo's real clients (`mqlens serve --demo`): the official RocketMQ 5 Python client, in
processes of their own, producing to and consuming from the gRPC front, so the Clients page and
the timelines show real clients. Never imported by the server (the client carries its own stubs of
the same protocol); started as `python -m app.demo_clients producer|consumer ENDPOINT`.

The producer sends an order every half second (tags created/paid/shipped, a key per order, every
tenth one delayed by 5 s); the consumer, a PushConsumer of shop-billing, acknowledges most orders,
fails every 7th once (retried) and every 20th always (dead-lettered after the group's attempts)."""

from __future__ import annotations

import itertools
import json
import os
import signal
import sys
import threading
import time

DEMO_CLIENT_TOPIC = "ShopOrders"
DEMO_CLIENT_GROUP = "shop-billing"
DEMO_CLIENT_MAX_RECONSUME_TIMES = 2
SEND_EVERY_S = 0.5
DELAY_EVERY = 10
FLAKY_EVERY = 7
POISON_EVERY = 20
PARENT_CHECK_S = 1.0
PARENT_GONE_GRACE_S = 3.0


def _run_producer(endpoint: str, stop: threading.Event) -> None:
    from rocketmq import ClientConfiguration, Credentials, Message, Producer

    producer = Producer(ClientConfiguration(endpoint, Credentials()), (DEMO_CLIENT_TOPIC,))
    producer.startup()
    try:
        for n in itertools.count(1):
            status = ("created", "paid", "shipped")[n % 3]
            msg = Message()
            msg.topic = DEMO_CLIENT_TOPIC
            msg.body = json.dumps({"order": n, "status": status, "amount_cents": (n * 211) % 10_000}).encode()
            msg.tag = status
            msg.keys = f"shop-order-{n}"
            msg.add_property("channel", "web" if n % 2 else "app")
            if n % DELAY_EVERY == 0:
                msg.delivery_timestamp = int(time.time()) + 5
            try:
                producer.send(msg)
            except Exception as exc:  # noqa: BLE001 - the server may be starting or stopping: try the next one
                print(f"demo producer: send failed: {exc}", file=sys.stderr, flush=True)
            if stop.wait(SEND_EVERY_S):
                return
    finally:
        producer.shutdown()


def _run_consumer(endpoint: str, stop: threading.Event) -> None:
    from rocketmq import (
        ClientConfiguration,
        ConsumeResult,
        Credentials,
        FilterExpression,
        MessageListener,
        PushConsumer,
    )

    class Billing(MessageListener):
        def consume(self, message):
            order = json.loads(message.body)["order"]
            if order % POISON_EVERY == 0 or (order % FLAKY_EVERY == 0 and message.delivery_attempt == 1):
                return ConsumeResult.FAILURE
            return ConsumeResult.SUCCESS

    consumer = PushConsumer(ClientConfiguration(endpoint, Credentials()), DEMO_CLIENT_GROUP, Billing(),
                            {DEMO_CLIENT_TOPIC: FilterExpression("*")}, consumption_thread_count=2)
    consumer.startup()
    try:
        stop.wait()
    finally:
        consumer.shutdown()


def _stop_with_the_server(stop: threading.Event, server_pid: int) -> None:
    """A server killed outright (kill -9, a crash) never stops its demo clients: they end when it is gone."""
    while not stop.wait(PARENT_CHECK_S):
        if os.getppid() != server_pid:
            stop.set()
            time.sleep(PARENT_GONE_GRACE_S)
            os._exit(0)  # the client's shutdown may wait for the server that is gone


def main(argv: list[str]) -> None:
    role, endpoint = argv
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    threading.Thread(target=_stop_with_the_server, args=(stop, os.getppid()), daemon=True).start()
    try:
        (_run_producer if role == "producer" else _run_consumer)(endpoint, stop)
    finally:
        os._exit(0)  # the client leaves non-daemon threads behind


if __name__ == "__main__":
    main(sys.argv[1:])
