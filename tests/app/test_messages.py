"""POST /api/topics/{topic}/messages: one or many messages, bodies, delays, refusals."""

from __future__ import annotations

import base64

import pytest

from store.format import topics
from tests.app.conftest import assert_error

pytestmark = pytest.mark.anyio

URL = "/api/topics/{}/messages"


async def test_single_message_is_stored_and_answered_as_a_list(api):
    r = await api.client.post(URL.format("Orders"), json={"body": "hello", "tags": "TagA", "keys": ["k1", "k2"],
                                                          "properties": {"region": "eu"}})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["ok"] is True and len(body["results"]) == 1
    result = body["results"][0]
    assert set(result) == {"offset_msg_id", "unique_key", "topic", "queue_id", "queue_offset", "phys_offset",
                           "store_timestamp"}
    assert result["topic"] == "Orders" and result["queue_offset"] == 0
    stored = api.store.get_by_offset_id(result["offset_msg_id"])
    assert stored.body == b"hello" and stored.tags == "TagA" and stored.keys == ["k1", "k2"]
    assert stored.properties["region"] == "eu"
    assert stored.unique_key == result["unique_key"] and stored.phys_offset == result["phys_offset"]
    assert api.store.get_by_queue_offset("Orders", result["queue_id"], 0).phys_offset == result["phys_offset"]


async def test_a_list_is_put_in_order(api):
    r = await api.client.post(URL.format("Orders"), json=[{"body": f"m{i}", "queue_id": 1} for i in range(3)])
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [x["queue_offset"] for x in results] == [0, 1, 2]
    assert all(x["queue_id"] == 1 for x in results)
    assert [api.store.read(x["phys_offset"]).body for x in results] == [b"m0", b"m1", b"m2"]
    assert results[0]["phys_offset"] < results[1]["phys_offset"] < results[2]["phys_offset"]


async def test_binary_body_in_base64(api):
    raw = bytes(range(256))
    r = await api.client.post(URL.format("Blobs"), json={"body_base64": base64.b64encode(raw).decode()})
    assert r.status_code == 200, r.text
    assert api.store.read(r.json()["results"][0]["phys_offset"]).body == raw


async def test_bad_base64_is_400_and_nothing_is_stored(api):
    r = await api.client.post(URL.format("Blobs"), json=[{"body": "fine"}, {"body_base64": "not base64!!"}])
    assert_error(r, 400, "message 1", "base64")
    assert "Blobs" not in api.store.topics()


@pytest.mark.parametrize("payload", [{"body": "a", "body_base64": "YQ=="}, {"tags": "no body"}])
async def test_exactly_one_body_field(api, payload):
    assert_error(await api.client.post(URL.format("Orders"), json=payload), 422, "exactly one of 'body'")


async def test_invalid_topic_name_is_400(api):
    assert_error(await api.client.post(URL.format("bad topic!"), json={"body": "x"}), 400, "invalid topic")


@pytest.mark.parametrize("topic", [topics.SCHEDULE_TOPIC, "%RETRY%group1", "%DLQ%group1", topics.TRACE_TOPIC,
                                   "rmq_sys_wheel_timer", "rmq_sys_anything", "RMQ_SYS_TRANS_HALF_TOPIC", "TBW102"])
async def test_system_topics_are_refused(api, topic):
    r = await api.client.post(URL.format(topic.replace("%", "%25")), json={"body": "x"})
    assert_error(r, 403, topic, "system topic")
    assert topic not in api.store.topics()


async def test_too_many_or_no_messages_is_400(api):
    assert_error(await api.client.post(URL.format("Orders"), json=[{"body": "x"}] * 1001), 400, "at most 1000")
    assert_error(await api.client.post(URL.format("Orders"), json=[]), 400, "no messages")
    r = await api.client.post(URL.format("Orders"), json=[{"body": "x"}] * 1000)
    assert r.status_code == 200 and len(r.json()["results"]) == 1000


async def test_delay_level_goes_to_the_schedule_topic(api):
    r = await api.client.post(URL.format("Orders"), json={"body": "later", "delay_level": 3, "queue_id": 2})
    assert r.status_code == 200, r.text
    result = r.json()["results"][0]
    assert result["topic"] == topics.SCHEDULE_TOPIC and result["queue_id"] == 2  # level 3 -> queue 2
    stored = api.store.read(result["phys_offset"])
    assert stored.properties[topics.REAL_TOPIC] == "Orders" and stored.properties[topics.REAL_QID] == "2"
    assert stored.properties[topics.DELAY] == "3"


async def test_deliver_at_waits_in_the_timer_topic_until_due(api, clock):
    at = clock.now_ms() + 90_000
    r = await api.client.post(URL.format("Orders"), json={"body": "at a time", "deliver_at_ms": at})
    assert r.status_code == 200, r.text
    result = r.json()["results"][0]
    stored = api.store.read(result["phys_offset"])
    assert stored.properties[topics.TIMER_DELIVER_MS] == str(at)
    assert result["topic"] == topics.TIMER_TOPIC
    clock.set(at - 1)
    assert api.store.deliver_due().delivered == []
    clock.set(at)
    [delivered] = api.store.deliver_due().delivered
    assert (delivered.topic, delivered.unique_key) == ("Orders", result["unique_key"])


async def test_delay_level_and_deliver_at_together_are_400(api, clock):
    r = await api.client.post(URL.format("Orders"), json={"body": "x", "delay_level": 2,
                                                          "deliver_at_ms": clock.now_ms() + 1000})
    assert_error(r, 400, "not both")


@pytest.mark.parametrize("name", [topics.DELAY, topics.UNIQ_KEY, topics.TIMER_DELIVER_MS, topics.REAL_TOPIC])
async def test_reserved_properties_are_400(api, name):
    assert_error(await api.client.post(URL.format("Orders"), json={"body": "x", "properties": {name: "1"}}), 400,
                 name, "reserved")


@pytest.mark.parametrize(("payload", "field"), [
    ({"body": "x", "keys": "k1"}, "keys"),
    ({"body": "x", "delay_level": "2"}, "delay_level"),
    ({"body": "x", "delay_level": -1}, "delay_level"),
    ({"body": "x", "queue_id": 1.5}, "queue_id"),
    ({"body": "x", "tag": "typo"}, "tag"),
    ({"body": "x", "properties": {"a": 1}}, "properties.a"),
    ({"body": "x", "properties": {"one": 1}}, "body.properties.one"),
    ([{"body": "x"}, {"body": 5}], "body[1].body"),
])
async def test_wrong_types_are_422_naming_the_field(api, payload, field):
    assert_error(await api.client.post(URL.format("Orders"), json=payload), 422, field)


async def test_queue_out_of_range_is_400(api):
    assert_error(await api.client.post(URL.format("Orders"), json={"body": "x", "queue_id": 99}), 400, "queue")


async def test_malformed_json_is_400(api):
    r = await api.client.post(URL.format("Orders"), content=b'{"body": ', headers={"content-type": "application/json"})
    assert_error(r, 400, "malformed JSON")
