"""GET /api/topics/{topic}/queues/{queue_id}/messages (a read-only pull) and PUT /api/groups/{group}/offsets."""

from __future__ import annotations

import pytest

from store.format import topics
from tests.app.conftest import assert_error, put_messages

pytestmark = pytest.mark.anyio

TOPIC = "Orders"
URL = "/api/topics/{}/queues/{}/messages"


@pytest.fixture
async def five(api) -> list[dict]:
    """Five messages in queue 1 of Orders, tags A, B, A, B, A."""
    return await put_messages(api, TOPIC, [{"body": f"m{i}", "tags": "AB"[i % 2], "queue_id": 1} for i in range(5)])


async def test_a_window_from_an_offset(api, five):
    r = await api.client.get(URL.format(TOPIC, 1), params={"offset": 1, "max": 2})
    assert r.status_code == 200, r.text
    body = r.json()
    assert {k: v for k, v in body.items() if k != "messages"} == {
        "ok": True, "topic": TOPIC, "queue_id": 1, "offset": 1, "next_offset": 3, "min_offset": 0, "max_offset": 5}
    assert [m["body_text"] for m in body["messages"]] == ["m1", "m2"]
    assert [m["queue_offset"] for m in body["messages"]] == [1, 2]
    assert body["messages"][0]["unique_key"] == five[1]["unique_key"]


async def test_defaults_read_from_the_start_and_tags_filter(api, five):
    body = (await api.client.get(URL.format(TOPIC, 1))).json()
    assert [m["queue_offset"] for m in body["messages"]] == [0, 1, 2, 3, 4] and body["next_offset"] == 5
    body = (await api.client.get(URL.format(TOPIC, 1), params={"tags": "A"})).json()
    assert [m["queue_offset"] for m in body["messages"]] == [0, 2, 4]
    body = (await api.client.get(URL.format(TOPIC, 1), params={"tags": "B || C", "max": 1})).json()
    assert [m["queue_offset"] for m in body["messages"]] == [1] and body["next_offset"] == 2


async def test_offsets_outside_the_queue_read_from_its_nearest_end(api, five):
    body = (await api.client.get(URL.format(TOPIC, 1), params={"offset": 99})).json()
    assert body["messages"] == [] and body["offset"] == 5 and body["next_offset"] == 5
    body = (await api.client.get(URL.format(TOPIC, 0))).json()  # a queue of the topic with no message
    assert body["messages"] == [] and (body["min_offset"], body["max_offset"]) == (0, 0)


async def test_the_view_records_no_delivery(api, five):
    r = await api.client.get(URL.format(TOPIC, 1), params={"group": "GID_view"})
    assert r.status_code == 200 and r.json()["messages"], r.text
    kinds = [e.kind.value for e in api.store.timeline(five[0]["unique_key"])]
    assert kinds == ["stored"]
    assert api.store.offsets.get(TOPIC, "GID_view", 1) is None


async def test_commit_then_read_from_the_group_offset(api, five):
    r = await api.client.put("/api/groups/GID_pull/offsets", json={"topic": TOPIC, "queue_id": 1, "offset": 3})
    assert r.status_code == 200, r.text
    assert r.json() == {"ok": True, "group": "GID_pull", "topic": TOPIC, "queue_id": 1, "offset": 3,
                        "previous": None}
    assert api.store.offsets.get(TOPIC, "GID_pull", 1) == 3
    body = (await api.client.get(URL.format(TOPIC, 1), params={"group": "GID_pull"})).json()
    assert body["offset"] == 3 and [m["queue_offset"] for m in body["messages"]] == [3, 4]
    body = (await api.client.get(URL.format(TOPIC, 1), params={"group": "GID_pull", "offset": 0})).json()
    assert body["offset"] == 0  # an explicit offset wins
    r = await api.client.put("/api/groups/GID_pull/offsets", json={"topic": TOPIC, "queue_id": 1, "offset": 5})
    assert r.json()["previous"] == 3 and r.json()["offset"] == 5
    r = await api.client.put("/api/groups/GID_pull/offsets", json={"topic": TOPIC, "queue_id": 1, "offset": 0})
    assert r.status_code == 200 and r.json()["previous"] == 5  # a reset backwards is allowed


@pytest.mark.parametrize(("topic", "queue_id", "params", "status", "fragment"), [
    ("NoSuchTopic", 0, {}, 404, "no topic NoSuchTopic"),
    ("bad!topic", 0, {}, 400, "invalid topic"),
    (TOPIC, 4, {}, 400, "queue ids 0 to 3"),
    (TOPIC, -1, {}, 422, "queue_id"),
    (TOPIC, "one", {}, 422, "queue_id"),
    (TOPIC, 1, {"max": 0}, 422, "max"),
    (TOPIC, 1, {"max": 1025}, 422, "max"),
    (TOPIC, 1, {"offset": -1}, 422, "offset"),
    (TOPIC, 1, {"offset": "x"}, 422, "offset"),
    (TOPIC, 1, {"tags": "A ||"}, 400, "tag expression"),
    (TOPIC, 1, {"group": "bad group"}, 400, "group"),
])
async def test_read_refuses_bad_input(api, five, topic, queue_id, params, status, fragment):
    assert_error(await api.client.get(URL.format(topic, queue_id), params=params), status, fragment)


async def test_a_dead_letter_topic_is_refused(api, five):
    dlq = topics.dlq_topic("GID_x")
    api.store.send_back(five[0]["phys_offset"], "GID_x", delay_level=-1)  # straight to the DLQ
    assert_error(await api.client.get(URL.format("%25DLQ%25GID_x", 0)), 400, dlq, "dead-letter topic")


@pytest.mark.parametrize(("group", "payload", "status", "fragment"), [
    ("GID_pull", {"topic": TOPIC, "queue_id": 1, "offset": 6}, 400, "outside queue"),
    ("GID_pull", {"topic": TOPIC, "queue_id": 1, "offset": -1}, 422, "offset"),
    ("GID_pull", {"topic": TOPIC, "queue_id": 1, "offset": "2"}, 422, "offset"),
    ("GID_pull", {"topic": TOPIC, "queue_id": 1}, 422, "offset"),
    ("GID_pull", {"topic": TOPIC, "offset": 1}, 422, "queue_id"),
    ("GID_pull", {"queue_id": 1, "offset": 1}, 422, "topic"),
    ("GID_pull", {"topic": TOPIC, "queue_id": 1, "offset": 1, "extra": 1}, 422, "extra"),
    ("GID_pull", {"topic": TOPIC, "queue_id": 9, "offset": 0}, 400, "queue ids 0 to 3"),
    ("GID_pull", {"topic": "Nope", "queue_id": 0, "offset": 0}, 404, "no topic Nope"),
    ("bad group!", {"topic": TOPIC, "queue_id": 1, "offset": 1}, 400, "group"),
])
async def test_commit_refuses_bad_input(api, five, group, payload, status, fragment):
    assert_error(await api.client.put(f"/api/groups/{group}/offsets", json=payload), status, fragment)
    assert api.store.offsets.get(TOPIC, "GID_pull", 1) is None
