"""One rule for ids and names in the REST API: each is taken exactly as given. One that does not
look like an id (or a name) is refused with 400 saying what one looks like; nothing is stripped,
so an id with a space or a newline around it is refused everywhere, never trimmed in one place
and missed in another. The OpenAPI document declares the same rules."""

from __future__ import annotations

import pytest

from tests.app.conftest import assert_error, put_messages

pytestmark = pytest.mark.anyio

GROUP = "GID_rules"
OFFSET_ID_LOOKS = "an offset message id is 32 or 56 hex characters"


async def dead_letter(api) -> str:
    """The offset message id of a dead letter of GROUP (failed once, with no retries)."""
    assert (await api.client.put(f"/api/groups/{GROUP}", json={"max_reconsume_times": 0})).status_code == 200
    await put_messages(api, "Orders", {"body": "poison"})
    r = await api.client.post(f"/api/groups/{GROUP}/receive", json={"topic": "Orders"})
    [got] = r.json()["messages"]
    r = await api.client.post(f"/api/groups/{GROUP}/nack", json={"receipt_handle": got["receipt_handle"]})
    assert r.status_code == 200, r.text
    r = await api.client.get(f"/api/dlq/{GROUP}/messages")
    [dead] = r.json()["messages"]
    return dead["offset_msg_id"]


@pytest.mark.parametrize("around", ["%20{}", "{}%20", "%09{}", "{}%0A"])
async def test_an_offset_id_with_whitespace_around_it_is_refused_by_lookup_and_resend_alike(api, around):
    dead_id = await dead_letter(api)
    assert (await api.client.get(f"/api/messages/by-id/{dead_id}")).status_code == 200
    padded = around.format(dead_id)
    assert_error(await api.client.get(f"/api/messages/by-id/{padded}"), 400, "malformed offset message id",
                 OFFSET_ID_LOOKS)
    assert_error(await api.client.post(f"/api/messages/{padded}/reveal"), 400, OFFSET_ID_LOOKS)
    assert_error(await api.client.post(f"/api/messages/{padded}/resend"), 400, OFFSET_ID_LOOKS)
    r = await api.client.post(f"/api/dlq/{GROUP}/resend", json={"message_ids": [padded.replace("%20", " ")
                                                                               .replace("%09", "\t")
                                                                               .replace("%0A", "\n")]})
    assert_error(r, 400, "malformed id", "exactly as given")
    r = await api.client.get(f"/api/dlq/{GROUP}/messages")
    assert r.json()["messages"][0]["state"] == "waiting"  # nothing was resent


async def test_the_id_as_given_still_works(api):
    dead_id = await dead_letter(api)
    assert (await api.client.get(f"/api/messages/by-id/{dead_id.lower()}")).status_code == 200  # hex: any case
    r = await api.client.post(f"/api/messages/{dead_id}/resend")
    assert r.status_code == 200, r.text
    assert r.json()["dead_letter"] == dead_id


@pytest.mark.parametrize("url", ["/api/messages/{}%0A/timeline", "/api/messages/%20{}/timeline"])
async def test_the_timeline_takes_ids_exactly_as_given_too(api, url):
    [put] = await put_messages(api, "Orders", {"body": "x"})
    assert (await api.client.get(url.format(put["unique_key"]).replace("%0A", "").replace("%20", ""))).status_code \
        == 200
    assert_error(await api.client.get(url.format(put["unique_key"])), 400, "malformed message id",
                 "16 to 128 hex characters")


@pytest.mark.parametrize(("method", "url", "fragment"), [
    ("PUT", "/api/topics/Orders%0A", "invalid topic"),
    ("POST", "/api/topics/Orders%0A/messages", "invalid topic"),
    ("PUT", "/api/groups/GID_a%0A", "invalid group name"),
    ("GET", "/api/groups/GID_a%0A", "invalid group name"),
])
async def test_a_name_ending_in_a_newline_is_refused(api, method, url, fragment):
    body = {"body": "x"} if url.endswith("/messages") else {}
    assert_error(await api.client.request(method, url, json=body), 400, fragment, "letters, digits")
    assert [t["name"] for t in (await api.client.get("/api/topics")).json()["topics"] if "\n" in t["name"]] == []
    assert (await api.client.get("/api/groups")).json()["groups"] == []


async def test_a_consumer_group_name_leaves_room_for_its_retry_topic(api):
    await put_messages(api, "Orders", {"body": "x"})
    group = "G" * 121  # %RETRY% + 121 characters is longer than the 127 a topic name may have
    r = await api.client.post(f"/api/groups/{group}/receive", json={"topic": "Orders"})
    assert_error(r, 400, "invalid group name", "1 to 120")
    r = await api.client.post(f"/api/groups/{'G' * 120}/receive", json={"topic": "Orders"})
    assert r.status_code == 200, r.text


async def test_the_openapi_document_declares_the_rules(api):
    doc = (await api.client.get("/openapi.json")).json()

    def parameter(path: str, method: str, name: str) -> dict:
        [found] = [p for p in doc["paths"][path][method]["parameters"] if p["name"] == name]
        return found["schema"]

    offset_id = parameter("/api/messages/by-id/{offset_msg_id}", "get", "offset_msg_id")
    assert offset_id["pattern"] == "^(?:[0-9A-Fa-f]{32}|[0-9A-Fa-f]{56})$"
    assert (offset_id["minLength"], offset_id["maxLength"]) == (32, 56)
    assert parameter("/api/messages/{offset_msg_id}/resend", "post", "offset_msg_id") == offset_id
    topic = parameter("/api/topics/{topic}/messages", "post", "topic")
    assert (topic["pattern"], topic["minLength"], topic["maxLength"]) == ("^[%|a-zA-Z0-9_-]+$", 1, 127)
    group = parameter("/api/groups/{group}", "get", "group")
    assert (group["pattern"], group["maxLength"]) == ("^[%|a-zA-Z0-9_-]+$", 255)
    assert parameter("/api/groups/{group}/receive", "post", "group")["maxLength"] == 120
    assert parameter("/api/messages/{message_id}/timeline", "get", "message_id")["pattern"] == "^[0-9A-Fa-f]{16,128}$"
    produce = doc["components"]["schemas"]["ProduceMessage"]["properties"]
    assert produce["keys"]["items"]["pattern"] == "^[^ \\x01\\x02]+$"
    assert produce["properties"]["propertyNames"]["pattern"] == "^[^\\x01\\x02]+$"
    assert "UNIQ_KEY" in produce["properties"]["propertyNames"]["not"]["enum"]
    receive = doc["components"]["schemas"]["ReceiveRequest"]["properties"]["topic"]
    assert receive["pattern"] == topic["pattern"] and receive["maxLength"] == 127
