"""Where a resend may go: an existing topic the role may write, or a retry topic of the dead
letter's own group; never a topic it creates, never another group's retry topic."""

from __future__ import annotations

import pytest

from store.format import topics
from tests.app.conftest import assert_error, bearer
from tests.app.test_resend import BULK, GROUP, OTHER, URL, copies_in, dead_letter, resends

pytestmark = pytest.mark.anyio


async def token(api, role: str) -> str:
    r = await api.client.post("/api/tokens", json={"name": f"t-{role}", "role": role})
    assert r.status_code == 201, r.text
    return r.json()["value"]


async def test_a_resend_to_a_topic_that_does_not_exist_creates_nothing(api):
    _, dead_id = await dead_letter(api)
    r = await api.client.post(BULK, json={"message_ids": [dead_id], "destination": {"topic": "Brand_New"}})
    assert_error(r, 404, "no topic Brand_New", "existing topic")
    assert api.store.metadata.topic("Brand_New") is None
    assert_error(await api.client.post(URL.format(dead_id), json={"destination": {"topic": "Brand_New"}}), 404)
    assert api.store.metadata.topic("Brand_New") is None and resends(api) == []


async def test_support_resends_to_its_routes_but_not_to_a_named_topic(api):
    put, dead_id = await dead_letter(api)
    await api.client.put("/api/topics/Audit_Copy", json={"queues": 1})
    support = bearer(await token(api, "support"))
    r = await api.client.post(BULK, json={"message_ids": [dead_id], "destination": {"topic": "Audit_Copy"}},
                              headers=support)
    assert_error(r, 403, "t-support (support)", "operator or admin")
    assert copies_in(api, "Audit_Copy", put["unique_key"]) == []
    r = await api.client.post(BULK, json={"message_ids": [dead_id], "destination": {"topic": "Audit_Copy"}})
    assert r.status_code == 200 and r.json()["ok"] is True  # the operator and admin roles may write it
    assert len(copies_in(api, "Audit_Copy", put["unique_key"])) == 1


async def test_a_read_only_topic_is_refused(api):
    _, dead_id = await dead_letter(api)
    await api.client.put("/api/topics/Frozen", json={"queues": 1, "perm": 4})
    r = await api.client.post(BULK, json={"message_ids": [dead_id], "destination": {"topic": "Frozen"}})
    assert_error(r, 400, "Frozen", "does not accept messages")
    assert resends(api) == []


async def test_only_the_dead_letters_own_group_retry_topic(api):
    put, dead_id = await dead_letter(api)
    support = bearer(await token(api, "support"))
    for foreign in (topics.retry_topic(OTHER), topics.pop_retry_topic(OTHER, "Orders")):
        r = await api.client.post(BULK, json={"message_ids": [dead_id], "destination": {"topic": foreign}},
                                  headers=support)
        assert r.status_code == 400 and r.json()["ok"] is False, r.text
        [item] = r.json()["results"]
        assert item["status"] == "failed" and foreign in item["error"]
        assert f"only to a retry topic of group {GROUP}" in r.json()["error"]
        assert_error(await api.client.post(URL.format(dead_id), json={"destination": {"topic": foreign}},
                                           headers=support), 400, f"only to a retry topic of group {GROUP}")
        assert copies_in(api, foreign, put["unique_key"]) == []
    own = topics.retry_topic(GROUP)
    r = await api.client.post(BULK, json={"message_ids": [dead_id], "destination": {"topic": own}}, headers=support)
    assert r.status_code == 200 and r.json()["results"][0]["destination"] == own


async def test_the_inbox_offers_another_topic_only_to_roles_that_may_write_one(api):
    await dead_letter(api)
    page = f"/groups/{GROUP}/dead-letters"
    support = await api.client.get(page, headers={"Accept": "text/html", **bearer(await token(api, "support"))})
    assert support.status_code == 200 and "Resend to" in support.text
    assert 'value="named"' not in support.text and 'name="topic"' not in support.text
    operator = await api.client.get(page, headers={"Accept": "text/html", **bearer(await token(api, "operator"))})
    assert 'value="named"' in operator.text and 'name="topic"' in operator.text
