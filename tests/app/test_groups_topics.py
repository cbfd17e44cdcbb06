"""Consumer groups and topics over the REST API."""

from __future__ import annotations

import pytest

from store.broker.metadata import DEFAULT_RETRY_MAX_TIMES
from tests.app.conftest import assert_error, make_settings, put_messages, running

pytestmark = pytest.mark.anyio

DEFAULTS = {"max_reconsume_times": DEFAULT_RETRY_MAX_TIMES, "consume_mode": "concurrent",
            "message_model": "clustering", "retry_queues": 1, "consume_enable": True, "message_model_recorded": True}


async def test_an_unconfigured_group_has_the_defaults(api):
    assert (await api.client.get("/api/groups")).json() == {"ok": True, "groups": []}
    r = await api.client.get("/api/groups/billing")
    assert r.status_code == 200
    group = r.json()["group"]
    assert len(group.pop("version")) == 12
    assert group == {"name": "billing", "configured": False, **DEFAULTS}
    assert (r.json()["queues"], r.json()["lag"]) == ([], 0)


async def test_put_creates_then_updates_a_group(api):
    r = await api.client.put("/api/groups/billing", json={"max_reconsume_times": 3, "consume_mode": "orderly"})
    assert r.status_code == 200, r.text
    first = r.json()["group"]
    version = first.pop("version")
    assert first == {**DEFAULTS, "name": "billing", "configured": True, "max_reconsume_times": 3,
                     "consume_mode": "orderly"}
    r = await api.client.put("/api/groups/billing", json={"retry_queues": 2, "consume_enable": False,
                                                          "expected_version": version})
    group = r.json()["group"]
    assert group["max_reconsume_times"] == 3 and group["consume_mode"] == "orderly"  # kept
    assert group["retry_queues"] == 2 and group["consume_enable"] is False
    assert (await api.client.get("/api/groups/billing")).json()["group"] == group
    assert [g["name"] for g in (await api.client.get("/api/groups")).json()["groups"]] == ["billing"]
    config = api.store.metadata.group("billing")
    assert (config.max_reconsume_times, config.retry_queues, config.consume_enable) == (3, 2, False)


async def test_group_settings_survive_a_restart(data_dir):
    settings = make_settings(data_dir)
    async with running(settings) as api:
        r = await api.client.put("/api/groups/g1", json={"message_model": "broadcast"})
        assert r.status_code == 200
    async with running(settings) as api:
        assert (await api.client.get("/api/groups/g1")).json()["group"]["message_model"] == "broadcast"


@pytest.mark.parametrize(("payload", "fragment"), [
    ({"consume_mode": "sideways"}, "consume mode"),
    ({"message_model": "everyone"}, "message model"),
    ({"max_reconsume_times": -1}, "max reconsume times"),
    ({"max_reconsume_times": 10_001}, "max reconsume times"),
    ({"retry_queues": 0}, "retry queue"),
])
async def test_bad_group_values_are_400_and_change_nothing(api, payload, fragment):
    assert_error(await api.client.put("/api/groups/g1", json=payload), 400, fragment)
    assert (await api.client.get("/api/groups")).json()["groups"] == []


async def test_bad_group_names_are_400(api):
    assert_error(await api.client.put("/api/groups/bad group", json={}), 400, "invalid group name")
    assert_error(await api.client.get("/api/groups/bad group"), 400, "invalid group name")


@pytest.mark.parametrize("payload", [{"retry_queues": "2"}, {"consume_enable": "yes"}, {"colour": "red"}])
async def test_wrong_group_types_are_422(api, payload):
    assert_error(await api.client.put("/api/groups/g1", json=payload), 422, next(iter(payload)))


async def test_topics_list_queue_offsets(api):
    await put_messages(api, "Orders", [{"body": "x", "queue_id": 1}] * 3)
    r = await api.client.get("/api/topics")
    assert r.status_code == 200
    orders = next(t for t in r.json()["topics"] if t["name"] == "Orders")
    assert orders["queues"] == 4 and orders["perm"] == 6 and orders["readable"] and orders["writable"]
    assert orders["kind"] == "original" and orders["system"] is False
    assert orders["queue_offsets"] == [
        {"queue_id": 0, "min_offset": 0, "max_offset": 0}, {"queue_id": 1, "min_offset": 0, "max_offset": 3},
        {"queue_id": 2, "min_offset": 0, "max_offset": 0}, {"queue_id": 3, "min_offset": 0, "max_offset": 0}]


async def test_put_topic_creates_and_changes(api):
    r = await api.client.put("/api/topics/Payments", json={"queues": 8})
    assert r.status_code == 200, r.text
    assert r.json()["created"] is True
    assert r.json()["topic"]["queues"] == 8 and len(r.json()["topic"]["queue_offsets"]) == 8
    r = await api.client.put("/api/topics/Payments", json={"perm": 4})
    topic = r.json()["topic"]
    assert r.json()["created"] is False and topic["queues"] == 8 and topic["writable"] is False
    assert api.store.metadata.topic("Payments").perm == 4


@pytest.mark.parametrize(("topic", "payload", "status", "fragment"), [
    ("Payments", {"queues": 0}, 400, "queue count"),
    ("Payments", {"queues": 5000}, 400, "queue count"),
    ("Payments", {"perm": 64}, 400, "permission"),
    ("bad topic!", {}, 400, "invalid topic"),
    ("SCHEDULE_TOPIC_XXXX", {"queues": 2}, 403, "system topic"),
    ("Payments", {"queues": "8"}, 422, "queues"),
])
async def test_bad_topic_changes_are_refused(api, topic, payload, status, fragment):
    assert_error(await api.client.put(f"/api/topics/{topic}", json=payload), status, fragment)
    assert api.store.metadata.topic("Payments") is None


async def test_a_group_edit_made_from_older_settings_is_refused(api):
    version = (await api.client.put("/api/groups/g2", json={"max_reconsume_times": 3})).json()["group"]["version"]
    r = await api.client.put("/api/groups/g2", json={"max_reconsume_times": 4}, headers={"If-Match": f'"{version}"'})
    assert r.status_code == 200
    stale = await api.client.put("/api/groups/g2", json={"max_reconsume_times": 9, "expected_version": version})
    assert stale.status_code == 409 and "changed since version" in stale.json()["error"]
    assert api.store.metadata.group("g2").max_reconsume_times == 4
