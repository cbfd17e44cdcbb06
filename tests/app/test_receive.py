"""POST /api/groups/{group}/receive, ack, nack, change-invisible: the flow with a fake clock,
bad input, dead letters, long polls on worker threads and the receive gate."""

from __future__ import annotations

import time

import anyio
import pytest

from app.masking import show_all
from app.presenters import message_dict
from app.schemas import MessageOut
from store.format import topics
from store.format.delay_levels import DelayLevels
from tests.app.conftest import assert_error, make_settings, put_messages, running

pytestmark = pytest.mark.anyio

GROUP = "GID_rest"
TOPIC = "Orders"
SECOND = 1000
DELAYS = DelayLevels().delays_ms
HANDLE_FIELDS = {"receipt_handle", "delivery_attempt", "invisible_until_ms"}
POLL_DEADLINE_S = 30


def backoff(attempt: int) -> int:
    return DELAYS[min(2 + attempt, len(DELAYS)) - 1]


async def produce(api, count: int, topic: str = TOPIC, **fields) -> list[dict]:
    return await put_messages(api, topic, [{"body": f"m{i}", **fields} for i in range(count)])


async def receive(api, group: str = GROUP, **fields) -> list[dict]:
    r = await api.client.post(f"/api/groups/{group}/receive", json={"topic": TOPIC, **fields})
    assert r.status_code == 200, r.text
    assert r.json()["ok"] is True
    return r.json()["messages"]


async def post(api, action: str, group: str = GROUP, **fields):
    return await api.client.post(f"/api/groups/{group}/{action}", json=fields)


async def wait_for(condition, what: str) -> None:
    """Poll `condition` on the event loop until it holds (the deadline fails the test)."""
    deadline = time.monotonic() + POLL_DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await anyio.sleep(0.01)


# -- the flow ----------------------------------------------------------------------------------
async def test_received_messages_carry_the_stored_fields_and_a_handle(api, clock):
    [result] = await produce(api, 1, tags="TagA", keys=["order-1"])
    [got] = await receive(api, max=5, invisible_ms=20 * SECOND)
    stored = api.store.read(result["phys_offset"])
    assert {k: v for k, v in got.items() if k not in HANDLE_FIELDS} == show_all(message_dict(stored))
    assert set(MessageOut.model_fields) - {"copy_kind"} | {"copy"} == set(message_dict(stored))
    assert got["delivery_attempt"] == 1 and got["invisible_until_ms"] == clock.now_ms() + 20 * SECOND
    assert got["unique_key"] == result["unique_key"] and got["tags"] == "TagA" and got["body_text"] == "m0"
    assert await receive(api) == []  # invisible to the group now
    assert len(await receive(api, group="GID_other")) == 1  # another group has its own view


async def test_defaults_are_16_messages_invisible_for_30_s(api, clock):
    await produce(api, 20)
    got = await receive(api)
    assert len(got) == 16
    assert {m["invisible_until_ms"] for m in got} == {clock.now_ms() + 30 * SECOND}


async def test_ack_nack_change_invisible_and_expiry(api, clock):
    [result] = await produce(api, 1)
    [first] = await receive(api)
    h1 = first["receipt_handle"]

    r = await post(api, "change-invisible", receipt_handle=h1, invisible_ms=60 * SECOND)
    assert r.status_code == 200, r.text
    h2 = r.json()["receipt_handle"]
    assert h2 != h1 and set(r.json()) == {"ok", "receipt_handle"}
    assert_error(await post(api, "ack", receipt_handle=h1), 400, "stale receipt handle")
    clock.advance(59 * SECOND)
    assert await receive(api) == []  # still invisible: the change moved the deadline

    r = await post(api, "nack", receipt_handle=h2, reason="payment service down")
    assert r.status_code == 200 and r.json() == {"ok": True}
    assert_error(await post(api, "nack", receipt_handle=h2), 400, "already nacked")
    clock.advance(backoff(1) - 1)
    assert await receive(api) == []
    clock.advance(1)
    [second] = await receive(api)
    assert second["delivery_attempt"] == 2 and second["unique_key"] == result["unique_key"]

    clock.advance(30 * SECOND)  # the invisible time runs out
    assert_error(await post(api, "ack", receipt_handle=second["receipt_handle"]), 400, "expired receipt handle")
    clock.advance(backoff(2))
    [third] = await receive(api)
    assert third["delivery_attempt"] == 3
    r = await post(api, "ack", receipt_handle=third["receipt_handle"])
    assert r.status_code == 200 and r.json() == {"ok": True}
    clock.advance(3600 * SECOND)
    assert await receive(api) == []  # done for the group
    assert_error(await post(api, "ack", receipt_handle=third["receipt_handle"]), 400)

    events = api.store.timeline(result["unique_key"])
    kinds = [e.kind.value for e in events]
    assert kinds == ["stored", "delivered", "invisible_changed", "failed", "delivered", "invisible_timeout",
                     "delivered", "acked"]
    assert events[2].due_ms == events[2].at_ms + 60 * SECOND and events[2].attempt == 1
    assert events[3].reason == "payment service down"
    assert api.store.offsets.get(TOPIC, GROUP, result["queue_id"]) == 1  # committed past the acked message


async def test_batch_ack_answers_per_handle(api):
    await produce(api, 3)
    got = await receive(api)
    handles = [m["receipt_handle"] for m in got]
    r = await post(api, "ack", receipt_handles=[handles[0], "garbage", handles[1], handles[0]])
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [x["receipt_handle"] for x in results] == [handles[0], "garbage", handles[1], handles[0]]
    assert [x["ok"] for x in results] == [True, False, True, False]
    assert "error" not in results[0] and "malformed" in results[1]["error"]
    assert "already acknowledged" in results[3]["error"]
    r = await post(api, "ack", receipt_handles=[handles[2]])
    assert r.json() == {"ok": True, "results": [{"receipt_handle": handles[2], "ok": True}]}


async def test_tag_subscription(api):
    await produce(api, 2, tags="A")
    await produce(api, 2, tags="B")
    got = await receive(api, tags="B")
    assert [m["tags"] for m in got] == ["B", "B"]


async def test_max_reconsume_times_dead_letters_and_the_dlq_cannot_be_received(api, clock):
    assert (await api.client.put(f"/api/groups/{GROUP}", json={"max_reconsume_times": 1})).status_code == 200
    [result] = await produce(api, 1)
    for attempt in (1, 2):
        [got] = await receive(api)
        assert got["delivery_attempt"] == attempt
        assert (await post(api, "nack", receipt_handle=got["receipt_handle"])).status_code == 200
        clock.advance(backoff(attempt))
    assert await receive(api) == []
    dlq = topics.dlq_topic(GROUP)
    [dead] = api.store.timeline(result["unique_key"])[-1:]
    assert dead.kind.value == "dead_letter" and dead.topic == dlq
    dead_letter = api.store.get_by_offset_id(dead.offset_msg_id)
    assert dead_letter.unique_key == result["unique_key"] and dead_letter.reconsume_times == 2
    r = await api.client.post(f"/api/groups/{GROUP}/receive", json={"topic": dlq})
    assert_error(r, 400, "dead-letter topic")


# -- bad input ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("payload", "field"), [
    ({}, "topic"),
    ({"topic": TOPIC, "max": 0}, "max"),
    ({"topic": TOPIC, "max": 1001}, "max"),
    ({"topic": TOPIC, "max": "5"}, "max"),
    ({"topic": TOPIC, "max": 2.0}, "max"),
    ({"topic": TOPIC, "invisible_ms": 999}, "invisible_ms"),
    ({"topic": TOPIC, "invisible_ms": 12 * 3600 * SECOND + 1}, "invisible_ms"),
    ({"topic": TOPIC, "wait_ms": -1}, "wait_ms"),
    ({"topic": TOPIC, "wait_ms": 60_001}, "wait_ms"),
    ({"topic": TOPIC, "tags": 5}, "tags"),
    ({"topic": TOPIC, "max_messages": 5}, "max_messages"),
    ({"topic": 7}, "topic"),
])
async def test_receive_refuses_bad_fields_with_422(api, payload, field):
    assert_error(await api.client.post(f"/api/groups/{GROUP}/receive", json=payload), 422, field)


@pytest.mark.parametrize(("group", "payload", "fragment"), [
    (GROUP, {"topic": "bad topic!"}, "invalid topic"),
    ("bad%20group!", {"topic": TOPIC}, "group"),
    (GROUP, {"topic": TOPIC, "tags": "A ||"}, "tag expression"),
    (GROUP, {"topic": topics.SCHEDULE_TOPIC}, "cannot be consumed"),
    (GROUP, {"topic": "%DLQ%other"}, "dead-letter topic"),
])
async def test_receive_refuses_bad_values_with_400(api, group, payload, fragment):
    await produce(api, 1, delay_level=1)  # SCHEDULE_TOPIC_XXXX exists
    assert_error(await api.client.post(f"/api/groups/{group}/receive", json=payload), 400, fragment)


async def test_receive_from_a_disabled_group_is_400(api):
    await produce(api, 1)
    assert (await api.client.put(f"/api/groups/{GROUP}", json={"consume_enable": False})).status_code == 200
    assert_error(await api.client.post(f"/api/groups/{GROUP}/receive", json={"topic": TOPIC}), 400, "disabled")


async def test_receive_from_a_topic_without_messages_is_empty(api):
    assert await receive(api) == []


async def test_malformed_json_is_400(api):
    r = await api.client.post(f"/api/groups/{GROUP}/receive", content=b"{", headers={"content-type":
                                                                                       "application/json"})
    assert_error(r, 400, "malformed JSON")


@pytest.mark.parametrize(("action", "payload", "field"), [
    ("ack", {}, "exactly one of 'receipt_handle' and 'receipt_handles'"),
    ("ack", {"receipt_handle": "a", "receipt_handles": ["b"]}, "exactly one of"),
    ("ack", {"receipt_handles": []}, "receipt_handles"),
    ("ack", {"receipt_handles": ["x"] * 1001}, "receipt_handles"),
    ("ack", {"receipt_handle": 5}, "receipt_handle"),
    ("ack", {"receipt_handles": "abc"}, "receipt_handles"),
    ("nack", {}, "receipt_handle"),
    ("nack", {"receipt_handle": "h", "reason": 3}, "reason"),
    ("nack", {"receipt_handle": "h", "why": "x"}, "why"),
    ("change-invisible", {"receipt_handle": "h"}, "invisible_ms"),
    ("change-invisible", {"receipt_handle": "h", "invisible_ms": 10}, "invisible_ms"),
    ("change-invisible", {"receipt_handle": "h", "invisible_ms": "30000"}, "invisible_ms"),
])
async def test_handle_actions_refuse_bad_fields_with_422(api, action, payload, field):
    assert_error(await post(api, action, **payload), 422, field)


@pytest.mark.parametrize("handle", ["", "not-a-handle", "a" * 2000, "MSBnIE9yZGVycyAwIDAgMSAz"])
@pytest.mark.parametrize("action", ["ack", "nack", "change-invisible"])
async def test_malformed_handles_are_400(api, action, handle):
    fields = {"receipt_handle": handle}
    if action == "change-invisible":
        fields["invisible_ms"] = 10 * SECOND
    assert_error(await post(api, action, **fields), 400, "receipt handle")


async def test_a_handle_of_another_group_is_400(api):
    await produce(api, 1)
    [got] = await receive(api)
    assert_error(await post(api, "ack", group="GID_other", receipt_handle=got["receipt_handle"]), 400,
                 "another group")
    assert (await post(api, "ack", receipt_handle=got["receipt_handle"])).status_code == 200


async def test_a_forged_handle_for_a_message_never_received_is_400(api):
    from store.broker.receipt import new_handle

    await produce(api, 1)
    forged = new_handle(GROUP, TOPIC, 0, 0, 1, "0" * 16)
    assert_error(await post(api, "ack", receipt_handle=forged), 400, "unknown receipt handle")


# -- long polls --------------------------------------------------------------------------------
def stop_the_wait(api) -> None:
    """The long polls' seconds stand still: a poll that ends did so because of a message."""
    api.store.pop.wait_clock = lambda: 0.0


async def test_a_long_poll_returns_when_a_message_arrives(api):
    stop_the_wait(api)
    results: list[list[dict]] = []

    async def poll() -> None:
        results.append(await receive(api, wait_ms=50_000))

    async with anyio.create_task_group() as tg:
        tg.start_soon(poll)
        await wait_for(lambda: api.app.state.receive_gate.in_use == 1, "the long poll to wait")
        assert results == []
        [put] = await produce(api, 1)
    assert [[m["unique_key"] for m in got] for got in results] == [[put["unique_key"]]]


async def test_eight_long_polls_wait_on_threads_while_other_requests_go_on(api):
    stop_the_wait(api)
    results: list[list[dict]] = []

    async def poll() -> None:
        results.append(await receive(api, max=1, wait_ms=50_000))

    async with anyio.create_task_group() as tg:
        for _ in range(8):
            tg.start_soon(poll)
        await wait_for(lambda: api.app.state.receive_gate.in_use == 8, "eight long polls to wait")
        assert (await api.client.get("/healthz")).status_code == 200  # the event loop is free
        assert (await api.client.get("/api/groups")).status_code == 200  # and so are the other routes' threads
        assert results == []
        puts = await produce(api, 8)
    assert sorted(m["unique_key"] for got in results for m in got) == sorted(p["unique_key"] for p in puts)
    assert all(len(got) == 1 for got in results) and len(results) == 8


async def test_receives_beyond_the_limit_are_429(data_dir, clock):
    async with running(make_settings(data_dir, max_receives=1), clock) as api:
        results: list[list[dict]] = []

        async def poll() -> None:
            results.append(await receive(api, wait_ms=50_000))

        async with anyio.create_task_group() as tg:
            tg.start_soon(poll)
            await wait_for(lambda: api.app.state.receive_gate.in_use == 1, "the long poll to wait")
            r = await api.client.post(f"/api/groups/{GROUP}/receive", json={"topic": TOPIC})
            assert_error(r, 429, "too many receives in progress (at most 1)")
            assert r.headers["retry-after"] == "1"
            await produce(api, 1)
        assert len(results) == 1 and len(results[0]) == 1
        assert api.app.state.receive_gate.in_use == 0
        assert len(await receive(api)) == 0  # the gate is free again


async def test_the_consuming_endpoints_are_documented(api):
    doc = (await api.client.get("/openapi.json")).json()
    expected = {
        ("/api/groups/{group}/receive", "post"): {"200", "400", "422", "429"},
        ("/api/groups/{group}/ack", "post"): {"200", "400", "422"},
        ("/api/groups/{group}/nack", "post"): {"200", "400", "422"},
        ("/api/groups/{group}/change-invisible", "post"): {"200", "400", "422"},
        ("/api/topics/{topic}/queues/{queue_id}/messages", "get"): {"200", "400", "404", "422"},
        ("/api/groups/{group}/offsets", "put"): {"200", "400", "404", "422"},
        ("/api/messages/{message_id}/timeline", "get"): {"200", "400", "404"},
        ("/api/messages/{offset_msg_id}/resend", "post"): {"200", "400", "404", "409"},
    }
    for (path, method), statuses in expected.items():
        assert statuses <= set(doc["paths"][path][method]["responses"]), path
    message = doc["components"]["schemas"]["ReceivedMessageOut"]["properties"]
    assert {"copy", "receipt_handle", "delivery_attempt", "invisible_until_ms"} <= set(message)
    receive_body = doc["components"]["schemas"]["ReceiveRequest"]["properties"]
    assert receive_body["max"]["maximum"] == 1000 and receive_body["max"]["default"] == 16
