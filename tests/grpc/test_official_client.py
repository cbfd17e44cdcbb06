"""The official RocketMQ 5 Python client, unchanged, against a real `mqlens serve`: producing,
consuming with a SimpleConsumer and a PushConsumer, and what the console then shows."""

from __future__ import annotations

import time

import pytest

from tests.grpc.conftest import ClientFailed
from tests.live_server import wait_until

TOPIC = "OrderEvents"
GROUP = "billing"


def test_a_producer_sends_and_a_simple_consumer_receives_and_acks(official_client, grpc_server):
    producer = official_client("producer")
    producer_id = producer.call("producer", topics=[TOPIC])["client_id"]
    sent = producer.call("send", topic=TOPIC, body="order 1 paid", tag="paid", keys=["order-1", "cust-7"],
                         props={"region": "eu"})
    assert len(sent["message_id"]) == 34 and sent["offset"] >= 0

    consumer = official_client("consumer")
    consumer_id = consumer.call("simple", group=GROUP, subscriptions={TOPIC: "paid||refunded"}, await_s=2)["client_id"]
    got = wait_until(lambda: consumer.call("receive", max=8, invisible_s=20)["messages"], 20, "the message")
    [msg] = got
    assert (msg["message_id"], msg["body"], msg["tag"], msg["attempt"]) == (sent["message_id"], "order 1 paid",
                                                                            "paid", 1)
    assert sorted(msg["keys"]) == ["cust-7", "order-1"] and msg["properties"] == {"region": "eu"}
    consumer.call("ack", ref=msg["ref"])
    with pytest.raises(ClientFailed) as refused:
        consumer.call("ack", ref=msg["ref"])
    assert refused.value.kind == "BadRequestException"

    with grpc_server.client() as api:
        [by_id] = api.get(f"/api/messages/by-unique-key/{sent['message_id']}").json()["messages"]
        [by_key] = api.get("/api/messages/by-key", params={"key": "cust-7", "topic": TOPIC}).json()["messages"]
        by_offset_id = api.get(f"/api/messages/by-id/{by_id['offset_msg_id']}").json()["message"]
        hops = api.get(f"/api/messages/{sent['message_id']}/timeline").json()["hops"]
        clients = {c["client_id"]: c for c in api.get("/api/clients").json()["clients"]}
    assert by_id["topic"] == TOPIC and by_id["queue_offset"] == sent["offset"]
    assert by_key["offset_msg_id"] == by_offset_id["offset_msg_id"] == by_id["offset_msg_id"]
    named = {(h["kind"], h.get("client")) for h in hops}
    assert {("produced", producer_id), ("delivered", consumer_id), ("consumed", consumer_id)} <= named, hops
    assert clients[producer_id]["kind"] == "producer" and clients[producer_id]["language"] == "PYTHON"
    assert clients[consumer_id]["kind"] == "simple_consumer" and clients[consumer_id]["group"] == GROUP
    assert clients[consumer_id]["subscriptions"] == {TOPIC: "paid||refunded"}


def test_an_expired_message_comes_back_as_attempt_2_and_a_replaced_handle_is_refused(official_client):
    producer = official_client("producer")
    producer.call("producer", topics=[TOPIC])
    sent = producer.call("send", topic=TOPIC, body="retry me")
    consumer = official_client("consumer")
    consumer.call("simple", group=GROUP, subscriptions={TOPIC: "*"}, await_s=2)
    [first] = wait_until(lambda: consumer.call("receive", max=1, invisible_s=1)["messages"], 20, "the message")
    assert (first["message_id"], first["attempt"]) == (sent["message_id"], 1)
    [again] = wait_until(lambda: consumer.call("receive", max=1, invisible_s=30)["messages"], 20, "attempt 2")
    assert (again["message_id"], again["attempt"]) == (sent["message_id"], 2)
    with pytest.raises(ClientFailed):  # attempt 1's handle ran out
        consumer.call("ack", ref=first["ref"])
    renewed = consumer.call("change_invisible", ref=again["ref"], seconds=30)["handle"]
    assert renewed and renewed != again["handle"]
    with pytest.raises(ClientFailed) as stale:
        consumer.call("ack", ref=again["ref"], handle=again["handle"])
    assert stale.value.kind == "BadRequestException"
    consumer.call("ack", ref=again["ref"], handle=renewed)
    assert consumer.call("receive", max=1, invisible_s=30)["messages"] == []


def test_a_delayed_message_waits_for_its_delivery_time(official_client):
    producer = official_client("producer")
    producer.call("producer", topics=[TOPIC])
    sent_at = time.time()
    sent = producer.call("send", topic=TOPIC, body="later", delay_s=3)
    consumer = official_client("consumer")
    consumer.call("simple", group=GROUP, subscriptions={TOPIC: "*"}, await_s=1)
    [msg] = wait_until(lambda: consumer.call("receive", max=1, invisible_s=20)["messages"], 30, "the delayed message")
    assert msg["message_id"] == sent["message_id"]
    assert time.time() - sent_at >= 2  # the delivery time is in whole seconds
    assert msg["delivery_timestamp"] >= int(sent_at) * 1000


def test_tags_filter_what_a_consumer_receives(official_client):
    producer = official_client("producer")
    producer.call("producer", topics=[TOPIC])
    for tag in ("created", "paid", "shipped", "refunded"):
        producer.call("send", topic=TOPIC, body=f"order {tag}", tag=tag)
    consumer = official_client("consumer")
    consumer.call("simple", group=GROUP, subscriptions={TOPIC: "paid||refunded"}, await_s=1)
    seen: list[str] = []

    def both() -> bool:
        got = consumer.call("receive", max=8, invisible_s=20)["messages"]
        for msg in got:
            consumer.call("ack", ref=msg["ref"])
        seen.extend(m["tag"] for m in got)
        return len(seen) >= 2

    wait_until(both, 20, "the two tagged messages")
    assert sorted(seen) == ["paid", "refunded"]
    assert consumer.call("receive", max=8, invisible_s=20)["messages"] == []


def _consumed(client, events: list, kind: str = "consumed") -> list[dict]:
    events.extend(e for e in client.call("events")["events"] if e["kind"] == kind)
    return events


def test_a_failing_push_listener_is_retried_per_the_delay_table_then_dead_lettered_and_resent(
        official_client, grpc_server):
    with grpc_server.client() as api:
        assert api.put(f"/api/groups/{GROUP}", json={"max_reconsume_times": 2}).status_code == 200
    producer = official_client("producer")
    producer.call("producer", topics=[TOPIC])
    sent = producer.call("send", topic=TOPIC, body="poison", keys=["order-9"])
    consumer = official_client("push")
    consumer.call("push", group=GROUP, subscriptions={TOPIC: "*"}, fail={"poison": 3})
    audit = official_client("audit")
    audit.call("push", group="audit", subscriptions={TOPIC: "*"})
    events: list[dict] = []
    wait_until(lambda: len(_consumed(consumer, events)) >= 3, 60, "three failed attempts")
    assert [(e["attempt"], e["result"]) for e in events[:3]] == [(1, "failure"), (2, "failure"), (3, "failure")]
    gaps = [round(b["at"] - a["at"], 1) for a, b in zip(events, events[1:3], strict=False)]
    assert 0.9 <= gaps[0] <= 2.5 and 1.9 <= gaps[1] <= 3.5, gaps  # the table's first waits: 1 s, then 2 s

    with grpc_server.client() as api:
        def dead_letter():
            found = api.get(f"/api/dlq/{GROUP}/messages").json()["messages"]
            return [d for d in found if d["unique_key"] == sent["message_id"]]
        [dead] = wait_until(dead_letter, 30, "the dead letter")
        assert dead["reconsume_times"] == 3 and dead["original_topic"] == TOPIC
        resent = api.post(f"/api/messages/{dead['offset_msg_id']}/resend", json={})
        assert resent.status_code == 200, resent.text
        assert resent.json()["destination"].startswith(f"%RETRY%{GROUP}")  # the failed group's own retry topic

    wait_until(lambda: any(e["result"] == "success" for e in _consumed(consumer, events)), 30, "the resent copy")
    assert [e["message_id"] for e in events if e["result"] == "success"] == [sent["message_id"]]
    audit_events: list[dict] = []
    wait_until(lambda: _consumed(audit, audit_events), 20, "the audit group's delivery")
    assert [e["message_id"] for e in _consumed(audit, audit_events)] == [sent["message_id"]]


def test_fifo_order_holds_per_message_group_with_groups_interleaved(official_client, grpc_server):
    with grpc_server.client() as api:
        assert api.put("/api/groups/ledger", json={"consume_mode": "orderly"}).status_code == 200
    producer = official_client("producer")
    producer.call("producer", topics=[TOPIC])
    for n in range(1, 6):
        for account in ("acct-a", "acct-b", "acct-c"):
            producer.call("send", topic=TOPIC, body=f"{account}:{n}", group=account)
    consumer = official_client("fifo")
    consumer.call("push", group="ledger", subscriptions={TOPIC: "*"}, fail={"acct-b:2": 1})
    events: list[dict] = []
    wait_until(lambda: sum(e["result"] == "success" for e in _consumed(consumer, events)) >= 15, 60,
               "all fifteen messages")
    for account in ("acct-a", "acct-b", "acct-c"):
        bodies = [e["body"] for e in events if e["message_group"] == account and e["result"] == "success"]
        assert bodies == [f"{account}:{n}" for n in range(1, 6)], bodies
    b2 = [i for i, e in enumerate(events) if e["body"] == "acct-b:2"]
    b3 = next(i for i, e in enumerate(events) if e["body"] == "acct-b:3")
    assert len(b2) == 2 and b2[-1] < b3  # acct-b:3 waited for acct-b:2's retry


def test_transactions_commit_roll_back_and_an_open_one_is_checked_with_the_producer(official_client, grpc_server):
    producer = official_client("producer")
    producer.call("producer", topics=[TOPIC], checker="commit")
    committed = producer.call("begin", topic=TOPIC, body="committed", keys=["tx-1"])
    rolled_back = producer.call("begin", topic=TOPIC, body="rolled back", keys=["tx-2"])
    left_open = producer.call("begin", topic=TOPIC, body="left open", keys=["tx-3"])
    assert committed["transaction_id"] and committed["transaction_id"] != rolled_back["transaction_id"]
    producer.call("end", message_id=committed["message_id"], commit=True)
    producer.call("end", message_id=rolled_back["message_id"], commit=False)

    consumer = official_client("consumer")
    consumer.call("simple", group=GROUP, subscriptions={TOPIC: "*"}, await_s=1)
    got: dict[str, dict] = {}

    def both_delivered() -> bool:
        for msg in consumer.call("receive", max=8, invisible_s=30)["messages"]:
            got[msg["body"]] = msg
            consumer.call("ack", ref=msg["ref"])
        return {"committed", "left open"} <= got.keys()

    wait_until(both_delivered, 30, "the committed message and the checked one")
    assert got["committed"]["message_id"] == committed["message_id"]
    assert "rolled back" not in got
    checks = [e for e in producer.call("events")["events"] if e["kind"] == "checked"]
    assert [e["message_id"] for e in checks] == [left_open["message_id"]]
    with grpc_server.client() as api:
        standing = {m["message_id"]: api.get(f"/api/messages/{m['message_id']}/timeline").json()
                    for m in (committed, rolled_back)}
    assert standing[committed["message_id"]]["transaction"]["state"] == "committed"
    assert standing[rolled_back["message_id"]]["transaction"]["state"] == "rolled_back"
