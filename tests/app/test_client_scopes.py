"""Client tokens (a producing or consuming service's credentials): never the trace topic or
another group's retry topic, and optionally limited to some topics and groups."""

from __future__ import annotations

import pytest

from store.format import topics
from tests.app.conftest import ADMIN_TOKEN, TEST_HOST, assert_error, bearer, put_messages

pytestmark = pytest.mark.anyio
GROUP = "GID_billing"


async def client_token(api, name: str = "svc", **scopes) -> dict[str, str]:
    r = await api.client.post("/api/tokens", json={"name": name, "role": "client", **scopes})
    assert r.status_code == 201, r.text
    return bearer(r.json()["value"])


async def receive(api, headers, group: str, topic: str):
    return await api.client.post(f"/api/groups/{group}/receive", json={"topic": topic, "max": 8}, headers=headers)


async def test_a_client_never_reads_the_trace_topic_or_another_groups_retry_topic(api):
    await put_messages(api, "Orders", {"body": "secret order"})
    svc = await client_token(api)
    for topic in (topics.TRACE_TOPIC, topics.retry_topic("GID_other"), topics.pop_retry_topic("GID_other", "Orders")):
        assert_error(await receive(api, svc, GROUP, topic), 403, "svc (client)", topic)
    assert (await receive(api, svc, GROUP, topics.retry_topic(GROUP))).status_code == 200  # its own retries
    r = await receive(api, svc, GROUP, "Orders")
    assert r.status_code == 200 and [m["body_text"] for m in r.json()["messages"]] == ["secret order"]


async def test_a_scoped_client_token_uses_its_topics_and_groups_only(api):
    r = await api.client.post("/api/tokens", json={"name": "billing", "role": "client", "topics": ["Orders"],
                                                   "groups": [GROUP]})
    assert r.status_code == 201, r.text
    assert (r.json()["token"]["topics"], r.json()["token"]["groups"]) == (["Orders"], [GROUP])
    svc = bearer(r.json()["value"])
    me = (await api.client.get("/api/me", headers=svc)).json()
    assert (me["name"], me["topics"], me["groups"]) == ("billing", ["Orders"], [GROUP])
    await put_messages(api, "Payments", {"body": "not yours"})
    assert (await api.client.post("/api/topics/Orders/messages", json={"body": "o"}, headers=svc)).status_code == 200
    r = await api.client.post("/api/topics/Payments/messages", json={"body": "p"}, headers=svc)
    assert_error(r, 403, "billing (client)", "Payments", "Orders")
    assert_error(await receive(api, svc, GROUP, "Payments"), 403, "Payments")
    assert_error(await receive(api, svc, "GID_other", "Orders"), 403, "GID_other", GROUP)
    got = await receive(api, svc, GROUP, "Orders")
    assert got.status_code == 200 and [m["body_text"] for m in got.json()["messages"]] == ["o"]
    handle = got.json()["messages"][0]["receipt_handle"]
    for action in ("ack", "nack"):
        assert_error(await api.client.post(f"/api/groups/GID_other/{action}", json={"receipt_handle": handle},
                                           headers=svc), 403, "GID_other")
    r = await api.client.post(f"/api/groups/{GROUP}/ack", json={"receipt_handle": handle}, headers=svc)
    assert r.status_code == 200, r.text
    listed = {t["name"]: t for t in (await api.client.get("/api/tokens")).json()["tokens"]}
    assert (listed["billing"]["topics"], listed["billing"]["groups"]) == (["Orders"], [GROUP])
    assert listed["bootstrap-admin"]["topics"] is None


async def test_scopes_belong_to_client_tokens_and_name_valid_names(api):
    r = await api.client.post("/api/tokens", json={"name": "op", "role": "operator", "topics": ["Orders"]})
    assert_error(r, 400, "client tokens")
    assert_error(await api.client.post("/api/tokens", json={"name": "c", "role": "client", "topics": ["bad topic!"]}),
                 400, "invalid topic")
    assert_error(await api.client.post("/api/tokens", json={"name": "c", "role": "client", "groups": []}), 400,
                 "at least one")


async def test_the_admin_page_makes_a_scoped_client_token(api):
    headers = {"Origin": f"http://{TEST_HOST}", **bearer(ADMIN_TOKEN), "Accept": "text/html"}
    page = await api.client.get("/admin", headers=headers)
    assert 'name="topics"' in page.text and 'name="groups"' in page.text
    r = await api.client.post("/admin/tokens", headers=headers,
                              data={"name": "from-page", "role": "client", "topics": "Orders Payments",
                                    "groups": GROUP})
    assert r.status_code == 200, r.text
    listed = {t["name"]: t for t in (await api.client.get("/api/tokens")).json()["tokens"]}
    assert (listed["from-page"]["topics"], listed["from-page"]["groups"]) == (["Orders", "Payments"], [GROUP])
