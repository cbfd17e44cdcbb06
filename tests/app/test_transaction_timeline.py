"""What the console says of a transactional message mqlens's store holds: its timeline (half
message stored, then committed to its topic, rolled back, checked or discarded), made from the
recorded events or from the copies alone, and its transaction standing on every copy's page."""

from __future__ import annotations

import dataclasses

import pytest

from app.pages.message import transaction_data
from app.services.timeline import message_timeline
from app.services.transactions import transaction_standing
from store.format import topics
from store.message_store import NewMessage

pytestmark = pytest.mark.anyio

TOPIC = "Payments"
PRODUCERS = "pg-payments"
CONSUMERS = "GID_payments"
TIMEOUT_MS = 6000


def payment(case: str, **changes) -> NewMessage:
    return NewMessage(**{"topic": TOPIC, "body": f"pay {case}".encode(), "keys": [case], **changes})


def hops(store, message_id: str) -> list[tuple[str, str]]:
    return [(h.kind, h.detail) for h in message_timeline(store, message_id).hops]


@pytest.fixture(params=[True, False], ids=["traced", "from copies"])
def traced(request, api) -> bool:
    if not request.param:
        api.store.config = dataclasses.replace(api.store.config, trace=False)
    return request.param


async def test_a_committed_message_is_stored_as_a_half_then_delivered_to_its_topic(api, traced):
    store = api.store
    half = store.put_half(payment("commit"), PRODUCERS)
    committed = store.end_transaction(half.offset_msg_id, True)
    story = hops(store, half.unique_key)
    assert [kind for kind, _ in story] == ["transaction", "produced"]
    assert story[0][1].startswith("half message") and topics.TRANS_HALF_TOPIC in story[0][1]
    assert story[1][1] == f"committed: put to {TOPIC}"
    timeline = message_timeline(store, half.unique_key)
    assert timeline.traced is traced
    assert timeline.first_copy.offset_msg_id == committed.offset_msg_id
    assert timeline.transaction.state == "committed" and f"delivered to {TOPIC}" in timeline.transaction.detail
    for copy in timeline.copies:  # the page of the half and of the committed copy say the same
        assert transaction_data(store, copy) == vars(timeline.transaction)
    r = await api.client.get(f"/api/messages/{half.unique_key}/timeline")
    assert r.status_code == 200, r.text
    assert r.json()["transaction"]["state"] == "committed"
    if traced:
        assert [e["kind"] for e in r.json()["events"]] == ["stored", "committed"]


async def test_a_committed_message_is_consumed_like_any_other(api):
    store = api.store
    half = store.put_half(payment("consumed"), PRODUCERS)
    store.end_transaction(half.offset_msg_id, True)
    r = await api.client.post(f"/api/groups/{CONSUMERS}/receive", json={"topic": TOPIC})
    [got] = r.json()["messages"]
    assert got["unique_key"] == half.unique_key
    r = await api.client.post(f"/api/groups/{CONSUMERS}/ack", json={"receipt_handle": got["receipt_handle"]})
    assert r.status_code == 200, r.text
    store.flush()  # the check's progress is saved as group CID_RMQ_SYS_TRANS's offsets
    assert store.offsets.of_group(topics.TRANS_CHECK_GROUP)
    verdicts = {v.group: v.state for v in message_timeline(store, half.unique_key).verdicts}
    assert verdicts == {CONSUMERS: "consumed"}


async def test_a_rolled_back_message_is_never_delivered(api, traced):
    store = api.store
    half = store.put_half(payment("rollback"), PRODUCERS)
    store.end_transaction(half.offset_msg_id, False)
    story = hops(store, half.unique_key)
    assert [kind for kind, _ in story][0] == "transaction"
    if traced:
        assert story[-1] == ("transaction", "rolled back: never delivered")
    standing = message_timeline(store, half.offset_msg_id).transaction
    assert (standing.state, standing.detail) == ("rolled_back", "rolled back: never delivered")
    assert message_timeline(store, half.unique_key).verdicts == []
    r = await api.client.get(f"/api/messages/{half.offset_msg_id}/timeline")
    assert r.status_code == 200 and r.json()["transaction"]["state"] == "rolled_back"


async def test_an_open_transaction_waits_and_shows_the_brokers_checks(api, clock, traced):
    store = api.store
    half = store.put_half(payment("unknown"), PRODUCERS)
    assert message_timeline(store, half.unique_key).transaction.state == "waiting"
    clock.advance(TIMEOUT_MS)
    [check] = store.open_transactions_to_check(TIMEOUT_MS)
    timeline = message_timeline(store, half.unique_key)
    assert timeline.transaction.state == "waiting"
    assert "after the broker asked the producer 1 time" in timeline.transaction.detail
    assert timeline.transaction.half_offset_msg_id == check.transaction_id
    if traced:
        assert [k for k, _ in hops(store, half.unique_key)] == ["transaction", "transaction"]
        assert "the broker asks the producer (check 1)" in hops(store, half.unique_key)[1][1]
    store.end_transaction(check.transaction_id, True, from_check=True)
    timeline = message_timeline(store, half.unique_key)
    assert timeline.transaction.state == "committed"
    assert "committed after the broker asked the producer 1 time" in timeline.transaction.detail
    if traced:
        assert timeline.hops[-1].detail == (f"committed (the producer answered the broker's check): put to {TOPIC}")


async def test_a_transaction_checked_too_often_is_discarded(api, clock, traced):
    store = api.store
    half = store.put_half(payment("silent"), PRODUCERS)
    for _ in range(3):
        clock.advance(TIMEOUT_MS)
        store.open_transactions_to_check(TIMEOUT_MS, max_checks=2)
    timeline = message_timeline(store, half.unique_key)
    assert timeline.transaction.state == "discarded"
    assert "asked the producer 2 times without an answer" in timeline.transaction.detail
    assert topics.TRANS_CHECK_MAX_TIME_TOPIC in timeline.transaction.detail
    last = timeline.hops[-1]
    assert last.kind == "transaction" and last.detail.startswith("discarded")
    assert "never delivered" in last.detail and topics.TRANS_CHECK_MAX_TIME_TOPIC in last.detail
    assert timeline.verdicts == []
    r = await api.client.get(f"/api/messages/{half.unique_key}/timeline")
    assert r.status_code == 200 and r.json()["transaction"]["state"] == "discarded"


async def test_a_commit_with_a_delivery_time_waits_for_it(api, clock, traced):
    store = api.store
    deliver_ms = clock.now_ms() + 60_000
    half = store.put_half(payment("later", properties={topics.TIMER_DELIVER_MS: str(deliver_ms)}), PRODUCERS)
    store.end_transaction(half.offset_msg_id, True)
    timeline = message_timeline(store, half.unique_key)
    assert timeline.transaction.state == "committed"
    assert f"waits in {topics.TIMER_TOPIC} for its delivery time, then goes to {TOPIC}" in timeline.transaction.detail
    assert [h.kind for h in timeline.hops] == ["transaction", "scheduled"]
    assert timeline.hops[-1].due_ms == deliver_ms
    clock.set(deliver_ms)
    store.deliver_due()
    timeline = message_timeline(store, half.unique_key)
    assert f"delivered to {TOPIC}" in timeline.transaction.detail
    assert timeline.hops[-1].kind == ("released" if traced else "produced") and timeline.hops[-1].topic == TOPIC


async def test_an_ordinary_message_has_no_transaction(api):
    put = api.store.put(NewMessage(TOPIC, b"plain"))
    assert message_timeline(api.store, put.unique_key).transaction is None
    assert transaction_standing(api.store, [api.store.read(put.phys_offset)]) is None
