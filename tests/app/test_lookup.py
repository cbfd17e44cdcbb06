"""Finding messages over REST: by offset id, key, unique key, queue offset and the search box,
across every topic when none is given, saying when a result is incomplete."""

from __future__ import annotations

import pytest

from store.format import topics
from tests.app.conftest import assert_error, put_messages

pytestmark = pytest.mark.anyio


async def produce(api, topic="Orders", **fields) -> dict:
    [result] = await put_messages(api, topic, {"body": "x", **fields})
    return result


async def get_ok(api, url, **params) -> dict:
    r = await api.client.get(url, params=params)
    assert r.status_code == 200, r.text
    return r.json()


async def test_by_offset_id_and_by_queue_offset(api):
    put = await produce(api, keys=["order-7"], tags="paid")
    found = await get_ok(api, f"/api/messages/by-id/{put['offset_msg_id']}")
    assert found["message"]["keys"] == ["order-7"] and found["message"]["copy"] == "original"
    at = await get_ok(api, f"/api/topics/Orders/queues/{put['queue_id']}/messages/{put['queue_offset']}")
    assert at["message"]["offset_msg_id"] == put["offset_msg_id"]


async def test_a_key_without_a_topic_finds_the_dead_letter_copy_too(api):
    await api.client.put("/api/groups/G", json={"max_reconsume_times": 0})
    put = await produce(api, keys=["order-9"])
    api.store.send_back(put["phys_offset"], "G")
    found = await get_ok(api, "/api/messages/by-key", key="order-9")
    assert [m["copy"] for m in found["messages"]] == ["dead_letter", "original"]
    assert "%DLQ%G" in found["searched_topics"] and topics.TRACE_TOPIC not in found["searched_topics"]
    assert not found["truncated"]
    only = await get_ok(api, "/api/messages/by-key", key="order-9", topic="Orders")
    assert [m["topic"] for m in only["messages"]] == ["Orders"] and only["searched_topics"] == ["Orders"]
    copies = await get_ok(api, f"/api/messages/by-unique-key/{put['unique_key']}")
    assert {m["topic"] for m in copies["messages"]} == {"Orders", "%DLQ%G"}


async def test_an_incomplete_result_says_so(api):
    for _ in range(3):
        await produce(api, keys=["busy"])
    found = await get_ok(api, "/api/messages/by-key", key="busy", max=2)
    assert len(found["messages"]) == 2 and found["truncated"] is True


async def test_the_search_box_recognises_what_it_is_given(api):
    put = await produce(api, keys=["order-1"])
    by_offset_id = await get_ok(api, "/api/search", q=put["offset_msg_id"])
    by_unique_key = await get_ok(api, "/api/search", q=put["unique_key"])
    by_key = await get_ok(api, "/api/search", q="order-1")
    by_address = await get_ok(api, "/api/search", q=f"Orders:{put['queue_id']}:{put['queue_offset']}")
    assert [r["recognised_as"] for r in (by_offset_id, by_unique_key, by_key, by_address)] == [
        "offset message id", "unique key", "key", "queue offset"]
    for result in (by_offset_id, by_unique_key, by_key, by_address):
        assert [m["offset_msg_id"] for m in result["messages"]] == [put["offset_msg_id"]]
    nothing = await get_ok(api, "/api/search", q="no-such-key")
    assert nothing["messages"] == [] and nothing["truncated"] is False


@pytest.mark.parametrize(("url", "status", "fragment"), [
    ("/api/messages/by-id/nothex", 400, "malformed offset message id"),
    ("/api/messages/by-id/" + "7F0000010000291F" + "0" * 16, 404, "no message"),
    ("/api/messages/by-key?key=a%20b", 400, "without spaces"),
    ("/api/messages/by-key?key=k&topic=bad%20topic!", 400, "invalid topic"),
    ("/api/messages/by-key?key=k&begin=10&end=5", 400, "begins after it ends"),
    ("/api/messages/by-key?key=k&max=0", 422, "max"),
    ("/api/messages/by-key", 422, "key"),
    ("/api/topics/Orders/queues/0/messages/5", 404, "Orders"),
    ("/api/topics/Orders/queues/-1/messages/0", 422, "queue_id"),
    ("/api/search?q=%20", 400, "type an offset message id"),
    ("/api/search?q=Orders:0:99", 404, "Orders"),
])
async def test_bad_or_unknown_lookups_are_explained(api, url, status, fragment):
    await produce(api)
    assert_error(await api.client.get(url), status, fragment)


async def test_rest_search_pages_with_a_cursor_and_an_unknown_topic_is_404(api, clock):
    for n in range(5):
        await put_messages(api, "Paged", {"body": f"m{n}", "keys": ["same-key"]})
        if n % 2:
            clock.advance(1)
    seen, cursor = [], None
    while True:
        params = {"q": "same-key", "max": 2, **({"cursor": cursor} if cursor else {})}
        body = (await api.client.get("/api/search", params=params)).json()
        seen += [m["body_text"] for m in body["messages"]]
        cursor = body["next_cursor"]
        assert body["truncated"] is (cursor is not None)
        if cursor is None:
            break
    assert sorted(seen) == [f"m{n}" for n in range(5)] and len(seen) == 5
    assert_error(await api.client.get("/api/search", params={"q": "same-key", "topic": "NoSuchTopic"}), 404,
                 "no topic NoSuchTopic")
    assert_error(await api.client.get("/api/search", params={"q": "same-key", "cursor": "bad"}), 400, "cursor")
