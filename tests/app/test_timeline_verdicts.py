"""Each group's verdict on the timeline after a resend: a copy put on one group's retry topic
changes that group's verdict only; a copy put back on the topic concerns every group."""

from __future__ import annotations

import dataclasses

import pytest

from store.format import topics
from tests.app.conftest import put_messages

pytestmark = pytest.mark.anyio

TOPIC = "Orders"
BILLING, SHIPPING = "Billing", "Shipping"


async def receive(api, group: str) -> list[dict]:
    r = await api.client.post(f"/api/groups/{group}/receive", json={"topic": TOPIC})
    assert r.status_code == 200, r.text
    return r.json()["messages"]


async def settle(api, group: str, got: dict, verb: str) -> None:
    r = await api.client.post(f"/api/groups/{group}/{verb}", json={"receipt_handle": got["receipt_handle"]})
    assert r.status_code == 200, r.text


async def verdicts(api, unique_key: str) -> dict[str, tuple[str, str]]:
    body = (await api.client.get(f"/messages/{unique_key}/timeline.json")).json()
    return {v["group"]: (v["state"], v["detail"]) for v in body["verdicts"]}


async def billing_dead_letter_resent(api) -> tuple[dict, dict]:
    """Shipping consumed the order, Billing dead-lettered it and got it resent to its retry topic."""
    assert (await api.client.put(f"/api/groups/{BILLING}", json={"max_reconsume_times": 0})).status_code == 200
    [put] = await put_messages(api, TOPIC, {"body": "order 7", "keys": ["o-7"]})
    [shipped] = await receive(api, SHIPPING)
    await settle(api, SHIPPING, shipped, "ack")
    [billed] = await receive(api, BILLING)
    await settle(api, BILLING, billed, "nack")
    [dead] = api.store.query_by_unique_key(topics.dlq_topic(BILLING), put["unique_key"]).messages
    r = await api.client.post(f"/api/messages/{dead.offset_msg_id}/resend")
    assert r.status_code == 200, r.text
    assert r.json()["destination"] == topics.pop_retry_topic(BILLING, TOPIC)
    return put, r.json()


@pytest.mark.parametrize("traced", [True, False], ids=["traced", "from copies"])
async def test_a_resend_to_one_groups_retry_topic_leaves_the_other_groups_verdict(api, traced):
    if not traced:
        api.store.config = dataclasses.replace(api.store.config, trace=False)
    put, resent = await billing_dead_letter_resent(api)
    before = await verdicts(api, put["unique_key"])
    assert before[SHIPPING][0] == "consumed", before
    assert before[BILLING][0] in ("pending", "unknown") and resent["destination"] in before[BILLING][1]

    [again] = await receive(api, BILLING)
    assert again["offset_msg_id"] == resent["result"]["offset_msg_id"]
    await settle(api, BILLING, again, "ack")
    after = await verdicts(api, put["unique_key"])
    assert after[SHIPPING][0] == "consumed" and after[BILLING][0] == "consumed", after
    assert resent["destination"] not in after[SHIPPING][1]


async def test_a_resend_to_the_topic_concerns_every_group(api):
    put, _ = await billing_dead_letter_resent(api)
    [dead] = api.store.query_by_unique_key(topics.dlq_topic(BILLING), put["unique_key"]).messages
    r = await api.client.post(f"/api/dlq/{BILLING}/resend", json={"message_ids": [dead.offset_msg_id],
                                                                 "destination": "topic", "force": True,
                                                                 "reason": "every group again"})
    assert r.status_code == 200, r.text
    now = await verdicts(api, put["unique_key"])
    assert now[SHIPPING][0] == "pending" and f"{TOPIC}:0:1 not consumed yet" in now[SHIPPING][1], now
