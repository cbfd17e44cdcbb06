"""Drives the official RocketMQ 5 Python client (rocketmq-python-client) for the end-to-end tests,
in a process of its own: the client carries its own generated stubs of the same protocol, which
cannot share a process with the server's. Reads one JSON command per line on stdin and answers
one JSON line on stdout: {"ok": ...} or {"error": ..., "type": ...}.

Started as `python official_client.py ENDPOINT [AK SK]`; HOME should be a scratch directory (the
client writes its log under ~/logs)."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
import traceback

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)


class Driver:
    def __init__(self, endpoint: str, ak: str, sk: str, tls: bool):
        self.config = ClientConfiguration(endpoint, Credentials(ak, sk), request_timeout=5)
        self.tls = tls
        self.producer: Producer | None = None
        self.simple: SimpleConsumer | None = None
        self.pushes: list[PushConsumer] = []
        self.kept: dict[int, Message] = {}  # received messages by reference number
        self.transactions: dict[str, object] = {}
        self.events: list[dict] = []
        self.events_lock = threading.Lock()
        self.fail_first: dict[str, int] = {}  # message id or body -> deliveries to fail
        self.checker_answer = "commit"

    def record(self, **event) -> None:
        with self.events_lock:
            self.events.append({"at": time.time(), **event})

    # -- producing ----------------------------------------------------------------------------
    def op_producer(self, topics=(), checker=None):
        driver = self

        class Checker(TransactionChecker):
            def check(self, message):
                driver.record(kind="checked", message_id=message.message_id, body=message.body.decode())
                if driver.checker_answer == "commit":
                    return TransactionResolution.COMMIT
                return TransactionResolution.ROLLBACK

        if checker:
            self.checker_answer = checker
        self.producer = Producer(self.config, tuple(topics), Checker() if checker else None, tls_enable=self.tls)
        self.producer.startup()
        return {"client_id": self.producer.client_id}

    def _message(self, topic, body, tag=None, keys=(), props=None, delay_s=None, group=None):
        msg = Message()
        msg.topic = topic
        msg.body = body.encode()
        if tag:
            msg.tag = tag
        for key in keys:
            msg.keys = key
        for name, value in (props or {}).items():
            msg.add_property(name, value)
        if delay_s is not None:
            msg.delivery_timestamp = int(time.time()) + delay_s
        if group:
            msg.message_group = group
        return msg

    def op_send(self, **fields):
        receipt = self.producer.send(self._message(**fields))
        return {"message_id": receipt.message_id, "offset": receipt.offset}

    def op_send_many(self, topic, count, prefix="m"):
        ids = [self.producer.send(self._message(topic, f"{prefix}-{i}")).message_id for i in range(count)]
        return {"message_ids": ids}

    def op_keep_sending(self, topic, prefix="n"):
        """Send one message after another on a thread of its own until told to stop, keeping the ids
        of the sends the client saw succeed."""
        self.sending = {"acked": [], "failed": 0, "stop": threading.Event()}

        def loop():
            n = 0
            while not self.sending["stop"].is_set():
                try:
                    receipt = self.producer.send(self._message(topic, f"{prefix}-{n}"))
                    self.sending["acked"].append(receipt.message_id)
                except Exception:  # noqa: BLE001 - a send refused or lost: counted, and the next one goes
                    self.sending["failed"] += 1
                    time.sleep(0.05)
                n += 1

        threading.Thread(target=loop, daemon=True).start()
        return {}

    def op_sending(self, stop=False):
        if stop:
            self.sending["stop"].set()
            time.sleep(0.2)
        return {"acked": list(self.sending["acked"]), "failed": self.sending["failed"]}

    def op_begin(self, **fields):
        transaction = self.producer.begin_transaction()
        receipt = self.producer.send(self._message(**fields), transaction)
        self.transactions[receipt.message_id] = transaction
        return {"message_id": receipt.message_id, "transaction_id": receipt.transaction_id}

    def op_end(self, message_id, commit):
        transaction = self.transactions.pop(message_id)
        transaction.commit() if commit else transaction.rollback()
        return {}

    # -- consuming ----------------------------------------------------------------------------
    def op_simple(self, group, subscriptions, await_s=2):
        subs = {topic: FilterExpression(expr) for topic, expr in subscriptions.items()}
        self.simple = SimpleConsumer(self.config, group, subs, await_duration=await_s, tls_enable=self.tls)
        self.simple.startup()
        return {"client_id": self.simple.client_id}

    def _described(self, msg: Message) -> dict:
        ref = len(self.kept)
        self.kept[ref] = msg
        return {"ref": ref, "message_id": msg.message_id, "body": msg.body.decode(), "tag": msg.tag,
                "keys": list(msg.keys or []), "properties": dict(msg.properties or {}), "topic": msg.topic,
                "attempt": msg.delivery_attempt, "handle": msg.receipt_handle, "group": msg.message_group,
                "delivery_timestamp": msg.delivery_timestamp}

    def op_receive(self, max=16, invisible_s=20):
        return {"messages": [self._described(m) for m in self.simple.receive(max, invisible_s)]}

    def op_ack(self, ref, handle=None):
        msg = self.kept[ref]
        if handle is not None:
            msg.receipt_handle = handle
        self.simple.ack(msg)
        return {}

    def op_change_invisible(self, ref, seconds):
        msg = self.kept[ref]
        self.simple.change_invisible_duration(msg, seconds)
        return {"handle": msg.receipt_handle}

    def op_push(self, group, subscriptions, fail=None, threads=4):
        driver = self
        self.fail_first.update(fail or {})

        class Listener(MessageListener):
            def consume(self, message):
                body = message.body.decode()
                with driver.events_lock:
                    left = driver.fail_first.get(body, driver.fail_first.get(message.message_id, 0))
                    if left:
                        driver.fail_first[body] = left - 1
                driver.record(kind="consumed", group=group, message_id=message.message_id, body=body,
                              attempt=message.delivery_attempt, message_group=message.message_group,
                              result="failure" if left else "success")
                return ConsumeResult.FAILURE if left else ConsumeResult.SUCCESS

        subs = {topic: FilterExpression(expr) for topic, expr in subscriptions.items()}
        push = PushConsumer(self.config, group, Listener(), subs, consumption_thread_count=threads,
                            tls_enable=self.tls)
        push.startup()
        self.pushes.append(push)
        return {}

    def op_events(self):
        with self.events_lock:
            taken, self.events = self.events, []
        return {"events": taken}

    def op_shutdown(self):
        for client in [*self.pushes, self.simple, self.producer]:
            if client is not None:
                with contextlib.suppress(Exception):  # shutting down what is left
                    client.shutdown()
        return {}


def main() -> None:
    endpoint = sys.argv[1]
    ak, sk = (sys.argv[2], sys.argv[3]) if len(sys.argv) > 3 else ("", "")
    driver = Driver(endpoint, ak, sk, tls=os.environ.get("CLIENT_TLS") == "1")
    out = sys.stdout
    print(json.dumps({"ok": {"ready": True}}), file=out, flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        op = command.pop("op")
        try:
            answer = {"ok": getattr(driver, f"op_{op}")(**command)}
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the test
            answer = {"error": str(exc), "type": type(exc).__name__, "trace": traceback.format_exc()[-2000:]}
        print(json.dumps(answer), file=out, flush=True)
        if op == "shutdown":
            break
    out.flush()
    os._exit(0)  # the client leaves non-daemon threads behind


if __name__ == "__main__":
    main()
